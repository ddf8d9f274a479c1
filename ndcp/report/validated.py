"""The validated alternative as the search's text report prints it (docs/confidence.md §3): the winner's features no
measured run exercises, and the best strategy resting only on evidenced ones, both step times side by side."""
from __future__ import annotations

from rich.text import Text

from .formats import format_bytes, format_seconds
from .search import degrees_text


def validated_lines(result, validated) -> list[Text]:
    """Nothing when the winner is validated; else what it lacks evidence for and the alternative (or why there is
    none)."""
    if validated is None or result.best is None:
        return []
    winner = result.best
    lines = [Text("Validated alternative", style="bold underline"),
              Text(f"the winner ({format_seconds(winner.step_seconds)}) rests on features no measured run uses: "
                   + ", ".join(validated.missing), style="yellow")]
    found = validated.result
    if found is None:
        lines.append(Text("no strategy avoids them: they are the run's or the model's own settings"))
        return lines
    best = found.best
    if best is None:
        lines.append(Text(f"no strategy resting only on evidenced features fits ({found.status})"))
        return lines
    slower = 100 * (best.step_seconds / winner.step_seconds - 1)
    proof = "proven fastest of them" if found.status == "optimal" else found.status
    lines.append(Text.assemble(("evidenced only: ", "bold"), (degrees_text(best.strategy), "cyan"),
                               f"; step {format_seconds(best.step_seconds)} vs the winner's "
                               f"{format_seconds(winner.step_seconds)} ({slower:+.1f} %), peak "
                               f"{format_bytes(best.memory.peak_bytes)}; {proof}"))
    return lines


__all__ = ["validated_lines"]
