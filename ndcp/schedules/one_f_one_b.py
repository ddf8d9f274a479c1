"""1F1B (PipeDream-Flush): one forward, one backward per micro-batch after a warm-up (Narayanan et al. 2021 §2.2.1;
docs/formulas.md §4)."""
from __future__ import annotations

from .base import LinearPipeline, Refusal, Schedule, warmup_order


class OneFOneB(Schedule):
    name = "1f1b"
    rules: dict[str, str] = {}
    loss_backward_alone = True

    def accepts_vpp(self, vpp: int) -> bool:
        return vpp == 1

    def refusal(self, layers: int, pp: int, vpp: int, mbn: int | None, explicit_partition: bool = False
                ) -> Refusal | None:
        return None  # runs any shape the general rules allow

    def in_flight(self, stage: int, pp: int, vpp: int, mbn: int) -> float:
        """pp - stage - 1 warm-up forwards, then one more forward before the first backward (Megatron-LM
        schedules.py, forward_backward_pipelining_without_interleaving): min(pp - stage, mbn) micro-batches live."""
        return min(pp - stage, mbn)

    def step_order(self, stage: int, pp: int, vpp: int, mbn: int) -> tuple[tuple[str, int], ...]:
        """pp - stage - 1 warm-up forwards, then one forward one backward, then the cool-down backwards (all
        forwards first when mbn <= pp - stage); torch.distributed.pipelining's Schedule1F1B runs the same sequence
        as pp - stage warm-up forwards, then one backward one forward (schedules.py, torch 2.13)."""
        warmup = mbn if mbn <= pp - stage else pp - stage - 1
        return warmup_order((0,) * mbn, 1, warmup)

    def pipeline_seconds(self, fill_sum, stage_max, mbn: int, vpp: int, pp: int):
        """One micro-batch through every stage plus (mbn - 1) x the slowest stage (Narayanan §2.2.1); a stage's
        fill is its total."""
        return mbn * stage_max + (fill_sum - stage_max)

    def linear_pipeline(self, mbn: int, vpp: int, pp: int) -> LinearPipeline:
        return LinearPipeline(slowest_weight=mbn - 1, sum_weight=1, divisor=1)
