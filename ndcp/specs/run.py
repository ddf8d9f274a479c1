"""Training-run spec: batch, sequence, precision, optimizer and memory budget."""
from __future__ import annotations

from dataclasses import dataclass

from .fields import cached_hash, finite_number, non_negative_int, one_of, positive_int, require
from .units import GIB

PRECISIONS = ("bf16", "fp16", "fp32")
# Whose memory behaviour the estimate models (estimate/activations.py, estimate/memory.py): Megatron-Core with
# Transformer Engine (Korthikanti's selective recompute, distributed optimizer), or torchtitan (FSDP2, op-level
# selective activation checkpointing, eager PyTorch autograd).
TRAINERS = ("megatron", "torchtitan")  # each has a profile in estimate/trainers.py
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


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
    reserve_bytes: int = GIB  # allocator fragmentation, CUDA context and workspaces, added to every stage
    trainer: str = "megatron"  # one of TRAINERS: what "selective" recompute keeps, model-state layout, loss path

    def __post_init__(self):
        positive_int("global_batch", self.global_batch)
        positive_int("seq_len", self.seq_len)
        require(self.seq_len <= 1 << 24, "seq_len", self.seq_len, "expected at most 16,777,216 tokens")
        one_of("precision", self.precision, PRECISIONS)
        one_of("grad_dtype", self.grad_dtype, PRECISIONS)
        one_of("optimizer", self.optimizer, ("adam",))
        one_of("trainer", self.trainer, TRAINERS)
        non_negative_int("memory_cap_bytes", self.memory_cap_bytes, 1 << 60)
        non_negative_int("reserve_bytes", self.reserve_bytes, 1 << 60)
        finite_number("reserve_bytes", self.reserve_bytes, 0, 1 << 50)

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
        """Bytes a stage may use: the cap if one is set (never above the device), else the device memory."""
        return min(self.memory_cap_bytes, device_memory) if self.memory_cap_bytes else device_memory
