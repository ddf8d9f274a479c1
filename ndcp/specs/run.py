"""Training-run spec: batch, sequence, precision, optimizer and memory budget."""
from __future__ import annotations

from dataclasses import dataclass

from .fields import (cached_hash, finite_number, non_negative_int, one_of, positive_int, require,
                     state_without_hash)
from .trainer_behaviour import BEHAVIOURS, LOSS_KERNELS

PRECISIONS = ("bf16", "fp16", "fp32", "fp8")
GRAD_DTYPES = ("bf16", "fp16", "fp32")
# FP8 training (Transformer Engine recipes; docs/formulas.md §3.1): delayed = per-tensor scale from an amax history,
# tensorwise = per-tensor scale from the current amax, blockwise = 1x128 / 128x128 blocks (DeepSeek-V3 §3.3),
# mxfp8 = 32-element blocks with E8M0 scales (OCP MX spec v1.0; Blackwell only).
FP8_RECIPES = ("delayed", "tensorwise", "blockwise", "mxfp8")
OPTIMIZER_STATE_DTYPES = ("fp32", "bf16")  # Adam moments; bf16 = Megatron's precision-aware optimizer
# Whose memory behaviour the estimate models (estimate/activations.py, estimate/memory.py): Megatron-Core with
# Transformer Engine (Korthikanti's selective recompute, distributed optimizer), or torchtitan (FSDP2, op-level
# selective activation checkpointing, eager PyTorch autograd), or MindFormers (Megatron's memory behaviour, not
# verified, with its own recompute options: specs/trainer_behaviour.py MINDFORMERS).
TRAINERS = tuple(BEHAVIOURS)  # the names of specs/trainer_behaviour.py BEHAVIOURS (each a Trainer in ndcp/trainers)
# When data-parallel collectives run (estimate/trainers.py data_parallel_sync; docs/formulas.md §7): "trainer" takes
# the trainer's own default for the strategy's ZeRO stage and pipeline.
GRAD_SYNCS = ("trainer", "microbatch", "step")
PARAM_GATHERS = ("trainer", "forward-backward", "microbatch", "step")
# Which PyTorch FSDP runs the ZeRO-2/3 gradient reduction (estimate/data_parallel.py gradient_pass_bytes;
# docs/formulas.md §7.3): "trainer" takes the trainer's own (specs/trainer_behaviour.py TrainerBehaviour.fsdp).
FSDP_VERSIONS = ("trainer", "fsdp1", "fsdp2")
# fp8: the FP8 GEMMs' operand bytes; parameters, master weights and the activations between layers stay BF16 under
# FP8 (Transformer Engine keeps BF16 parameters and casts per GEMM), so param_bytes/activation_bytes are 2 for it.
FP32_BYTES = 4  # the one statement of an FP32 element's bytes: master weights, moments, amaxes, fp32 intermediates
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": FP32_BYTES, "fp8": 1}
# How model FLOPs (the MFU numerator) count the attention core under a causal mask (docs/formulas.md §2.6):
# "causal" = the unmasked half (Megatron-LM since core_r0.12), "full" = the whole s x s score matrix (PaLM App. B,
# torchtitan, Megatron before core_r0.12).
MFU_CONVENTIONS = ("causal", "full")
# Overlaps a run may ask for (estimate/overlap.py; docs/formulas.md §7.1): the MoE all-to-all with another
# micro-batch's compute (Megatron --overlap-moe-expert-parallel-comm), TP collectives with their GEMMs
# (--tp-comm-overlap), pipeline sends with compute (--overlap-p2p-communication).
OVERLAPS = ("ep", "tp", "p2p")
# How a MoE layer moves its tokens to the experts' ranks and back (Megatron-Core --moe-token-dispatcher-type;
# estimate/moe.py, docs/formulas.md §7.2): allgather (all-gather the EP group's tokens, reduce-scatter back),
# alltoall (one copy per token-expert pair to the expert's rank), flex (DeepEP / HybridEP: one copy per token and
# destination node over the scale-out network, fanned out over NVLink inside the node).
MOE_DISPATCHERS = ("alltoall", "allgather", "flex")
MAX_LOAD_IMBALANCE = 64.0
# The fused attention kernel (estimate/attention_kernels.py; docs/formulas.md §3.3): "fused" = the trainer's own, the
# kernels the device's flash efficiencies describe (FlashAttention-2 on Ampere, cuDNN as Transformer Engine runs it
# on Hopper); flash2 / flash3 = FlashAttention-2 / -3; cudnn = cuDNN's fused attention; triton = FlashAttention in
# Triton (llm-foundry's attn_impl: triton); sdpa = PyTorch scaled_dot_product_attention's flash backend.
ATTENTION_KERNELS = ("fused", "flash2", "flash3", "cudnn", "triton", "sdpa")
# How torchtitan's attention projects Q, K and V (RunSpec.qkv_projections; estimate/activations.py block_mms): one
# fused wqkv linear (torchtitan 0.3.0, models/common/attention.py FusedQKVLinear, from ad7a865 "Fused QKV GQAttention
# implementation", 2026-04-16) or three linears wq, wk, wv (every torchtitan before it: the releases to 0.2.2 and the
# commits measured runs ran, 3f20451b/9dec370 in Dec 2024 and e7c0cae in June 2025).
QKV_PROJECTIONS = ("fused", "separate")


@dataclass(frozen=True)
class RunSpec:
    """What is trained: global batch in sequences, sequence length, dtypes and the memory budget per device. Each
    field's docstring is its documentation everywhere (the CLI's help, specs.fields.field_docs)."""

    __hash__ = cached_hash
    __getstate__ = state_without_hash

    global_batch: int
    """global batch in sequences per optimizer step"""
    seq_len: int
    """sequence length in tokens"""
    precision: str = "bf16"
    """parameter and activation dtype (default bf16); fp8: linear-layer GEMMs in FP8 as Transformer Engine runs them,
    BF16 parameters and everything else (devices with FP8)"""
    grad_dtype: str = "fp32"
    """gradient buffer dtype (default fp32: Megatron keeps fp32 main gradients for 16-bit parameters)"""
    optimizer: str = "adam"
    """the optimizer: adam, the only one modelled (fp32 master weights for 16-bit parameters, two moments)"""
    flash_attention: bool = True
    """fused attention kernels (FlashAttention; default true); false materialises the attention scores"""
    attention_kernel: str = "fused"
    """which fused attention kernel runs (default fused: the trainer's own, at the device's flash figures: cuDNN on
    Hopper, FlashAttention-2 on Ampere); flash2, flash3, cudnn, triton (llm-foundry attn_impl triton) or sdpa (PyTorch
    SDPA's flash backend), each at its published benchmark on the device's GPU generation (docs/formulas.md §3.3)"""
    torch_compile: bool = False
    """torchtitan's compile.enable: each block under torch.compile, whose partitioner recomputes the MLP activation
    instead of saving it and, under selective AC, keeps no w2 output (measured: docs/saved_tensors.yaml) and
    Inductor fuses the element-wise ops between the GEMMs (time: docs/formulas.md §3.4); torchtitan only
    (compile.components "model")"""
    compile_loss: bool = False
    """torchtitan's compile.components "loss": the cross entropy under torch.compile, whose fused kernels read the
    16-bit logits and write their gradient without the eager loss's fp32 copies (docs/formulas.md §5.6); with
    torch_compile, compile.components [model, loss] (torchtitan's default, and what `training.compile` compiled
    from April 2025, e.g. e7c0cae); torchtitan only"""
    qkv_projections: str = "fused"
    """torchtitan's attention projections: fused (default: one wqkv linear, torchtitan 0.3.0, which --emit torchtitan
    writes for) or separate (wq, wk, wv: every torchtitan before 0.3.0, e.g. the benchmarked e7c0cae, whose block also
    expands K and V to the query heads, repeat_kv, before attention): three GEMMs of their own shapes, and what
    op-level selective AC saves and re-runs counted over seven mms (docs/formulas.md §5.7); torchtitan only"""
    loss_kernel: str = "trainer"
    """the cross-entropy implementation the output layer's loss runs, priced by the HBM bytes it moves per logit
    (estimate/time.py loss_bytes_per_logit; docs/formulas.md §3.5): trainer (default: the one its files run,
    megatron's native, mindformers' unfused, torchtitan's eager), unfused (Megatron-Core's vocab-parallel cross
    entropy, Megatron-LM's own default: --emit megatron then writes no --cross-entropy-loss-fusion), native
    (Megatron's fused one, --cross-entropy-loss-fusion, which --emit megatron writes otherwise), te (Transformer
    Engine's Triton kernel, --cross-entropy-fusion-impl te), flash (flash-attn's fused cross entropy, llm-foundry's
    default) or eager (PyTorch's cross entropy on fp32 logits); unfused, native and te with trainer megatron only;
    under compile_loss: trainer"""
    memory_cap_bytes: int = 0
    """usable memory per device (default: all of it)"""
    reserve_bytes: int | None = None
    """a measured reserve per device (e.g. nvidia-smi's usage minus torch.cuda.max_memory_reserved) that replaces the
    modelled CUDA context, cuBLAS workspaces and NCCL buffers (default: modelled, estimate/reserve.py); allocator
    fragmentation is added either way"""
    trainer: str = "megatron"
    """whose memory behaviour to model (default megatron: Megatron-Core + Transformer Engine; torchtitan: FSDP2
    states, op-level selective AC, eager autograd; mindformers: Megatron's memory behaviour, not verified, and its
    recompute options: none, select_recompute (mlp_act), full)"""
    grad_sync: str = "trainer"
    """when gradients are reduced over data-parallel ranks: microbatch (after every micro-batch's backward; ZeRO-2/3
    reduce-scatter straight into the shard), step (accumulated in a full gradient buffer, reduced once per step; with
    ZeRO-2/3 that buffer costs memory) or trainer (default: its own, e.g. Megatron once per step for ZeRO-0/1, every
    micro-batch for ZeRO-2/3)"""
    param_gather: str = "trainer"
    """ZeRO-3 parameter all-gathers: forward-backward (for every micro-batch's forward and again for its backward),
    microbatch (kept gathered from forward to backward), step (kept gathered over the step; the last two hold the
    stage's parameters unsharded) or trainer (default: forward-backward; torchtitan with PP: step)"""
    fsdp_version: str = "trainer"
    """which FSDP reduces the gradients under ZeRO-2/3, for the passes it makes over them every reduction
    (docs/formulas.md §7.3): fsdp1 (PyTorch FullyShardedDataParallel's flat parameters, as Composer / llm-foundry and
    fms-fsdp run it: the flat gradient concatenated every micro-batch, cast to the reduce dtype and pre-divided
    before each reduce-scatter), fsdp2 (fully_shard: the gradients copied into the reduce-scatter input in the
    reduce dtype) or trainer (default: its own: megatron's and mindformers' reduce from their main-grad buffer, no
    pass; torchtitan's is FSDP2); torchtitan takes fsdp2 only, mindformers neither"""
    mfu_convention: str = "causal"
    """how MFU counts causal attention (default causal: the unmasked half, as Megatron-LM since core_r0.12; full: the
    whole score matrix, as PaLM and torchtitan). HFU always counts what runs; reporting only"""
    headroom_fraction: float = 0.0
    """fraction of the capacity to keep free, 0 <= f < 1: plans may use capacity x (1 - f) (default 0)"""
    confidence: float = 0.9
    """confidence, 0 <= c < 1, at which a plan fits (default 0.9): its peak's upper edge at that confidence (the
    measured runs' leave-one-source-out band, docs/confidence.md §1) within the capacity; 0: the point estimate alone"""
    fp8_recipe: str = "delayed"
    """FP8 scaling recipe under precision fp8 (default delayed): delayed, tensorwise, blockwise or mxfp8 (Blackwell
    only)"""
    optimizer_state_dtype: str = "fp32"
    """dtype of Adam's two moments (default fp32; bf16: Megatron's precision-aware optimizer, fp32 master weights
    kept)"""
    activation_func_fp8_input_store: bool = False
    """keep the MLP activation's input (SwiGLU's gate and up) in FP8 for backward, as Megatron's flag of that name and
    DeepSeek-V3 (§3.3.2) do; any precision"""
    disable_parameter_transpose_cache: bool = False
    """Megatron's transformer-config field disable_parameter_transpose_cache (no command-line flag: set in the
    model provider): Transformer Engine quantizes a BF16 weight to FP8 on every forward instead of caching it, so each
    micro-batch in flight saves its own FP8 copy and transpose; FP8 parameters (--fp8-param-gather, ZeRO >= 1) keep
    theirs as before (docs/formulas.md §3.1; megatron only)"""
    wgrad_deferral_limit: int | None = None
    """Megatron --defer-embedding-wgrad-compute --wgrad-deferral-limit N (pp > 1): the last stage keeps the output
    layer's input and output gradient of the step's first N micro-batches (0: all) until the pipeline flush;
    default none (not deferred). Time unchanged (docs/formulas.md §5.5; megatron only)"""
    images_per_sample: int = 0
    """images per sequence through a vision-language model's encoder (docs/models.md §5), priced on the first
    pipeline stage; their tokens are part of the sequence length (default: none)"""
    image_size: int = 0
    """side in pixels of each image through the encoder (default 0: the encoder's own; needed for any-resolution
    encoders such as Qwen2-VL's)"""
    overlap: str = "trainer"
    """communication overlapped with compute (estimate/overlap.py): trainer (default: the trainer's defaults, e.g.
    Megatron overlaps pipeline sends under interleaving), none, or a '+'-joined subset of ep (MoE all-to-all with
    another micro-batch's compute), tp (TP collectives with their GEMMs, needs sp), p2p (pipeline sends)"""

    moe_dispatcher: str = "alltoall"
    """MoE token dispatcher (Megatron --moe-token-dispatcher-type; default alltoall): alltoall (one copy per
    token-expert pair), allgather (the EP group's tokens all-gathered, reduce-scattered back) or flex (DeepEP /
    HybridEP: one copy per token and node over the scale-out network, NVLink fan-out inside the node)"""
    moe_load_imbalance: float = 1.0
    """routed tokens on the busiest expert-parallel rank over the even share, >= 1 (default 1: balanced, as runs
    that force load balancing are); the layer waits for that rank's experts and dispatch"""
    delay_wgrad_compute: bool = False
    """Megatron --delay-wgrad-compute (default off, Megatron's; megatron only, with an overlap that names ep:
    Megatron-Core requires the expert all-to-all overlap with it): each MoE layer's weight gradients run apart from
    its input gradients, so the dispatch backward waits for the experts' input gradient only and their weight
    gradient runs beside it (docs/formulas.md §7.1)"""
    first_layers_bf16: int = 0
    """Megatron --first-last-layers-bf16 --num-layers-at-start-in-bf16 N (default 0: none): the model's first N body
    layers run their linear layers in BF16 inside an FP8 run, priced on the stage that embeds at BF16 GEMM rates with
    no FP8 casts, BF16 saved inputs and no FP8 weight copies (docs/formulas.md §3.1; megatron only, precision fp8
    with a recipe other than delayed; unvalidated: no measured run isolates it)"""
    last_layers_bf16: int = 0
    """Megatron --first-last-layers-bf16 --num-layers-at-end-in-bf16 N (default 0: none): the model's last N body
    layers in BF16 inside an FP8 run, as first_layers_bf16, on the stage that computes the loss"""

    def __post_init__(self):
        positive_int("global_batch", self.global_batch)
        positive_int("seq_len", self.seq_len)
        require(self.seq_len <= 1 << 24, "seq_len", self.seq_len, "expected at most 16,777,216 tokens")
        one_of("precision", self.precision, PRECISIONS)
        one_of("grad_dtype", self.grad_dtype, GRAD_DTYPES)
        one_of("fp8_recipe", self.fp8_recipe, FP8_RECIPES)
        one_of("optimizer_state_dtype", self.optimizer_state_dtype, OPTIMIZER_STATE_DTYPES)
        one_of("activation_func_fp8_input_store", self.activation_func_fp8_input_store, (False, True))
        one_of("optimizer", self.optimizer, ("adam",))
        one_of("attention_kernel", self.attention_kernel, ATTENTION_KERNELS)
        one_of("torch_compile", self.torch_compile, (False, True))
        one_of("trainer", self.trainer, TRAINERS)
        require(not self.torch_compile or self.trainer == "torchtitan", "torch_compile", self.torch_compile,
                "torch.compile is modelled for trainer torchtitan only (compile.enable)")
        one_of("compile_loss", self.compile_loss, (False, True))
        require(not self.compile_loss or self.trainer == "torchtitan", "compile_loss", self.compile_loss,
                "the compiled loss is modelled for trainer torchtitan only (compile.components loss)")
        one_of("qkv_projections", self.qkv_projections, QKV_PROJECTIONS)
        require(self.qkv_projections == "fused" or self.trainer == "torchtitan", "qkv_projections",
                self.qkv_projections, "separate Q, K and V projections are modelled for trainer torchtitan only "
                "(torchtitan before 0.3.0); Megatron-Core's linear_qkv is fused: give fused")
        one_of("loss_kernel", self.loss_kernel, ("trainer",) + LOSS_KERNELS)
        require(self.loss_kernel in ("trainer", "flash", "eager") or self.trainer == "megatron", "loss_kernel",
                self.loss_kernel, "Megatron-Core's loss kernels: valid with trainer megatron only (else trainer, "
                "flash, eager)")
        require(not self.compile_loss or self.loss_kernel == "trainer", "loss_kernel", self.loss_kernel,
                "the compiled loss (compile_loss) is its own kernel: give loss_kernel trainer")
        self._check_megatron_settings()
        one_of("grad_sync", self.grad_sync, GRAD_SYNCS)
        one_of("param_gather", self.param_gather, PARAM_GATHERS)
        one_of("fsdp_version", self.fsdp_version, FSDP_VERSIONS)
        fsdps = ("trainer",) + BEHAVIOURS[self.trainer].fsdp_versions
        require(self.fsdp_version in fsdps, "fsdp_version", self.fsdp_version,
                f"valid with trainer {self.trainer}: {', '.join(fsdps)}")
        one_of("mfu_convention", self.mfu_convention, MFU_CONVENTIONS)
        one_of("moe_dispatcher", self.moe_dispatcher, MOE_DISPATCHERS)
        finite_number("moe_load_imbalance", self.moe_load_imbalance, 1.0, MAX_LOAD_IMBALANCE)
        parts = self.overlap.split("+") if isinstance(self.overlap, str) else [None]
        require(self.overlap in ("trainer", "none") or (all(p in OVERLAPS for p in parts)
                                                        and len(set(parts)) == len(parts)),
                "overlap", self.overlap, "valid: trainer, none, or a '+'-joined subset of " + ", ".join(OVERLAPS))
        non_negative_int("memory_cap_bytes", self.memory_cap_bytes, 1 << 60)
        if self.reserve_bytes is not None:
            non_negative_int("reserve_bytes", self.reserve_bytes, 1 << 60)
            finite_number("reserve_bytes", self.reserve_bytes, 0, 1 << 50)
        finite_number("headroom_fraction", self.headroom_fraction, 0.0, 1.0)
        non_negative_int("images_per_sample", self.images_per_sample, 1 << 16)
        non_negative_int("image_size", self.image_size, 1 << 16)
        require(self.headroom_fraction < 1, "headroom_fraction", self.headroom_fraction,
                "expected a fraction >= 0 and < 1 of the capacity to keep free")
        finite_number("confidence", self.confidence, 0.0, 1.0)
        require(self.confidence < 1, "confidence", self.confidence, "expected a confidence >= 0 and < 1, e.g. 0.9")

    def _check_megatron_settings(self) -> None:
        """The settings only Megatron-LM has a flag for: their values, and a Megatron trainer when set."""
        one_of("disable_parameter_transpose_cache", self.disable_parameter_transpose_cache, (False, True))
        require(not self.disable_parameter_transpose_cache or self.trainer == "megatron",
                "disable_parameter_transpose_cache", True, "a Megatron setting: valid with trainer megatron only")
        if self.wgrad_deferral_limit is not None:
            non_negative_int("wgrad_deferral_limit", self.wgrad_deferral_limit, 1 << 20)
            require(self.trainer == "megatron", "wgrad_deferral_limit", self.wgrad_deferral_limit,
                    "a Megatron setting (--wgrad-deferral-limit): valid with trainer megatron only")
        one_of("delay_wgrad_compute", self.delay_wgrad_compute, (False, True))
        require(not self.delay_wgrad_compute or self.trainer == "megatron", "delay_wgrad_compute", True,
                "a Megatron setting (--delay-wgrad-compute): valid with trainer megatron only")
        for name in ("first_layers_bf16", "last_layers_bf16"):
            non_negative_int(name, getattr(self, name), 1 << 20)
            require(not getattr(self, name) or self.trainer == "megatron", name, getattr(self, name),
                    "a Megatron setting (--first-last-layers-bf16): valid with trainer megatron only")

    def check_as_read(self) -> None:
        """The checks of settings that depend on the run's others (check_delay_wgrad, check_bf16_layers), run where
        a run is read from the user (the options, a measured row) and not on every RunSpec: a run derived from it
        (its trainer's default overlaps, another trainer's BF16 run) keeps the settings, inert."""
        self.check_delay_wgrad()
        self.check_bf16_layers()

    def check_delay_wgrad(self) -> None:
        """Refuse delay_wgrad_compute without the expert all-to-all overlap asked for, as Megatron-Core's
        TransformerConfig.__post_init__ does (@d98e8a6: 'overlap_moe_expert_parallel_comm must be enabled when
        enabling delay_wgrad_compute'). Checked where a run is read (the options, a measured row), not on every
        RunSpec: a run derived with other overlaps (e.g. its trainer's defaults) keeps the setting, inert."""
        require(not self.delay_wgrad_compute or "ep" in self.overlap.split("+"), "delay_wgrad_compute", True,
                f"Megatron delays the weight gradients only under the expert all-to-all overlap: valid with an "
                f"overlap that names ep (overlap is {self.overlap})")

    def check_bf16_layers(self) -> None:
        """Refuse BF16 first/last layers outside an FP8 run with a per-layer recipe, as Megatron-Core does
        (TransformerConfig.__post_init__ @d98e8a6 checks them only under fp8, where they do nothing otherwise, and
        raises 'Delayed scaling does not support first / last layer in BF16.'). Checked where a run is read (the
        options, a measured row), not on every RunSpec: a run derived in BF16 (another trainer's emitted run)
        keeps the setting, inert."""
        if not (self.first_layers_bf16 or self.last_layers_bf16):
            return
        name = "first_layers_bf16" if self.first_layers_bf16 else "last_layers_bf16"
        require(self.fp8, name, getattr(self, name), f"BF16 first/last layers exist only inside an FP8 run: valid "
                f"with precision fp8 (precision is {self.precision})")
        require(self.fp8_recipe != "delayed", name, getattr(self, name), "Megatron-Core refuses BF16 first/last "
                "layers under delayed scaling: valid with fp8_recipe tensorwise, blockwise or mxfp8")

    @property
    def bf16_layers(self) -> tuple[int, int]:
        """(first, last) body layers kept in BF16 under fp8 (first_layers_bf16, last_layers_bf16); (0, 0) otherwise."""
        return (self.first_layers_bf16, self.last_layers_bf16) if self.fp8 else (0, 0)

    @property
    def fp8(self) -> bool:
        """FP8 linear-layer GEMMs (estimate/fp8.py)."""
        return self.precision == "fp8"

    @property
    def param_bytes(self) -> int:
        """Bytes of a parameter as stored (BF16 under fp8: the FP8 weight copies are counted by estimate/fp8.py)."""
        return 2 if self.fp8 else DTYPE_BYTES[self.precision]

    @property
    def param_gather_bytes(self) -> int:
        """Bytes per parameter a ZeRO/FSDP parameter all-gather moves: FP8 under fp8 (Megatron --fp8-param-gather)."""
        return DTYPE_BYTES[self.precision]

    @property
    def grad_bytes(self) -> int:
        return DTYPE_BYTES[self.grad_dtype]

    @property
    def activation_bytes(self) -> int:
        """Bytes of an activation between ops (BF16 under fp8; the FP8-cached GEMM inputs: estimate/activations.py)."""
        return 2 if self.fp8 else DTYPE_BYTES[self.precision]

    @property
    def optimizer_state_bytes(self) -> int:
        """Adam: two fp32 moments, plus an fp32 master copy when parameters are 16-bit (ZeRO's K = 12); bf16 moments
        (optimizer_state_dtype, Megatron's precision-aware optimizer) halve the moments: K = 8."""
        return 2 * DTYPE_BYTES[self.optimizer_state_dtype] + (FP32_BYTES if self.param_bytes < FP32_BYTES else 0)

    def capacity(self, device_memory: int) -> int:
        """Bytes a stage may use: the cap if one is set (never above the device), else the device memory, less the
        headroom kept free (capacity x (1 - headroom_fraction), rounded down)."""
        budget = min(self.memory_cap_bytes, device_memory) if self.memory_cap_bytes else device_memory
        return budget - self.headroom_bytes(device_memory)

    def headroom_bytes(self, device_memory: int) -> int:
        """Bytes of the cap (or device memory) kept free by `headroom_fraction`."""
        budget = min(self.memory_cap_bytes, device_memory) if self.memory_cap_bytes else device_memory
        return budget - int(budget * (1 - self.headroom_fraction)) if self.headroom_fraction else 0
