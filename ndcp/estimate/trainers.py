"""Trainer profiles: what each trainer does that the estimators price differently, as named facts.

The estimators ask the profile of `RunSpec.trainer` (never the trainer's name); adding a trainer is a profile here
(its name also joins specs.run.TRAINERS, the validated input) plus tests pinning it to measured runs. What each
trainer can express (schedules, recompute plans, ZeRO stages) joins the profile when the search honours it.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..specs.run import TRAINERS, RunSpec


@dataclass(frozen=True)
class TrainerProfile:
    """One trainer's memory behaviour, each field with the source it was read from."""

    name: str
    version: str  # the release whose code the facts below were read from
    # Data-parallel sharding keeps fp32 parameters (sharded like the optimizer states, cast to the compute dtype when
    # gathered) instead of 16-bit parameters plus an fp32 master copy (estimate/memory.py state_bytes_per_param).
    fp32_sharded_parameters: bool
    # With ZeRO-3 and pipeline parallelism, parameters stay gathered from forward to backward (no reshard after
    # forward), so each stage also holds them unsharded (estimate/memory.py model_state_bytes).
    keeps_gathered_with_pipeline: bool
    # ZeRO-3 without pipeline parallelism keeps the root module (embedding, final norm, output) gathered.
    keeps_root_gathered: bool
    # Activations of dense attention/MLP blocks follow the trainer's own op-level inventory (eager autograd, and
    # its selective checkpoint policy) instead of Megatron/Transformer Engine's (estimate/activations.py).
    op_level_inventory: bool
    # fp32 copies of the logits alive at the start of backward (the loss path, estimate/activations.py).
    fp32_logit_copies: int


MEGATRON = TrainerProfile(
    name="megatron", version="Megatron-Core 0.8-0.12 with Transformer Engine", fp32_sharded_parameters=False,
    keeps_gathered_with_pipeline=False, keeps_root_gathered=False, op_level_inventory=False,
    fp32_logit_copies=1,  # vocab-parallel cross entropy casts the logits to fp32 once, softmax in place
)
TORCHTITAN = TrainerProfile(
    name="torchtitan", version="torchtitan 0.1-0.2 (FSDP2, op-level SAC)",
    fp32_sharded_parameters=True,  # MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32), apply_fsdp
    keeps_gathered_with_pipeline=True,  # apply_fsdp: reshard_after_forward=False when PP is on
    keeps_root_gathered=True,  # fully_shard: the root's reshard_after_forward is False
    op_level_inventory=True,  # parallelize_llama._apply_ac_to_transformer_block
    fp32_logit_copies=3,  # log_softmax output, nll_loss gradient, log_softmax input gradient
)
PROFILES: dict[str, TrainerProfile] = {p.name: p for p in (MEGATRON, TORCHTITAN)}
assert set(PROFILES) == set(TRAINERS), "every trainer name of specs.run.TRAINERS needs a profile"


def trainer_profile(run: RunSpec) -> TrainerProfile:
    """The profile of the run's trainer."""
    return PROFILES[run.trainer]


__all__ = ["TrainerProfile", "PROFILES", "trainer_profile", "MEGATRON", "TORCHTITAN"]
