"""One entry point for every search method: `search(space, method, options)`.

Methods: `uniform` (CP-SAT, one recompute mode per strategy), `per-layer` (CP-SAT with per-stage plans),
`exhaustive` and `exhaustive per-layer` (the oracles), `greedy` (the reference planner's heuristic plans).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..space import SearchSpace
from .certificate import cpsat_search, plan_search
from .exhaustive import exhaustive_plan_search, exhaustive_search
from .greedy import greedy_search
from .result import Progress, SearchResult

METHODS = ("uniform", "per-layer", "exhaustive", "exhaustive per-layer", "greedy")


@dataclass(frozen=True)
class SearchOptions:
    """How to search: ranking depth, solver limits and determinism, progress reports (what is searched, uneven
    partitions included, is the space's SpaceOptions)."""

    top: int = 10
    time_limit: float = 60.0  # seconds (every method)
    seed: int = 0
    workers: int = 1
    progress: Callable[[Progress], None] | None = None


def search_method(recompute: str, exhaustive: bool) -> str:
    """The method for `ndcp search --recompute R [--exhaustive]`: per-layer (per-layer or classic), greedy, or
    uniform (any other R)."""
    if recompute == "greedy":
        return "greedy"
    per_layer = recompute in ("per-layer", "classic")
    if exhaustive:
        return "exhaustive per-layer" if per_layer else "exhaustive"
    return "per-layer" if per_layer else "uniform"


def search(space: SearchSpace, method: str, options: SearchOptions = SearchOptions()) -> SearchResult:
    """The `options.top` fastest strategies of `space` that fit, found by `method` (one of METHODS)."""
    o = options
    if method == "greedy":
        return greedy_search(space, top=o.top, progress=o.progress, time_limit=o.time_limit)
    if method == "exhaustive per-layer":
        return exhaustive_plan_search(space, top=o.top, progress=o.progress, time_limit=o.time_limit)
    if method == "exhaustive":
        return exhaustive_search(space, top=o.top, progress=o.progress, time_limit=o.time_limit)
    if method == "per-layer":
        return plan_search(space, top=o.top, time_limit=o.time_limit, seed=o.seed, workers=o.workers,
                           progress=o.progress)
    if method == "uniform":
        return cpsat_search(space, top=o.top, time_limit=o.time_limit, seed=o.seed, workers=o.workers,
                            progress=o.progress)
    raise ValueError(f"unknown search method {method!r}; valid: {', '.join(METHODS)}")


__all__ = ["search", "search_method", "SearchOptions", "METHODS"]
