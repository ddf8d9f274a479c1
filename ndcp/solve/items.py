"""What the CP-SAT searches share about batch items: their first bounds, the levels that tighten them, and why nothing
fits when no item does (README "How the proof works", steps 1-2)."""
from __future__ import annotations

from ..rules import sp_allowed
from ..space import SearchSpace
from .coefficients import (inner_choices, item_data_parallel_floor, item_lower_bounds, item_memory_lower_bound,
                           item_plan_lower_bound)
from .context import SearchContext
from .explain import explain_infeasible
from .result import SearchResult, evaluate, finish

READY = 2  # bound levels: 0 cheap pipeline bound, 1 + DP floor, 2 memory-aware plan bound (then expand or solve)


def unsolved(method: str, space_size: int, walk) -> SearchResult:
    """A search's result before anything is found (`infeasible` until a strategy is verified)."""
    return SearchResult(method=method, status="infeasible", strategies=[], lower_bound_seconds=0.0,
                        space_size=space_size, refused=walk.refused)


def bounded_items(ctx: SearchContext, method: str):
    """Walk the space and bound every batch item (the deadline checked every 256 items): (walk, result, bounds),
    where bounds is None when the search ends here, with `result` finished (empty space, or out of time)."""
    space = ctx.space
    walk = space.walk()
    result = unsolved(method, space.size(walk), walk)
    if not walk.batches:
        result.explanation = explain_infeasible(space, walk, None)
        return walk, finish(result, ctx.start), None

    def check() -> None:
        if ctx.expired():
            raise TimeoutError

    try:
        bounds = item_lower_bounds(space, walk.batches, check)
    except (TimeoutError, KeyboardInterrupt) as stop:
        result.status = "feasible"
        result.interrupted = isinstance(stop, KeyboardInterrupt)
        result.explanation = (f"{'interrupted' if result.interrupted else 'time limit reached'} while "
                              f"bounding the {len(walk.batches):,} batch items; nothing verified yet")
        return walk, finish(result, ctx.start), None
    return walk, result, bounds


def tighten(space: SearchSpace, item, level: int, bound: float) -> float | None:
    """The item's bound at the next level (seconds), or None when it is proven not to fit: level 1 adds the cheap
    data-parallel floor to the pipeline bound, level 2 takes the memory-aware plan bound. Cheap levels first, so
    most items are cut before the costly ones. Uneven partitions as the space allows (space.partition_offset)."""
    if level == 0:
        return bound + item_data_parallel_floor(space, item)
    tighter = item_plan_lower_bound(space, item)
    return None if tighter is None else max(bound, tighter)


def explain_memory(space: SearchSpace, walk, result: SearchResult) -> None:
    """Nothing fits: the least memory any item can need (a proven lower bound over every item) and the lightest
    strategy of that item, verified."""
    items = walk.batches
    bounds = [item_memory_lower_bound(space, item) for item in items]
    least = min(range(len(items)), key=lambda i: (bounds[i], i))
    layout, mbs, mbn = items[least]
    inner, zeros = inner_choices(space)
    lightest = [layout.strategy(mbs, mbn, z, sp, mode) for sp, mode in inner if sp_allowed(sp, layout.tp) for z in zeros]
    evaluated = min((evaluate(space, s) for s in lightest), key=lambda e: (e.memory.peak_bytes, e.strategy.key()))
    result.explanation = explain_infeasible(space, walk, evaluated, int(bounds[least]))
