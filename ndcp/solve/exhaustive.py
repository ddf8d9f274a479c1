"""The exhaustive oracle: price every valid strategy with the full estimators, drop what does not fit, rank the rest.

It is the correctness reference for the CP-SAT search and the baseline its benchmarks compare against, so it stays
simple: the reference planner's nested loops (space.SearchSpace.candidates) and nothing clever.
"""
from __future__ import annotations

import itertools
import math
import time

from ..estimate.layout import default_partition
from ..space import SearchSpace
from ..specs.fields import SpecError
from ..specs.pipeline_layout import split_device_stages
from ..specs.strategy import RecomputePlan, Strategy
from .recompute import split_stage_counts
from .explain import explain_infeasible
from .result import CTRL_C, TIME_LIMIT, Evaluated, Progress, Ranking, SearchResult, evaluate, expiry, finish


# The most strategies the exhaustive oracle prices: above it, it refuses up front (docs/solver.md §4). At about 0.25
# ms a strategy (Llama-3-70B on 512 H100: 228,760 in 57 s), 20 million take about 80 minutes on one core.
MAX_CANDIDATES = 20_000_000


def exhaustive_search(space: SearchSpace, top: int = 10, progress=None, time_limit: float | None = None
                      ) -> SearchResult:
    """Every strategy of the space, priced; the `top` fastest that fit, ranked by step time. Strategies stream
    through a Ranking (memory flat in the space's size); SpecError above MAX_CANDIDATES. The time limit (None: none)
    or Ctrl-C stops the pricing: the best priced so far, status `feasible` with no bound on the rest (bound 0), or
    `unknown` when none fit yet."""
    start = time.perf_counter()
    expired = expiry(start, time_limit)
    walk = space.walk(expired)
    size = space.size(walk)
    if size > MAX_CANDIDATES:
        raise SpecError(f"--exhaustive would price {size:,} strategies (at most {MAX_CANDIDATES:,}); narrow the space "
                        "with --fix or --max, or drop --exhaustive (CP-SAT proves the optimum)")
    ranking = Ranking(top)

    def report(count: int) -> None:
        progress(Progress("pricing every candidate", time.perf_counter() - start, ranking.incumbent_seconds, None,
                          count, size))

    stop = (ranking.price(space.candidates(walk), lambda strategy: evaluate(space, strategy), expired,
                          report if progress is not None else None) if walk.complete else TIME_LIMIT)
    fitting = ranking.best
    status = "feasible" if stop else "optimal" if fitting else "infeasible"
    priced = ranking.fitting + ranking.misses
    result = ranking.finish(SearchResult(
        method="exhaustive", status=status, strategies=[],
        lower_bound_seconds=fitting[0].step_seconds if fitting and not stop else 0.0, space_size=size,
        refused=walk.refused, verified=priced, interrupted=stop == CTRL_C, space_complete=walk.complete), start)
    if stop:
        result.explanation = _stopped(stop, priced, size, walk.complete)
    elif not fitting:
        result.explanation = explain_infeasible(space, walk, ranking.least_miss)
    return result


def _stage_plans(layers: int, options: int) -> list[tuple[int, ...]]:
    """Every split of one stage's layers over `options` recompute options (counts in the options' order)."""
    if options == 1:
        return [(layers,)]
    return [(first,) + rest for first in range(layers, -1, -1) for rest in _stage_plans(layers - first, options - 1)]


def _partitions(layers: int, pp: int, vpp: int, max_offset: int) -> list[tuple[int, ...]]:
    """Every layers-per-virtual-stage tuple whose device stages hold within +-max_offset of the default partition's
    (at least a layer per chunk, split evenly over the chunks as recompute.PlanModel does); the default () first."""
    default = default_partition(layers, pp * vpp)
    base = [sum(default[s::pp]) for s in range(pp)]
    found = [()]
    for combo in itertools.product(*(range(max(vpp, b - max_offset), b + max_offset + 1) for b in base)):
        if sum(combo) == layers and list(combo) != base:
            found.append(split_device_stages(combo, vpp))
    return found


MAX_PLAN_CANDIDATES = 2_000_000  # the per-layer oracle refuses enumerations larger than this (hours in Python)


def _plan_candidates(space: SearchSpace, walk):
    """(layout, mbs, mbn, partition, stage plans, sp, zero) for every per-layer strategy of the space, and how many."""
    model = space.model
    groups, total = [], 0
    for layout, mbs, mbn in walk.batches:
        offset = space.partition_offset(layout)
        _, sps, modes = space.inner_choices(layout.tp)
        zeros = space.zero_stages(layout)
        for partition in _partitions(model.layers, layout.pp, layout.vpp, offset) if offset else [()]:
            counts = partition or default_partition(model.layers, layout.pp * layout.vpp)
            stage_layers = [sum(counts[s::layout.pp]) for s in range(layout.pp)]
            groups.append((layout, mbs, mbn, partition, counts, stage_layers, sps, zeros))
            splits = math.prod(math.comb(n + len(modes) - 1, len(modes) - 1) for n in stage_layers)
            total += splits * len(sps) * len(zeros)
    return groups, total


def _plan_strategies(space: SearchSpace, groups):
    """((layout, mbs, mbn, sp), strategy) for every per-layer strategy of `groups` (_plan_candidates)."""
    for layout, mbs, mbn, partition, counts, stage_layers, sps, zeros in groups:
        modes = space.inner_choices(layout.tp)[2]
        for plans in itertools.product(*(_stage_plans(n, len(modes)) for n in stage_layers)):
            stages = [dict(zip(modes, p)) for p in plans]
            recompute = RecomputePlan(mode="per-stage", stages=tuple(split_stage_counts(space.model, stages, counts,
                                                                                          layout.pp)))
            for sp in sps:
                for zero in zeros:
                    base = layout.strategy(mbs, mbn, zero, sp, "none")
                    yield (layout, mbs, mbn, sp), Strategy(**{**base.__dict__, "recompute": recompute,
                                                              "layers_per_stage": partition})


def exhaustive_plan_search(space: SearchSpace, top: int = 10, progress=None, time_limit: float | None = None
                           ) -> SearchResult:
    """The per-layer oracle: every strategy of the space with every per-stage recompute plan and every partition
    the space allows (space.partition_offset, as recompute.PlanModel searches), priced in full; the best plan of
    each (item, SP) is ranked. Exponential in the stages: for tests and small cases only (SpecError above
    MAX_PLAN_CANDIDATES). The time limit or Ctrl-C stops it as exhaustive_search."""
    start = time.perf_counter()
    expired = expiry(start, time_limit)
    walk = space.walk(expired)
    groups, size = _plan_candidates(space, walk)
    if size > MAX_PLAN_CANDIDATES:
        raise SpecError(f"the per-layer exhaustive search would price {size:,} strategies (every per-stage plan of "
                        f"every strategy; at most {MAX_PLAN_CANDIDATES:,}); use --recompute uniform with "
                        "--exhaustive, or drop --exhaustive (CP-SAT proves the per-layer optimum)")
    best: dict[tuple, Evaluated] = {}
    misses = Ranking(top=0)  # only misses are added: the nearest, the least memory and how many
    count, incumbent, stop = 0, None, None if walk.complete else TIME_LIMIT
    try:
        for key, strategy in _plan_strategies(space, groups) if not stop else ():
            if expired():
                stop = TIME_LIMIT
                break
            evaluated = evaluate(space, strategy)
            count += 1
            if not evaluated.fits:
                misses.add(evaluated)
            elif key not in best or Evaluated.rank_key(evaluated) < Evaluated.rank_key(best[key]):
                best[key] = evaluated
                incumbent = min(incumbent or evaluated.step_seconds, evaluated.step_seconds)
            if progress is not None and count % 500 == 0:
                progress(Progress("pricing every per-stage plan", time.perf_counter() - start, incumbent, None,
                                  count, size))
    except KeyboardInterrupt:
        stop = CTRL_C
    fitting = sorted(best.values(), key=Evaluated.rank_key)
    result = finish(SearchResult(
        method="exhaustive per-layer", status="feasible" if stop else "optimal" if fitting else "infeasible",
        strategies=[], lower_bound_seconds=fitting[0].step_seconds if fitting and not stop else 0.0,
        space_size=size, verified=count, refused=walk.refused, interrupted=stop == CTRL_C,
        space_complete=walk.complete), start, fitting, misses.fastest_misses, top)
    result.over_memory = misses.misses
    result.nearest_misses = []  # unchanged: this oracle has never listed nearest misses (plan_search does)
    if stop:
        result.explanation = _stopped(stop, count, size, walk.complete)
    elif not fitting:
        result.explanation = explain_infeasible(space, walk, misses.least_miss)
    return result


def _stopped(stop: str, priced: int, size: int, walked: bool) -> str:
    """Why an oracle stopped early and how far it got."""
    return (f"{stop}: priced {priced:,} of {size:,} strategies" + ("" if walked else " (the walk of the space stopped "
            "too)") + "; nothing is known of the rest (bound 0)")
