"""The run's trainer as the estimators see it: its behaviour (specs/trainer_behaviour.py) and when its data-parallel
collectives run.

The estimators ask `trainer_behaviour(run)` (never the trainer's name). The behaviour is the pure-data part of the
trainer's Trainer object (ndcp/trainers/NAME.py): it is defined below the estimators, in specs, because ndcp/trainers
sits above them; adding a trainer adds its behaviour there and its Trainer in ndcp/trainers, nothing here.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..specs.run import RunSpec
from ..specs.trainer_behaviour import BEHAVIOURS, TrainerBehaviour


def trainer_behaviour(run: RunSpec) -> TrainerBehaviour:
    """The behaviour of the run's trainer (RunSpec validates the name against specs.run.TRAINERS, BEHAVIOURS' names)."""
    return BEHAVIOURS[run.trainer]


def fsdp_version(run: RunSpec) -> str:
    """The FSDP that reduces the run's ZeRO-2/3 gradients (specs.run.FSDP_VERSIONS): RunSpec.fsdp_version, or for
    "trainer" the trainer's own (TrainerBehaviour.fsdp: "none" for its own, fsdp2 for torchtitan)."""
    return trainer_behaviour(run).fsdp if run.fsdp_version == "trainer" else run.fsdp_version


def loss_kernel(run: RunSpec) -> str:
    """The loss kernel the run prices (specs.trainer_behaviour.LOSS_KERNELS): RunSpec.loss_kernel, or for "trainer"
    the trainer's (TrainerBehaviour.loss_kernel); a compiled loss (RunSpec.compile_loss) is priced as its own."""
    return trainer_behaviour(run).loss_kernel if run.loss_kernel == "trainer" else run.loss_kernel


@dataclass(frozen=True)
class DataParallelSync:
    """When one strategy's data-parallel collectives run, and what that holds in memory."""

    grads_per_microbatch: bool  # gradient all-reduce / reduce-scatter after every micro-batch's backward, else once
    gather: str  # parameter all-gathers: "none" (ZeRO-0), "step" (one per step), "microbatch", "forward-backward"
    full_grad_buffer: bool  # ZeRO-2/3 accumulating unsharded: a full gradient buffer besides the shard
    gathered_parameters: bool  # ZeRO-3 holding the stage's parameters unsharded beyond one layer at a time


@lru_cache(maxsize=1024)
def data_parallel_sync(run: RunSpec, zero: int, pp: int) -> DataParallelSync:
    """The run's sync settings (RunSpec.grad_sync, param_gather), "trainer" resolved by its behaviour for this ZeRO
    stage and pipeline depth. ZeRO-1/2 gather the updated parameters once per step whatever the setting."""
    behaviour = trainer_behaviour(run)
    held = behaviour.pipeline_holds_step and pp > 1
    grads = run.grad_sync
    if grads == "trainer":
        grads = "step" if held or zero in behaviour.grad_sync_per_step else "microbatch"
    gather = run.param_gather if zero >= 3 else "none" if zero == 0 else "step"
    if gather == "trainer":
        gather = "step" if held else behaviour.zero3_gather
    return DataParallelSync(grads == "microbatch", gather, zero >= 2 and grads == "step",
                            zero >= 3 and gather != "forward-backward")


__all__ = ["trainer_behaviour", "fsdp_version", "loss_kernel", "DataParallelSync", "data_parallel_sync"]
