"""Training-run spec: batch, sequence, precision, optimizer and memory budget."""
from __future__ import annotations

from dataclasses import dataclass

from .fields import cached_hash, finite_number, non_negative_int, one_of, positive_int, require

PRECISIONS = ("bf16", "fp16", "fp32")
# Whose memory behaviour the estimate models (estimate/activations.py, estimate/memory.py): Megatron-Core with
# Transformer Engine (Korthikanti's selective recompute, distributed optimizer), or torchtitan (FSDP2, op-level
# selective activation checkpointing, eager PyTorch autograd).
TRAINERS = ("megatron", "torchtitan")  # each has a profile in estimate/trainers.py
# When data-parallel collectives run (estimate/trainers.py data_parallel_sync; docs/formulas.md §7): "trainer" takes
# the trainer's own default for the strategy's ZeRO stage and pipeline.
GRAD_SYNCS = ("trainer", "microbatch", "step")
PARAM_GATHERS = ("trainer", "forward-backward", "microbatch", "step")
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
# How model FLOPs (the MFU numerator) count the attention core under a causal mask (docs/formulas.md §2.6):
# "causal" = the unmasked half (Megatron-LM since core_r0.12), "full" = the whole s x s score matrix (PaLM App. B,
# torchtitan, Megatron before core_r0.12).
MFU_CONVENTIONS = ("causal", "full")


@dataclass(frozen=True)
class RunSpec:
    """What is trained: global batch in sequences, sequence length, dtypes and the memory budget per device."""

    __hash__ = cached_hash

    global_batch: int
    seq_len: int
    precision: str = "bf16"  # parameter and activation dtype
    grad_dtype: str = "fp32"  # main-gradient buffer dtype (Megatron keeps fp32 main grads for bf16)
    optimizer: str = "adam"  # fp32 master weights (for 16-bit params) + two fp32 moments
    flash_attention: bool = True
    memory_cap_bytes: int = 0  # 0 = the device capacity
    # None: the modelled CUDA context, workspaces and communicator buffers (estimate/reserve.py); bytes: a measured
    # reserve in their place. Allocator fragmentation is added either way.
    reserve_bytes: int | None = None
    trainer: str = "megatron"  # one of TRAINERS: what "selective" recompute keeps, model-state layout, loss path
    # One of GRAD_SYNCS: "microbatch" reduces gradients after every micro-batch's backward (ZeRO-2/3: straight into
    # the shard); "step" accumulates them in a full (unsharded) buffer and reduces once, after the last micro-batch
    # (with ZeRO-2/3 that buffer costs grad-dtype bytes per stage parameter).
    grad_sync: str = "trainer"
    # ZeRO-3 only, one of PARAM_GATHERS: "forward-backward" gathers the parameters for every micro-batch's forward
    # and again for its backward; "microbatch" keeps them gathered from forward to backward (one gather per
    # micro-batch); "step" keeps them gathered over the whole step (one gather per step). The last two hold the
    # stage's parameters unsharded.
    param_gather: str = "trainer"
    mfu_convention: str = "causal"  # one of MFU_CONVENTIONS: how MFU counts causal attention (reporting only)
    headroom_fraction: float = 0.0  # fraction of the capacity kept free: a stage may use capacity x (1 - f)

    def __post_init__(self):
        positive_int("global_batch", self.global_batch)
        positive_int("seq_len", self.seq_len)
        require(self.seq_len <= 1 << 24, "seq_len", self.seq_len, "expected at most 16,777,216 tokens")
        one_of("precision", self.precision, PRECISIONS)
        one_of("grad_dtype", self.grad_dtype, PRECISIONS)
        one_of("optimizer", self.optimizer, ("adam",))
        one_of("trainer", self.trainer, TRAINERS)
        one_of("grad_sync", self.grad_sync, GRAD_SYNCS)
        one_of("param_gather", self.param_gather, PARAM_GATHERS)
        one_of("mfu_convention", self.mfu_convention, MFU_CONVENTIONS)
        non_negative_int("memory_cap_bytes", self.memory_cap_bytes, 1 << 60)
        if self.reserve_bytes is not None:
            non_negative_int("reserve_bytes", self.reserve_bytes, 1 << 60)
            finite_number("reserve_bytes", self.reserve_bytes, 0, 1 << 50)
        finite_number("headroom_fraction", self.headroom_fraction, 0.0, 1.0)
        require(self.headroom_fraction < 1, "headroom_fraction", self.headroom_fraction,
                "expected a fraction >= 0 and < 1 of the capacity to keep free")

    @property
    def param_bytes(self) -> int:
        return DTYPE_BYTES[self.precision]

    @property
    def grad_bytes(self) -> int:
        return DTYPE_BYTES[self.grad_dtype]

    @property
    def activation_bytes(self) -> int:
        return DTYPE_BYTES[self.precision]

    @property
    def optimizer_state_bytes(self) -> int:
        """Adam: two fp32 moments, plus an fp32 master copy when parameters are 16-bit (ZeRO's K = 12)."""
        return 8 + (4 if self.param_bytes < 4 else 0)

    def capacity(self, device_memory: int) -> int:
        """Bytes a stage may use: the cap if one is set (never above the device), else the device memory, less the
        headroom kept free (capacity x (1 - headroom_fraction), rounded down)."""
        budget = min(self.memory_cap_bytes, device_memory) if self.memory_cap_bytes else device_memory
        return budget - self.headroom_bytes(device_memory)

    def headroom_bytes(self, device_memory: int) -> int:
        """Bytes of the cap (or device memory) kept free by `headroom_fraction`."""
        budget = min(self.memory_cap_bytes, device_memory) if self.memory_cap_bytes else device_memory
        return budget - int(budget * (1 - self.headroom_fraction)) if self.headroom_fraction else 0
