"""What one search carries from start to end: its space, how many strategies it ranks, its clock and the solver's
settings. Built once per search (`SearchContext.begin`) and handed to everything the search calls."""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable

from ..space import SearchSpace
from .result import Progress


@dataclass(frozen=True)
class SearchContext:
    space: SearchSpace
    top: int  # how many of the fastest strategies are ranked (and proven)
    start: float  # time.perf_counter() when the search began
    deadline: float  # time.perf_counter() past which the search ends with what it has proven
    seed: int = 0  # CP-SAT's random seed
    workers: int = 1  # CP-SAT's parallel workers
    progress: Callable[[Progress], None] | None = None  # live reports for the terminal, or None

    @classmethod
    def begin(cls, space: SearchSpace, top: int, time_limit: float, seed: int = 0, workers: int = 1,
              progress: Callable[[Progress], None] | None = None) -> SearchContext:
        """The context of a search starting now, with `time_limit` seconds."""
        start = time.perf_counter()
        return cls(space, top, start, start + time_limit, seed, workers, progress)

    def left(self) -> float:
        """Seconds until the deadline (negative once it has passed)."""
        return self.deadline - time.perf_counter()

    def expired(self) -> bool:
        return time.perf_counter() > self.deadline

    def elapsed(self) -> float:
        return time.perf_counter() - self.start


def with_max_offset(space: SearchSpace, max_offset: int | None) -> SearchSpace:
    """`space` with options.max_offset set (None: unchanged). The same object when nothing changes, so caches keyed
    by the space keep hitting."""
    if max_offset is None or max_offset == space.options.max_offset:
        return space
    return replace(space, options=replace(space.options, max_offset=max_offset))
