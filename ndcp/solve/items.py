"""What the CP-SAT searches share about batch items: their first bounds, the levels that tighten them, and why nothing
fits when no item does (docs/solver.md §2 and §4)."""
from __future__ import annotations

import heapq

from ..rules import sp_allowed
from ..space import SearchSpace
from .coefficients import (BoundMemo, inner_choices, item_data_parallel_floor, item_lower_bounds,
                           item_memory_lower_bound, item_work_bounds)
from .plan_bounds import item_plan_lower_bounds
from .context import SearchContext
from .explain import explain_infeasible
from .result import Progress, SearchResult, evaluate, finish

# bound levels: 0 the work, 1 the pipeline, 2 + DP floor, 3 memory-aware plan bound (then expand or solve)
READY = 3


def unsolved(method: str, space_size: int, walk) -> SearchResult:
    """A search's result before anything is found (`infeasible` until a strategy is verified)."""
    return SearchResult(method=method, status="infeasible", strategies=[], lower_bound_seconds=0.0,
                        space_size=space_size, refused=walk.refused)


def bounded_items(ctx: SearchContext, method: str):
    """Walk the space and bound every batch item at level 0 (the deadline checked during the walk and every 256
    items): (walk, result, bounds), bounds an ItemBounds, or None when the search ends here, with `result` finished
    (empty space, or out of time)."""
    space = ctx.space
    walk = space.walk(ctx.expired)
    result = unsolved(method, space.size(walk), walk)
    if not walk.complete:
        result.status, result.space_complete = "feasible", False
        result.explanation = (f"time limit reached while walking the space ({len(walk.batches):,} batch items so "
                              f"far); nothing verified yet")
        return walk, finish(result, ctx.start), None
    if not walk.batches:
        result.explanation = explain_infeasible(space, walk, None)
        return walk, finish(result, ctx.start), None

    def check(done: int) -> None:
        if ctx.expired():
            raise TimeoutError
        if ctx.progress is not None:
            ctx.progress(Progress(f"bounding batch items {done:,}/{len(walk.batches):,}", ctx.elapsed(), None, None))

    memo = BoundMemo()  # the per-layer terms the later levels share
    try:
        bounds = item_work_bounds(space, walk.batches, check, memo)
    except (TimeoutError, KeyboardInterrupt) as stop:
        result.status = "feasible"
        result.interrupted = isinstance(stop, KeyboardInterrupt)
        result.explanation = (f"{'interrupted' if result.interrupted else 'time limit reached'} while "
                              f"bounding the {len(walk.batches):,} batch items; nothing verified yet")
        return walk, finish(result, ctx.start), None
    return walk, result, ItemBounds(space, walk.batches, bounds, memo)


class ItemBounds:
    """Each batch item's current bound (seconds, None once proven not to fit), its level, and from level 3 its bound
    per SP setting. The uniform search and the per-layer one share one when their spaces agree (no partition
    offsets), so no item is tightened twice."""

    def __init__(self, space: SearchSpace, items, bounds: list[float], memo: BoundMemo | None = None):
        self.space, self.items = space, items
        self.seconds: list[float | None] = list(bounds)
        self.levels = [0] * len(bounds)
        self.per_sp: dict[int, dict[bool, float]] = {}  # item -> {sp: bound} (level 3; an sp left out cannot fit)
        # the per-layer terms of the bounds, shared between items (and levels: item_work_bounds fills it too)
        self.memo = BoundMemo() if memo is None else memo

    def tighten(self, i: int) -> float | None:
        """Item i's bound at its next level (seconds), recorded; None when it is proven not to fit: level 1 takes the
        pipeline bound (item_lower_bounds; the work bound of level 0 is never above it), level 2 adds the cheap
        data-parallel floor, level 3 takes the memory-aware plan bound per SP setting. Cheap levels first, so most
        items are cut before the costly ones. Uneven partitions as the space allows (space.partition_offset)."""
        bound, item = self.seconds[i], self.items[i]
        if self.levels[i] == 0:
            bound = max(bound, item_lower_bounds(self.space, [item], memo=self.memo)[0])
        elif self.levels[i] == 1:
            bound += item_data_parallel_floor(self.space, item, self.memo)
        else:
            self.per_sp[i] = {sp: max(bound, b) for sp, b in item_plan_lower_bounds(self.space, item).items()}
            bound = min(self.per_sp[i].values(), default=None)
        self.seconds[i] = bound
        self.levels[i] += 1
        return bound

    def queue(self) -> list[tuple[float, int, int]]:
        """(bound, item, level) of every item that may still fit, as a heap."""
        out = [(b, i, self.levels[i]) for i, b in enumerate(self.seconds) if b is not None]
        heapq.heapify(out)
        return out


def explain_memory(space: SearchSpace, walk, result: SearchResult) -> None:
    """Nothing fits: the least memory any item can need (a proven lower bound over every item) and the lightest
    strategy of that item, verified."""
    items = walk.batches
    bounds = [item_memory_lower_bound(space, item) for item in items]
    least = min(range(len(items)), key=lambda i: (bounds[i], i))
    layout, mbs, mbn = items[least]
    inner, _ = inner_choices(space)
    lightest = [layout.strategy(mbs, mbn, z, sp, mode) for sp, mode in inner if sp_allowed(sp, layout.tp)
                for z in space.zero_stages(layout)]
    evaluated = min((evaluate(space, s) for s in lightest), key=lambda e: (e.memory.peak_bytes, e.strategy.key()))
    result.explanation = explain_infeasible(space, walk, evaluated, int(bounds[least]))
