"""What a pipeline schedule must say about itself; each schedule is one module of this package.

A schedule decides three things the estimators and the solver read (and nothing else does):
- which (pp, vpp, mbn) it can run (its validity rules, named like every rule of ndcp.rules);
- how many micro-batch chunks each device stage holds in flight at its activation peak (memory);
- the step's pipeline critical path from per-micro-batch stage times (time), and the same path as the linear form
  `divisor x pipeline = slowest_weight x slowest stage + sum_weight x sum of stages` that the CP-SAT plan model
  minimises (solve/recompute.py).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Refusal:
    """A broken schedule rule: its name (counted by the space walk), the strategy field to blame, and why."""

    rule: str
    field: str
    message: str


@dataclass(frozen=True)
class LinearPipeline:
    """divisor x pipeline seconds = slowest_weight x (slowest stage) + sum_weight x (sum of stages)."""

    slowest_weight: int
    sum_weight: int
    divisor: int


class Schedule:
    """One pipeline schedule. Subclasses set the class attributes and implement the methods."""

    name: str = ""
    # Rule name -> what it requires, for reports (merged into ndcp.rules.RULES).
    rules: dict[str, str] = {}
    # How each trainer names or enables the schedule (the emitters read this).
    trainer_names: dict[str, str] = {}

    def accepts_vpp(self, vpp: int) -> bool:
        """Whether this schedule runs `vpp` model chunks per device stage."""
        raise NotImplementedError

    def refusal(self, layers: int, pp: int, vpp: int, mbn: int | None, explicit_partition: bool = False
                ) -> Refusal | None:
        """The first rule this schedule breaks for the given shape (mbn None: not known yet; explicit_partition:
        the strategy gives its layers per virtual stage), or None."""
        raise NotImplementedError

    def in_flight(self, stage: int, pp: int, vpp: int, mbn: int) -> int:
        """Micro-batch chunks whose activations device stage `stage` holds at its peak (units of one chunk)."""
        raise NotImplementedError

    def pipeline_seconds(self, stage_sum, stage_max, mbn: int, vpp: int):
        """The pipeline's critical path from per-micro-batch stage times (floats or numpy arrays alike)."""
        raise NotImplementedError

    def linear_pipeline(self, mbn: int, vpp: int) -> LinearPipeline:
        """pipeline_seconds as integer weights, for the CP-SAT plan model's objective."""
        raise NotImplementedError
