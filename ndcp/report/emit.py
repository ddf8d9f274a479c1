"""--emit: what the checked launch configuration (ndcp.launch.LaunchCheck) runs, in lines for stderr (stdout may hold
the configuration or a JSON document): its notes, its estimate read back, and why it is not the plan or does not fit.
"""
from __future__ import annotations

from ..launch import LaunchCheck
from ..specs.strategy_text import strategy_text
from ..specs.units import GIB
from ..trainers import KINDS

SHOWN_GAIN = 0.005  # --trainer any: the trainer-free winner's gain worth a line on what the trainer lacks


def launch_lines(check: LaunchCheck) -> list[str]:
    """The notes of the configuration, then what it runs as read back: `the plan` when it is and fits, else why
    not, one reason a line."""
    lines = [f"note: {note}" for note in check.notes]
    back = check.read_back
    if back is not None:
        fits = "fits" if back.fits else "does not fit"
        lines.append(f"as emitted for {check.trainer}: step {back.step_seconds:.3f} s, peak "
                     f"{back.peak_bytes / GIB:.2f} GiB of {back.capacity_bytes / GIB:.2f} GiB ({fits})"
                     + (": the plan" if check.ok else ""))
    return lines + [f"{check.trainer} file: {reason}" for reason in check.reasons if reason not in check.notes]


def trainer_best_lines(best) -> list[str]:
    """Under --trainer any (ndcp.api.TrainerBest): the trainer's best plan beside the trainer-free winner, and when
    that winner is at least SHOWN_GAIN faster, what the trainer lacks to run it and what it would buy."""
    found = best.result.best
    if found is None:
        return [f"{best.trainer} runs no plan that fits ({best.result.status})"]
    line = (f"best {best.trainer} plan: {strategy_text(found.strategy, experts_if_used=True)}, step "
            f"{found.step_seconds:.3f} s")
    if best.faster_by is None or best.faster_by < SHOWN_GAIN:
        return [line + f" (within {100 * SHOWN_GAIN:g} % of the plan above)"]
    lacks = "; ".join(best.lacks) or "the plan above"
    return [line, f"the plan above is {100 * best.faster_by:.1f} % faster; {best.trainer} lacks: {lacks}"]


__all__ = ["KINDS", "launch_lines", "trainer_best_lines", "SHOWN_GAIN"]
