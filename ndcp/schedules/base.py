"""What a pipeline schedule must say about itself; each schedule is one module of this package.

A schedule decides what the estimators and the solver read of it (and nothing else does):
- which (pp, vpp, mbn) it can run (its validity rules, named like every rule of ndcp.rules);
- how many micro-batch chunks each device stage holds in flight at its activation peak (memory);
- which stages hold the embedding and the output head, and whether a device also holds the mirror stage's
  parameters (DualPipe's second copy);
- which communication it hides behind compute by itself (DualPipe's all-to-all and pipeline sends);
- the step's pipeline critical path from the slowest stage's per-micro-batch time and the sum over stages of each
  stage's `fill` (the per-micro-batch time its bubble is made of), and the same path as the linear form
  `divisor x pipeline = slowest_weight x slowest stage + sum_weight x sum of fills` that the CP-SAT plan model
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
    """divisor x pipeline seconds = slowest_weight x (slowest stage) + sum_weight x (sum of the stages' fills)."""

    slowest_weight: int
    sum_weight: int
    divisor: int


def warmup_order(chunks: tuple[int, ...], vpp: int, warmup: int) -> tuple[tuple[str, int], ...]:
    """The order of a one-forward-one-backward schedule: `warmup` forwards, then one forward and one backward, then
    the cool-down backwards; forwards run the local chunks in the order `chunks` (one entry per micro-batch chunk),
    backwards the same order with the chunks reversed (the last chunk's backward comes first: Megatron-Core
    schedules.py get_model_chunk_id(forward=False); torch.distributed.pipelining schedules.py
    ScheduleInterleaved1F1B backward_stage_index)."""
    forwards = [("F", c) for c in chunks]
    backwards = [("B", vpp - 1 - c) for c in chunks]
    order = forwards[:warmup]
    for i in range(len(chunks) - warmup):
        order += [forwards[warmup + i], backwards[i]]
    return tuple(order + backwards[len(chunks) - warmup:])


class Schedule:
    """One pipeline schedule. Subclasses set the class attributes and implement the methods."""

    name: str = ""
    # Rule name -> what it requires, for reports (merged into ndcp.rules.RULES).
    rules: dict[str, str] = {}
    # Device stage s also holds the parameters (and their gradients and optimizer states) of stage pp - 1 - s.
    mirrored: bool = False
    # Communication the schedule overlaps with compute by construction ("ep": the MoE all-to-all, "p2p": the
    # pipeline sends); estimate/overlap.py adds what the run's overlap settings hide.
    hides: frozenset[str] = frozenset()
    # The last stage runs a micro-batch's loss backward before any body layer's backward of another starts (one
    # forward, then that micro-batch's backward): the loss's logits and a body layer's backward temporaries never
    # coexist there (estimate/memory.py stage_layer_workspace).
    loss_backward_alone: bool = False

    def accepts_vpp(self, vpp: int) -> bool:
        """Whether this schedule runs `vpp` model chunks per device stage."""
        raise NotImplementedError

    def refusal(self, layers: int, pp: int, vpp: int, mbn: int | None, explicit_partition: bool = False
                ) -> Refusal | None:
        """The first rule this schedule breaks for the given shape (mbn None: not known yet; explicit_partition:
        the strategy gives its layers per virtual stage), or None."""
        raise NotImplementedError

    def in_flight(self, stage: int, pp: int, vpp: int, mbn: int) -> float:
        """Micro-batch chunks whose activations device stage `stage` holds at its peak (units of one chunk)."""
        raise NotImplementedError

    def step_order(self, stage: int, pp: int, vpp: int, mbn: int) -> tuple[tuple[str, int], ...] | None:
        """Device stage `stage`'s compute in run order, ("F" or "B", local model chunk) per micro-batch chunk, for
        what lives only part of the step (estimate/held_states.py); None where the schedule does not state it (its
        stages are then priced as holding everything for the whole step)."""
        return None

    def extra_roles(self, stage: int, pp: int) -> tuple[tuple[str, float], ...]:
        """The work outside the body layers one micro-batch costs device stage `stage`, as (role, share) pairs over
        estimate.time.stage_extra_time's roles: "first" (embedding), "last" (output head, loss, MTP), "only"
        (both). By default the first stage embeds and the last one computes the loss."""
        if pp == 1:
            return (("only", 1.0),)
        return (("first", 1.0),) if stage == 0 else (("last", 1.0),) if stage == pp - 1 else ()

    def holds_ends(self, stage: int, pp: int) -> tuple[bool, bool]:
        """(embedding, output head) whose parameters and activations device stage `stage` holds."""
        roles = {role for role, _ in self.extra_roles(stage, pp)}
        return bool(roles & {"first", "only"}), bool(roles & {"last", "only"})

    def fill(self, total, backward, wgrad):
        """The per-micro-batch time a stage contributes to the bubble, from its total time, its full backward
        (input and weight gradients, recompute, exposed backward communication) and its weight-gradient GEMMs.
        Linear in the three, so a stage's fill is the sum of its layers'. 1F1B-like schedules: the total."""
        return total

    def fill_floor(self, total):
        """A lower bound of `fill` from the total alone (the solver's bounds know only totals)."""
        return total

    def pipeline_seconds(self, fill_sum, stage_max, mbn: int, vpp: int, pp: int):
        """The pipeline's critical path from the slowest stage's per-micro-batch time and the sum of the stages'
        fills (floats or numpy arrays alike)."""
        raise NotImplementedError

    def linear_pipeline(self, mbn: int, vpp: int, pp: int) -> LinearPipeline:
        """pipeline_seconds as integer weights, for the CP-SAT plan model's objective."""
        raise NotImplementedError
