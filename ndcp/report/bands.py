"""The evidence of an estimate as the text reports print it (docs/evidence.md): the step time's band, the peak's
upper edge, and the features no measured run exercises. Nothing is printed for a band at confidence 0 (the point
estimate, exactly)."""
from __future__ import annotations

from rich.text import Text

from ..estimate.evidence import Evidence
from .formats import format_bytes, format_seconds


def _share(confidence: float) -> str:
    return f"{100 * confidence:g} %"


def step_band_text(step_seconds: float, evidence: Evidence | None) -> str:
    """` (12.9–15.1 s, 90 %, 23 comparable runs)` after a step time; "" without a band."""
    if evidence is None or not evidence.confidence:
        return ""
    low, high = evidence.step_seconds_band(step_seconds)
    return (f" ({format_seconds(low)}–{format_seconds(high)}, {_share(evidence.confidence)}, "
            f"{evidence.runs} comparable runs)")


def peak_band_text(peak_bytes: int, evidence: Evidence | None) -> str:
    """` (≤ 75.6 GiB at 90 %, 9 measured rows)` after a peak; "" without a band."""
    if evidence is None or not evidence.confidence:
        return ""
    return (f" (≤ {format_bytes(evidence.peak_bytes_high(peak_bytes))} at {_share(evidence.confidence)}, "
            f"{evidence.memory_rows} measured rows)")


def missing_evidence_line(evidence: Evidence | None) -> Text | None:
    """`no measured run uses: activation offload, dualpipev` (the band widened for each), or None."""
    if evidence is None or not evidence.features_without_evidence:
        return None
    return Text("no measured run uses: " + ", ".join(evidence.features_without_evidence)
                + (" (band widened for each)" if evidence.confidence else ""), style="yellow")


__all__ = ["step_band_text", "peak_band_text", "missing_evidence_line"]
