"""Interleaved 1F1B: each device stage holds vpp model chunks (virtual stage v on device stage v % pp), dividing the
fill/drain bubble by vpp (Narayanan et al. 2021 §2.2.2; Megatron-LM schedules.py; docs/formulas.md §4)."""
from __future__ import annotations

from .base import LinearPipeline, Refusal, Schedule, warmup_order


class Interleaved(Schedule):
    name = "interleaved"
    rules = {"vpp_layers": "interleaving needs pp > 1 and at least one layer per virtual stage (layers >= pp x vpp)",
             "vpp_mbn": "interleaving needs mbn >= pp (a micro-batch group size in [pp, mbn])"}

    def accepts_vpp(self, vpp: int) -> bool:
        return vpp > 1

    def refusal(self, layers: int, pp: int, vpp: int, mbn: int | None, explicit_partition: bool = False
                ) -> Refusal | None:
        if pp == 1:
            return Refusal("vpp_layers", "vpp", "interleaving (vpp > 1) needs pp > 1")
        # Any split with a layer per virtual stage runs: even, Megatron's embedding+loss accounted split, or any
        # other through Megatron-LM's --pipeline-model-parallel-layout (core_r0.13; specs/pipeline_layout.py), which
        # the emitter writes for the default uneven split (specs.strategy.default_partition). An explicit partition
        # may leave a chunk empty (rules.py `partition` checks its device stages).
        if layers < pp * vpp and not explicit_partition:
            return Refusal("vpp_layers", "vpp", f"interleaving needs at least one layer per virtual stage: "
                                                  f"{layers} layers < pp*vpp = {pp * vpp}")
        # Megatron-Core (main, 2025: schedules.py, forward_backward_pipelining_with_interleaving) runs any mbn >= pp:
        # a group size g in [pp, mbn] whose last group is empty or >= pp always exists (g = mbn); see group_size.
        if mbn is not None and mbn < pp:
            return Refusal("vpp_mbn", "mbn", f"interleaving needs mbn >= pp = {pp}")
        return None

    @staticmethod
    def group_size(pp: int, mbn: int) -> int:
        """Micro-batches run back to back per model chunk (Megatron-Core --microbatch-group-size-per-virtual-
        pipeline-stage, default pp): the smallest g in [pp, mbn] that Megatron-Core accepts, i.e. whose last group
        mbn % g is 0 or >= pp (a smaller one raises: "dependency bubbles"); pp when mbn is a multiple of pp."""
        return next((g for g in range(pp, mbn + 1) if mbn % g == 0 or mbn % g >= pp), pp)

    def in_flight(self, stage: int, pp: int, vpp: int, mbn: int) -> float:
        """(pp - stage - 1) x 2 + (vpp - 1) x g warm-up chunk forwards, g = group_size (capped at all mbn x vpp
        chunks) plus one (Megatron-Core schedules.py, forward_backward_pipelining_with_interleaving); with g = pp,
        stage 0 holds pp x vpp x (1 + (pp - 1) / (pp x vpp)) chunks, Korthikanti et al. 2022's interleaving factor."""
        warmup = min((pp - stage - 1) * 2 + (vpp - 1) * self.group_size(pp, mbn), mbn * vpp)
        return min(warmup + 1, mbn * vpp)

    def step_order(self, stage: int, pp: int, vpp: int, mbn: int) -> tuple[tuple[str, int], ...]:
        """The warm-up of in_flight, then one forward one backward, then the cool-down; forwards run g = group_size
        micro-batches per chunk, chunk by chunk (Megatron-Core schedules.py; torch.distributed.pipelining
        ScheduleInterleaved1F1B, torch 2.13, the same with g = its microbatches_per_round, pp when pp divides mbn)."""
        g, total = self.group_size(pp, mbn), mbn * vpp
        chunks = tuple(c for first in range(0, mbn, g) for c in range(vpp) for _ in range(first, min(first + g, mbn)))
        peak = self.in_flight(stage, pp, vpp, mbn)
        return warmup_order(chunks, vpp, total if peak >= total else int(peak) - 1)

    def pipeline_seconds(self, fill_sum, stage_max, mbn: int, vpp: int, pp: int):
        """1F1B's path with the fill/drain bubble divided by vpp (Narayanan §2.2.2). Also exact for mbn not a
        multiple of pp under group_size's g (equal stages; tests/schedules/test_interleaved_order.py replays
        Megatron-Core's order; docs/formulas.md §4)."""
        return mbn * stage_max + (fill_sum - stage_max) / vpp

    def linear_pipeline(self, mbn: int, vpp: int, pp: int) -> LinearPipeline:
        return LinearPipeline(slowest_weight=vpp * mbn - 1, sum_weight=1, divisor=vpp)
