"""Why a search found nothing: an empty space (which rule refused what, which batch splits exist) or memory."""
from __future__ import annotations

from ..space import RULES, SearchSpace, SpaceWalk
from ..specs.fields import divisors
from .result import Evaluated

GIB = 2**30


def _strategy_text(e: Evaluated) -> str:
    s = e.strategy
    return (f"tp={s.tp} pp={s.pp} cp={s.cp} dp={s.dp} ep={s.ep} vpp={s.vpp} mbs={s.mbs} zero={s.zero} "
            f"sp={'on' if s.sp else 'off'} recompute={s.recompute.summary()}")


def reachable_batch_splits(space: SearchSpace) -> list[int]:
    """dp x mbs products the GPU count allows with valid tp/pp/cp (the reference planner lists these)."""
    n, m = space.cluster.count, space.model
    dps = {n // (tp * pp * cp)
           for tp in divisors(n) if m.heads % tp == 0 and m.num_kv_heads % tp == 0
           for pp in divisors(n // tp) if pp <= m.layers
           for cp in divisors(n // (tp * pp))}
    return sorted(dps)


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
                      if not fitting_dp or walk.refused.get("global_batch") else "")
        return f"No strategy passes the validity rules. Refused: {reasons}.{batch_note}"
    capacity = least.memory.capacity_bytes if least else space.run.capacity(space.cluster.device.memory_bytes)
    text = f"Nothing fits in {capacity / GIB:.1f} GiB per device."
    if memory_lower_bound is not None:
        text += f" Every strategy needs at least {memory_lower_bound / GIB:.1f} GiB (proven bound)."
    if least is not None:
        text += (f" The least memory found is {least.memory.peak_bytes / GIB:.1f} GiB on stage "
                 f"{least.memory.peak_stage} with {_strategy_text(least)}.")
    return text
