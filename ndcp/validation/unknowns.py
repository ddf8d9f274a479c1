"""Knobs a measured run does not publish (`unknown`: vpp, mbs, zero, sp, recompute), filled by ndcp's own search.

The search is `ndcp search` with every published field pinned (`--fix` the published degrees, the stated ZeRO
stage, SP, recompute, schedule, CP communication and optimizer offload) and only the unknown knobs free: its winner
is the fastest strategy the published constraints allow that fits the device, and the row takes the unknown knobs'
values from it (the published fields stay as published, e.g. an explicit pipeline partition). The search is the
uniform CP-SAT method under a small time limit (PINNED_TIME_LIMIT); its status is said in the row's assumptions.
An unknown recompute is the lightest option (RECOMPUTE_MODES' order) as fast as the winner's: where the step does
not depend on it (a step bound by communication), a trainer has no reason to recompute more, and the memory
compared is the lighter one's. Where the search holds no strategy (a published vpp above the space's range, a run
with fewer micro-batches than stages), the fastest uniform recompute that fits is estimated directly; where none
fits, the row keeps the heaviest (full recompute) and says so: these runs ran.
"""
from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from ..estimate.memory import estimate_memory
from ..estimate.time import estimate_time
from ..rules import RULEBOOK, Problem, strategy_degrees
from ..space import DEFAULT_SCHEDULES, SearchSpace, SpaceOptions
from ..specs.device import ClusterSpec
from ..specs.model import ModelSpec
from ..specs.recompute import HEAVIEST, RECOMPUTE_MODES
from ..specs.run import RunSpec
from ..specs.strategy import RecomputePlan, Strategy

PINNED_TIME_LIMIT = 10.0  # seconds: the pinned spaces are small (a few hundred candidates); the status says if cut
SAME_STEP = 1e-9  # relative: steps this close are the same step (ties the recompute option does not break)
PINNED_DEGREES = ("tp", "pp", "cp", "dp", "ep", "etp")
# the Strategy fields each unknown knob decides (vpp brings its schedule and partition, mbs its micro-batch count)
DECIDES = {"vpp": ("vpp", "schedule", "layers_per_stage"), "mbs": ("mbs", "mbn"), "zero": ("zero",),
           "sp": ("sp",), "recompute": ("recompute",)}


def pinned_options(strategy: Strategy, unknown: tuple[str, ...]) -> SpaceOptions:
    """The search space options that pin every published field of `strategy` and leave `unknown` free."""
    s = strategy
    fix = [(name, getattr(s, name)) for name in PINNED_DEGREES]
    fix += [(name, getattr(s, name)) for name in ("vpp", "mbs", "zero") if name not in unknown]
    uniform = s.recompute.mode in RECOMPUTE_MODES
    modes = RECOMPUTE_MODES if "recompute" in unknown or not uniform else (s.recompute.mode,)
    return SpaceOptions(fix=tuple(fix), recompute_modes=modes,
                        zero_stages=(0, 1, 2, 3) if "zero" in unknown else (s.zero,),
                        sp_choices=(False, True) if "sp" in unknown else (s.sp,), cp_comms=(s.cp_comm,),
                        schedules=DEFAULT_SCHEDULES if "vpp" in unknown else (s.schedule,),
                        optimizer_offloads=(s.optimizer_offload,))


@lru_cache(maxsize=256)
def _pinned_best(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, strategy: Strategy,
                 unknown: tuple[str, ...]) -> tuple[Strategy | None, str]:
    """The pinned search's winner (None when nothing fits) and its status; cached: several tests and the fit
    read the same runs."""
    from ..solve.search import SearchOptions, search  # OR-Tools (~1 s): only where a run leaves a knob unknown

    space = SearchSpace(model, cluster, run, pinned_options(strategy, unknown))
    result = search(space, "uniform", SearchOptions(top=1, time_limit=PINNED_TIME_LIMIT, seed=0, workers=1))
    best = result.best
    return (best.strategy if best is not None else None), result.status


def _described(strategy: Strategy, unknown: tuple[str, ...]) -> str:
    words = {"vpp": f"vpp {strategy.vpp}", "mbs": f"mbs {strategy.mbs}", "zero": f"zero {strategy.zero}",
             "sp": f"sp {'on' if strategy.sp else 'off'}", "recompute": f"recompute {strategy.recompute.mode}"}
    return ", ".join(words[k] for k in unknown)


def _allowed(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, strategy: Strategy) -> bool:
    """The rulebook allows it (but mbn >= pp, which a measured run may break: run_strategy.BELOW_PP_RULE)."""
    problem, degrees = Problem(model, cluster, run), strategy_degrees(strategy)
    return all(rule.name == "mbn_pp" or rule.broken(problem, degrees) is None for rule in RULEBOOK)


def _by_recompute(model: ModelSpec, cluster: ClusterSpec, run: RunSpec,
                  strategy: Strategy) -> list[tuple[float, Strategy]]:
    """(step seconds, strategy) for each uniform recompute option the rules allow and that fits, lightest first."""
    out = []
    for mode in RECOMPUTE_MODES:
        candidate = strategy.with_(recompute=RecomputePlan.uniform(mode))
        if _allowed(model, cluster, run, candidate) and estimate_memory(model, cluster, run, candidate).fits:
            out.append((estimate_time(model, cluster, run, candidate).step_seconds, candidate))
    return out


def _lightest_as_fast(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, winner: Strategy) -> Strategy:
    """The lightest recompute option whose step is the winner's (else the winner)."""
    step = estimate_time(model, cluster, run, winner).step_seconds
    same = [s for t, s in _by_recompute(model, cluster, run, winner) if t <= step * (1 + SAME_STEP)]
    return same[0] if same else winner


class Filled(NamedTuple):
    """A strategy with its unknown knobs filled, and what filled them (the row's assumption; "" when none)."""

    strategy: Strategy
    note: str


def fill_unknowns(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, strategy: Strategy,
                  unknown: tuple[str, ...]) -> Filled:
    """`strategy` with its unknown knobs set from the pinned search's winner (module docstring), and the note."""
    if not unknown:
        return Filled(strategy, "")
    best, status = _pinned_best(model, cluster, run, strategy, unknown)
    if best is not None:
        filled = strategy.with_(**{field: getattr(best, field) for key in unknown for field in DECIDES[key]})
        if "recompute" in unknown:
            filled = _lightest_as_fast(model, cluster, run, filled)
        return Filled(filled, f"{_described(filled, unknown)} (unknown: ndcp's pinned search, {status})")
    fitting = _by_recompute(model, cluster, run, strategy) if unknown == ("recompute",) else []
    if fitting:
        filled = min(fitting, key=lambda pair: pair[0])[1]
        return Filled(filled, f"{_described(filled, unknown)} (unknown: outside the search's space, {status}; the "
                              "fastest uniform recompute that fits, estimated)")
    filled = strategy.with_(recompute=RecomputePlan.uniform(HEAVIEST)) if "recompute" in unknown else strategy
    return Filled(filled, f"{_described(filled, unknown)} (unknown: nothing the pinned search holds fits, {status}; "
                          "kept)")


__all__ = ["Filled", "fill_unknowns", "pinned_options", "PINNED_TIME_LIMIT"]
