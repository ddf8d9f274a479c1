"""The exhaustive oracle: price every valid strategy with the full estimators, drop what does not fit, rank the rest.

It is the correctness reference for the CP-SAT search and the baseline its benchmarks compare against, so it stays
simple: the reference planner's nested loops (space.SearchSpace.candidates) and nothing clever.
"""
from __future__ import annotations

import time

from ..space import SearchSpace
from .explain import explain_infeasible
from .result import Evaluated, Progress, SearchResult, evaluate

NEAREST_MISSES = 5


def exhaustive_search(space: SearchSpace, top: int = 10, progress=None) -> SearchResult:
    """Every strategy of the space, priced; the `top` fastest that fit, ranked by step time."""
    start = time.perf_counter()
    walk = space.walk()
    fitting: list[Evaluated] = []
    misses: list[Evaluated] = []
    size = space.size(walk)
    incumbent = None
    for count, strategy in enumerate(space.candidates(walk), 1):
        evaluated = evaluate(space, strategy)
        (fitting if evaluated.fits else misses).append(evaluated)
        if evaluated.fits and (incumbent is None or evaluated.step_seconds < incumbent):
            incumbent = evaluated.step_seconds
        if progress is not None and count % 500 == 0:
            progress(Progress("pricing every candidate", time.perf_counter() - start, incumbent, None, count, size))
    fitting.sort(key=Evaluated.rank_key)
    best = fitting[0].step_seconds if fitting else float("inf")
    nearest = sorted((e for e in misses if e.step_seconds < best), key=Evaluated.rank_key)[:NEAREST_MISSES]
    elapsed = time.perf_counter() - start
    result = SearchResult(
        method="exhaustive", status="optimal" if fitting else "infeasible", strategies=fitting[:top],
        lower_bound_seconds=best if fitting else 0.0, space_size=size, refused=walk.refused,
        solve_seconds=elapsed, verified=size, over_memory=len(misses), nearest_misses=nearest)
    if not fitting:
        least = min(misses, key=lambda e: (e.memory.peak_bytes, e.strategy.key()), default=None)
        result.explanation = explain_infeasible(space, walk, least)
    return result
