"""ZB-H1, the zero-bubble schedule of Qi et al. 2023 ("Zero Bubble Pipeline Parallelism", ICLR 2024, §2, the
handcrafted schedules; ZB-H1 in §2.1): 1F1B with each backward split into B (input gradient) and W (weight
gradient), the W passes moved into the bubble. Same activation memory as 1F1B (p micro-batches on the first stage);
bubble (p - 1)(T_F + T_B - T_W), i.e. (p - 1)(F + B - 2W) with B the full backward (the DualPipe README's table,
row ZB1P; docs/formulas.md §4.1)."""
from __future__ import annotations

from .base import LinearPipeline, Refusal, Schedule
from .one_f_one_b import OneFOneB


class ZeroBubbleH1(Schedule):
    name = "zb-h1"
    rules = {"zb_pipeline": "zero-bubble ZB-H1 needs pp > 1 and mbn >= pp (its warm-up fills every stage)"}
    # Run by Qi et al.'s Megatron-LM fork (sail-sg/zero-bubble-pipeline-parallelism); no trainer ndcp emits for runs
    # it

    def accepts_vpp(self, vpp: int) -> bool:
        return vpp == 1

    def refusal(self, layers: int, pp: int, vpp: int, mbn: int | None, explicit_partition: bool = False
                ) -> Refusal | None:
        if pp == 1:
            return Refusal("zb_pipeline", "pp", "ZB-H1 splits a pipeline's bubble: it needs pp > 1")
        if mbn is not None and mbn < pp:
            return Refusal("zb_pipeline", "mbn", f"ZB-H1 needs mbn >= pp = {pp}")
        return None

    def in_flight(self, stage: int, pp: int, vpp: int, mbn: int) -> float:
        """As 1F1B: ZB-H1 keeps 1F1B's warm-up, so its peak activation memory is 1F1B's (Qi et al. §2.1)."""
        return OneFOneB().in_flight(stage, pp, vpp, mbn)

    def fill(self, total, backward, wgrad):
        """F + B - 2W per stage: the 1F1B stage time less twice the weight-gradient GEMMs."""
        return total - 2 * wgrad

    def fill_floor(self, total):
        """W <= total / 3 (a stage's forward and its backward's input-gradient GEMMs each cost at least its
        weight-gradient GEMMs, estimate/time.py), so F + B - 2W >= total / 3."""
        return total / 3

    def pipeline_seconds(self, fill_sum, stage_max, mbn: int, vpp: int, pp: int):
        """mbn x the slowest stage plus (p - 1) x the mean stage's F + B - 2W: exactly Qi et al.'s
        m(F + B + W) + (p - 1)(F + B - 2W) with equal stages."""
        return mbn * stage_max + (pp - 1) * fill_sum / pp

    def linear_pipeline(self, mbn: int, vpp: int, pp: int) -> LinearPipeline:
        return LinearPipeline(slowest_weight=pp * mbn, sum_weight=pp - 1, divisor=pp)
