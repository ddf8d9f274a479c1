"""Trainer profiles: what each trainer does that the estimators price differently, as named facts.

The estimators ask the profile of `RunSpec.trainer` (never the trainer's name); adding a trainer is a profile here
(its name also joins specs.run.TRAINERS, the validated input) plus tests pinning it to measured runs. What each
trainer can express (schedules, recompute plans, ZeRO stages) joins the profile when the search honours it.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..specs.run import TRAINERS, RunSpec


@dataclass(frozen=True)
class TrainerProfile:
    """One trainer's memory behaviour, each field with the source it was read from."""

    name: str
    version: str  # the release whose code the facts below were read from
    # Data-parallel sharding keeps fp32 parameters (sharded like the optimizer states, cast to the compute dtype when
    # gathered) instead of 16-bit parameters plus an fp32 master copy (estimate/memory.py state_bytes_per_param).
    fp32_sharded_parameters: bool
    # Data-parallel sync (data_parallel_sync below; docs/formulas.md §7). The ZeRO stages whose gradients accumulate
    # in a full buffer and are reduced once per step by default; the others reduce after every micro-batch.
    grad_sync_per_step: tuple[int, ...]
    # ZeRO-3 parameter gathers by default (specs.run.PARAM_GATHERS), without pipeline parallelism.
    zero3_gather: str
    # With pipeline parallelism, gradients accumulate unsharded and gathered parameters stay gathered over the step's
    # micro-batches: one reduction and (ZeRO-3) one gather per step, the stage's parameters held unsharded.
    pipeline_holds_step: bool
    # ZeRO-3 without pipeline parallelism keeps the root module (embedding, final norm, output) gathered.
    keeps_root_gathered: bool
    # Activations of dense attention/MLP blocks follow the trainer's own op-level inventory (eager autograd, and
    # its selective checkpoint policy) instead of Megatron/Transformer Engine's (estimate/activations.py).
    op_level_inventory: bool
    # fp32 copies of the logits alive at the start of backward (the loss path, estimate/activations.py).
    fp32_logit_copies: int
    # FP8 training keeps FP8 copies of the linear weights next to (or, with --fp8-param-gather, instead of) the
    # 16-bit ones (estimate/fp8.py weight_copy_bytes_per_parameter); False: the weights are cast per GEMM.
    fp8_weight_copies: bool = True


MEGATRON = TrainerProfile(
    name="megatron", version="Megatron-Core 0.8-0.12 with Transformer Engine", fp32_sharded_parameters=False,
    # DDP and the distributed optimizer accumulate into the main-grad buffer and reduce at the last micro-batch
    # (--overlap-grad-reduce); Megatron FSDP optim_grads / optim_grads_params (ZeRO-2/3) reduce-scatter every
    # micro-batch and re-gather parameters for backward, as DeepSpeed ZeRO-2/3 do (no no_sync with ZeRO-2/3).
    grad_sync_per_step=(0, 1), zero3_gather="forward-backward", pipeline_holds_step=False,
    keeps_root_gathered=False, op_level_inventory=False,
    fp32_logit_copies=1,  # vocab-parallel cross entropy casts the logits to fp32 once, softmax in place
)
TORCHTITAN = TrainerProfile(
    name="torchtitan", version="torchtitan 0.1-0.2 (FSDP2, op-level SAC)",
    fp32_sharded_parameters=True,  # MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32), apply_fsdp
    grad_sync_per_step=(),  # train.py train_step: forward_backward_step per micro-batch, gradient sync left on
    zero3_gather="forward-backward",  # fully_shard: reshard_after_forward=True for the transformer blocks
    # torch.distributed.pipelining stage.backward_maybe_with_nosync: DDP no_sync, FSDP set_requires_gradient_sync
    # (False) and set_reshard_after_backward(False) until the last backward; apply_fsdp: reshard_after_forward=False
    # when PP is on
    pipeline_holds_step=True,
    keeps_root_gathered=True,  # fully_shard: the root's reshard_after_forward is False
    op_level_inventory=True,  # parallelize_llama._apply_ac_to_transformer_block
    fp32_logit_copies=3,  # log_softmax output, nll_loss gradient, log_softmax input gradient
    fp8_weight_copies=False,  # torchao Float8Linear casts the weight per GEMM and keeps no copy
)
# MindFormers 1.6.0 (mindspore-lab/mindformers fd4deebc) on MindSpore: no fact below was read from MindFormers or
# MindSpore source or measured; each is Megatron's, not verified, so its memory and time estimates are Megatron's
# except for what the recompute options drop and re-run (specs/recompute.py: its select set, read from
# mindformers/models/utils.py LayerSetting). What is known to differ is stated where it applies.
MINDFORMERS = TrainerProfile(
    name="mindformers", version="MindFormers 1.6.0 on MindSpore 2.5+ (facts as Megatron's, not verified)",
    # as Megatron's, not verified: MindFormers configs keep param_init_type float32 with a bf16 compute_dtype, and
    # how MindSpore's optimizer parallelism stores the parameters it shards was not read
    fp32_sharded_parameters=False,
    grad_sync_per_step=(0, 1),  # as Megatron's, not verified (gradient_accumulation_shard under ZeRO-3 not priced)
    zero3_gather="forward-backward",  # as Megatron's, not verified
    pipeline_holds_step=False,  # as Megatron's, not verified
    keeps_root_gathered=False,  # as Megatron's, not verified
    # as Megatron's Transformer Engine inventory, not verified: MindSpore's autograd on LlamaFeedForward keeps the
    # SiLU output as well as the gate, up and product (one more ffn-wide tensor than Megatron's fused SwiGLU), and
    # without select_comm_recompute the all-gathered norm output under sequence parallelism; both are left out
    op_level_inventory=False,
    fp32_logit_copies=1,  # as Megatron's, not verified
    fp8_weight_copies=True,  # as Megatron's, not verified
)
PROFILES: dict[str, TrainerProfile] = {p.name: p for p in (MEGATRON, TORCHTITAN, MINDFORMERS)}
assert set(PROFILES) == set(TRAINERS), "every trainer name of specs.run.TRAINERS needs a profile"


def trainer_profile(run: RunSpec) -> TrainerProfile:
    """The profile of the run's trainer."""
    return PROFILES[run.trainer]


@dataclass(frozen=True)
class DataParallelSync:
    """When one strategy's data-parallel collectives run, and what that holds in memory."""

    grads_per_microbatch: bool  # gradient all-reduce / reduce-scatter after every micro-batch's backward, else once
    gather: str  # parameter all-gathers: "none" (ZeRO-0), "step" (one per step), "microbatch", "forward-backward"
    full_grad_buffer: bool  # ZeRO-2/3 accumulating unsharded: a full gradient buffer besides the shard
    gathered_parameters: bool  # ZeRO-3 holding the stage's parameters unsharded beyond one layer at a time


@lru_cache(maxsize=1024)
def data_parallel_sync(run: RunSpec, zero: int, pp: int) -> DataParallelSync:
    """The run's sync settings (RunSpec.grad_sync, param_gather), "trainer" resolved by its profile for this ZeRO
    stage and pipeline depth. ZeRO-1/2 gather the updated parameters once per step whatever the setting."""
    profile = trainer_profile(run)
    held = profile.pipeline_holds_step and pp > 1
    grads = run.grad_sync
    if grads == "trainer":
        grads = "step" if held or zero in profile.grad_sync_per_step else "microbatch"
    gather = run.param_gather if zero >= 3 else "none" if zero == 0 else "step"
    if gather == "trainer":
        gather = "step" if held else profile.zero3_gather
    return DataParallelSync(grads == "microbatch", gather, zero >= 2 and grads == "step",
                            zero >= 3 and gather != "forward-backward")


__all__ = ["TrainerProfile", "PROFILES", "trainer_profile", "MEGATRON", "TORCHTITAN", "MINDFORMERS", "DataParallelSync",
           "data_parallel_sync"]
