"""--emit: a trainer's launch configuration for one strategy (ndcp/trainers), and when the trainer runs another plan
than the one estimated (the nearest it can express, or another trainer's memory behaviour), both estimates.
"""
from __future__ import annotations

import sys
from dataclasses import replace

from ..estimate.memory import estimate_memory
from ..estimate.time import estimate_time
from ..specs.device import ClusterSpec
from ..specs.model import ModelSpec
from ..specs.run import RunSpec
from ..specs.strategy import Strategy
from ..specs.units import GIB
from ..trainers import KINDS, Emitted, covers, emit, nearest, stage_plans


def _summary(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, strategy: Strategy) -> str:
    memory, time = estimate_memory(model, cluster, run, strategy), estimate_time(model, cluster, run, strategy)
    fits = "fits" if memory.fits else "does not fit"
    return (f"step {time.step_seconds:.3f} s, peak {memory.peak_bytes / GIB:.2f} GiB of "
            f"{memory.capacity_bytes / GIB:.2f} GiB ({fits})")


def comparison(kind: str, model: ModelSpec, cluster: ClusterSpec, run: RunSpec, strategy: Strategy) -> list[str]:
    """Lines comparing the plan's estimate with the estimate of what `kind` runs (re-estimated with that trainer's
    memory behaviour); empty when the trainer runs the plan as estimated."""
    ran, _ = nearest(kind, model, run, strategy)
    trainer_run = replace(run, trainer=kind) if kind != run.trainer else run
    if ran == strategy and trainer_run == run:
        return []
    return [f"as planned ({run.trainer}): {_summary(model, cluster, run, strategy)}",
            f"as emitted for {kind}: {_summary(model, cluster, trainer_run, ran)}"]


def print_comparison(kind: str, model: ModelSpec, cluster: ClusterSpec, run: RunSpec, strategy: Strategy) -> None:
    """The comparison, on stderr (stdout holds the configuration or a JSON document)."""
    for line in comparison(kind, model, cluster, run, strategy):
        print(f"ndcp: {line}", file=sys.stderr)


__all__ = ["Emitted", "KINDS", "emit", "comparison", "print_comparison", "stage_plans", "covers"]
