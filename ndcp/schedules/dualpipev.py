"""DualPipe-V, DualPipe "cut in half" (Sea AI Lab; deepseek-ai/DualPipe README and dualpipe/dualpipev.py): pp devices
run 2 pp stages in a V, device s holding stages s and 2pp - 1 - s, so device 0 embeds and computes the loss; one
copy of the parameters. The README's table (same number PP of stages, PP = 2 pp here): bubble
(PP/2 - 1)(F&B + B - 3W) with chunk times half a device's, activations PP + 1 chunks = pp + 1/2 of a device's
stage (docs/formulas.md §4.2)."""
from __future__ import annotations

from .base import Refusal
from .dualpipe import DualPipe


class DualPipeV(DualPipe):
    name = "dualpipev"
    rules = {"dualpipev_shape": "DualPipe-V needs pp >= 2, mbn >= 2 x pp (DualPipeV.step asserts) and at least "
                                "2 x pp layers (one per stage of the V)"}
    mirrored = False

    def refusal(self, layers: int, pp: int, vpp: int, mbn: int | None, explicit_partition: bool = False
                ) -> Refusal | None:
        # deepseek-ai/DualPipe dualpipev.py, DualPipeV.step: num_chunks >= 2 x num_ranks
        if pp < 2:
            return Refusal("dualpipev_shape", "pp", "DualPipe-V needs pp >= 2")
        if layers < 2 * pp:
            return Refusal("dualpipev_shape", "pp", f"DualPipe-V needs {layers} layers >= 2 x pp = {2 * pp}")
        if mbn is not None and mbn < 2 * pp:
            return Refusal("dualpipev_shape", "mbn", f"DualPipe-V needs mbn >= 2 x pp = {2 * pp}")
        return None

    def in_flight(self, stage: int, pp: int, vpp: int, mbn: int) -> float:
        """2 pp + 1 half-stage chunks on every device (DualPipeV.step: 2(pp - s - 1) + 2(s + 1) forwards before
        the main phase, plus one in its first overlapped pair), in units of the device's whole stage."""
        return pp + 0.5

    def extra_roles(self, stage: int, pp: int) -> tuple[tuple[str, float], ...]:
        """Device 0 holds the V's first and last stages: the embedding and the loss."""
        return (("only", 1.0),) if stage == 0 else ()

    def bubble_stages(self, pp: int) -> int:
        """PP/2 - 1 = pp - 1 chunk pairs of half a device's stage each: (pp - 1)/2 device stages, times 2."""
        return max(0, pp - 1)
