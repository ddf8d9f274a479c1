"""DualPipe (DeepSeek-V3 technical report §3.2.1, Table 2; deepseek-ai/DualPipe README): micro-batches fed from both
ends of the pipeline, so device stage s holds stage s of one direction and stage pp - 1 - s of the other (two copies
of the parameters); each forward chunk overlaps a backward chunk of the other direction, hiding the MoE all-to-all
and the pipeline sends behind compute. Per device: activations of pp + 1 micro-batches of one stage, bubble
(pp/2 - 1)(F&B + B - 3W) (docs/formulas.md §4.2)."""
from __future__ import annotations

from .base import LinearPipeline, Refusal, Schedule


class DualPipe(Schedule):
    name = "dualpipe"
    rules = {"dualpipe_shape": "DualPipe needs an even pp >= 2 and an even mbn >= 2 x pp (DualPipe.step asserts)"}
    # Run by DeepSeek's DualPipe module (github.com/deepseek-ai/DualPipe); no trainer ndcp emits for runs it
    mirrored = True
    hides = frozenset({"ep", "p2p"})

    def accepts_vpp(self, vpp: int) -> bool:
        return vpp == 1  # the second chunk is the mirror stage's copy, not a virtual stage of the partition

    def refusal(self, layers: int, pp: int, vpp: int, mbn: int | None, explicit_partition: bool = False
                ) -> Refusal | None:
        # deepseek-ai/DualPipe dualpipe.py, DualPipe.step: num_ranks even; num_chunks even and >= 2 x num_ranks
        if pp < 2 or pp % 2:
            return Refusal("dualpipe_shape", "pp", f"DualPipe needs an even pp >= 2 (pp={pp})")
        if mbn is not None and (mbn % 2 or mbn < 2 * pp):
            return Refusal("dualpipe_shape", "mbn", f"DualPipe needs an even mbn >= 2 x pp = {2 * pp}")
        return None

    def in_flight(self, stage: int, pp: int, vpp: int, mbn: int) -> float:
        """pp + 1 micro-batches of one stage on every device (Table 2; DualPipe.step's warm-up: 2(pp/2 - h - 1)
        + 2(h + 1) forwards before the first backward, h = min(s, pp - 1 - s), plus the forward that its first
        overlapped forward-backward pair runs before freeing a backward)."""
        return pp + 1

    def extra_roles(self, stage: int, pp: int) -> tuple[tuple[str, float], ...]:
        """Devices 0 and pp - 1 each embed one direction's micro-batches and compute the other direction's loss:
        half the micro-batches each, on average."""
        return (("only", 0.5),) if stage in (0, pp - 1) else ()

    def fill(self, total, backward, wgrad):
        """F&B + B - 3W per stage: the overlapped forward-backward pair (the stage's total, its all-to-all and
        sends hidden) plus a full backward, less three weight-gradient GEMMs."""
        return total + backward - 3 * wgrad

    def fill_floor(self, total):
        """B >= 2W and W <= total / 3 (estimate/time.py), so total + B - 3W >= total - W >= 2/3 total."""
        return 2 * total / 3

    def bubble_stages(self, pp: int) -> int:
        """PP/2 - 1 of the README's table, times 2 (PP = pp stages of one device each; none below pp = 2, which
        the rules refuse)."""
        return max(0, pp - 2)

    def pipeline_seconds(self, fill_sum, stage_max, mbn: int, vpp: int, pp: int):
        """mbn x the slowest stage plus (PP/2 - 1) x the mean stage's fill; every device runs each micro-batch
        once (one of its two stages)."""
        return mbn * stage_max + self.bubble_stages(pp) * fill_sum / (2 * pp)

    def linear_pipeline(self, mbn: int, vpp: int, pp: int) -> LinearPipeline:
        return LinearPipeline(slowest_weight=2 * pp * mbn, sum_weight=self.bubble_stages(pp), divisor=2 * pp)
