"""Why a search found nothing: an empty space (which rule refused what, which batch splits exist) or memory."""
from __future__ import annotations

from ..rules import RULES, Problem, first_refusal
from ..space import SearchSpace, SpaceWalk
from ..specs.fields import divisors
from ..specs.strategy_text import EXPLAIN_FIELDS, strategy_text
from ..specs.units import GIB
from .result import Evaluated


def _strategy_text(e: Evaluated) -> str:
    return strategy_text(e.strategy, EXPLAIN_FIELDS)


def reachable_batch_splits(space: SearchSpace) -> list[int]:
    """dp x mbs products the GPU count allows with tp and pp valid by the rulebook's tp and pp rules (the reference
    planner lists these)."""
    n = space.cluster.count
    problem = Problem(space.model, space.cluster, space.run)
    dps = {n // (tp * pp * cp)
           for tp in divisors(n) if first_refusal(problem, "tp", {"tp": tp}) is None
           for pp in divisors(n // tp) if first_refusal(problem, "pp", {"tp": tp, "pp": pp}) is None
           for cp in divisors(n // (tp * pp))}
    return sorted(dps)


def unproven_hint(result) -> str:
    """What to do when a search stops at its time limit unproven: a per-layer top-K (K > 1) is proven far sooner
    for K = 1, since every sub-model is cut off at the K-th best time; otherwise more time."""
    if "per-layer" in result.method and len(result.strategies) > 1:
        return "--top 1 proves the fastest alone much sooner; or raise --time-limit"
    return "raise --time-limit to close it"


def explain_infeasible(space: SearchSpace, walk: SpaceWalk, least: Evaluated | None,
                       memory_lower_bound: int | None = None) -> str:
    """One paragraph: what made the space empty, or the least memory a strategy needs against the capacity."""
    if not walk.batches:
        reasons = ", ".join(f"{name} ({RULES.get(name, name)}): {count}"
                            for name, count in walk.refused.most_common(4))
        dps = reachable_batch_splits(space)
        gbs = space.run.global_batch
        fitting_dp = [d for d in dps if gbs % d == 0]
        batch_note = (f" The data-parallel sizes these GPUs allow are {dps[:12]}; global batch {gbs} divides by "
                      f"{fitting_dp[:12] or 'none of them'}, so try a global batch that is a multiple of one of them."
                      if dps and (not fitting_dp or walk.refused.get("global_batch")) else "")
        # (no data-parallel size reachable at all: the other rules refused every layout, the batch is not the cause)
        pinned = walk.refused.get("fixed") or walk.refused.get("bounded")
        pin_note = " The --fix/--max values together leave no valid strategy: relax or drop one." if pinned else ""
        return f"No strategy passes the validity rules. Refused: {reasons}.{batch_note}{pin_note}"
    capacity = least.memory.capacity_bytes if least else space.run.capacity(space.cluster.device.memory_bytes)
    text = f"Nothing fits in {capacity / GIB:.1f} GiB per device."
    if memory_lower_bound is not None:
        text += f" Every strategy needs at least {memory_lower_bound / GIB:.1f} GiB (proven bound)."
    if least is not None:
        text += (f" The least memory found is {least.memory.peak_bytes / GIB:.1f} GiB on stage "
                 f"{least.memory.peak_stage} with {_strategy_text(least)}.")
        if least.memory.margin_bytes and least.memory.peak_bytes <= capacity:  # within the capacity, not its edge
            text += (f" At confidence {space.run.confidence:g} at most {least.memory.fit_bytes / GIB:.2f} GiB fits "
                     f"(its upper edge within the capacity); --confidence 0 judges the point estimate.")
    return text
