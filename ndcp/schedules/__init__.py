"""Pipeline schedules: one module each, registered here (adding one = its module, a line below, and its tests)."""
from __future__ import annotations

from functools import lru_cache

from .base import LinearPipeline, Refusal, Schedule
from .dualpipe import DualPipe
from .dualpipev import DualPipeV
from .interleaved import Interleaved
from .one_f_one_b import OneFOneB
from .zero_bubble import ZeroBubbleH1

# The default schedule of a vpp is the first registered one that runs it (default_schedule), so 1F1B and
# interleaving come first.
SCHEDULES: dict[str, Schedule] = {s.name: s for s in (OneFOneB(), Interleaved(), ZeroBubbleH1(), DualPipe(),
                                                      DualPipeV())}


def schedule_named(name: str) -> Schedule:
    """The registered schedule of this name (names are validated by the rulebook before they get here)."""
    return SCHEDULES[name]


@lru_cache(maxsize=None)
def default_schedule(vpp: int) -> str:
    """The schedule a strategy runs when none is named: the first registered one that runs `vpp` chunks."""
    return next(name for name, s in SCHEDULES.items() if s.accepts_vpp(vpp))


__all__ = ["SCHEDULES", "Schedule", "Refusal", "LinearPipeline", "schedule_named", "default_schedule"]
