"""The reference planner's greedy recompute (SAPP ND), for comparison only: no proof, no optimality claim.

For one strategy (degrees, batch split, SP and ZeRO fixed, default partition), each pipeline stage starts with every
layer keeping its activations. A stage that does not fit first tries selective recompute on all its layers; when that
alone is not enough it grows its plan one fully recomputed layer at a time (SAPP's "potentials": none -> full, one
layer more per step) until it fits. Everything is priced by the full estimators (`evaluate`).

Stages are independent in memory (a stage's peak depends on its own plan only) and, from one full layer on, a stage's
memory only falls as layers turn full, so the smallest number of full layers that fits is found by bisection per
stage: the same plan as the one-layer-at-a-time loop, with a logarithmic number of estimator calls.
"""
from __future__ import annotations

import time

from ..estimate.layout import default_partition
from ..estimate.memory import estimate_memory
from ..space import SearchSpace
from ..specs.model import ModelSpec
from ..specs.strategy import Strategy
from .explain import explain_infeasible
from .recompute import plan_from_stage_totals
from .result import CTRL_C, TIME_LIMIT, Evaluated, Progress, Ranking, SearchResult, evaluate, expiry

STATUS = "heuristic"  # a greedy plan carries no proof: it is never "optimal" nor "feasible" with a bound


def _strategy(model: ModelSpec, base: Strategy, stages: list[dict[str, int]], chunk_layers: tuple[int, ...]
              ) -> Strategy:
    recompute = plan_from_stage_totals(model, stages, chunk_layers, base.pp, uneven=bool(base.layers_per_stage))
    return base.with_(recompute=recompute)


def greedy_plan(space: SearchSpace, base: Strategy) -> Evaluated:
    """The greedy per-stage recompute plan of one strategy (its own recompute plan is ignored), priced in full.
    When even full recompute of every layer does not fit, the all-full plan is returned (it does not fit)."""
    model, cluster, run = space.model, space.cluster, space.run
    pp = base.pp
    chunk_layers = base.layers_per_stage or default_partition(model.layers, base.virtual_stages)
    layers = [sum(chunk_layers[s::pp]) for s in range(pp)]

    def stage_bytes(stages):
        """Each stage's bytes over what fits at the run's confidence (MemoryEstimate.fit_bytes; <= 0: it fits)."""
        memory = estimate_memory(model, cluster, run, _strategy(model, base, stages, chunk_layers))
        return [s.total_bytes - memory.fit_bytes for s in memory.stages]

    def plan(mode, s, full=0):
        if mode == "full-count":
            return {"none": layers[s] - full, "selective": 0, "full": full}
        return {"none": layers[s] if mode == "none" else 0, "selective": layers[s] if mode == "selective" else 0,
                "full": 0}

    stages = [plan("none", s) for s in range(pp)]
    peaks = stage_bytes(stages)
    over = [s for s in range(pp) if peaks[s] > 0]
    if over:  # try selective recompute for all of a stage's layers first
        trial = [plan("selective", s) if s in over else stages[s] for s in range(pp)]
        peaks = stage_bytes(trial)
        for s in list(over):
            if peaks[s] <= 0:
                stages[s] = trial[s]
                over.remove(s)
    # none -> full one layer at a time; bisection on the count (fits is monotone from one full layer on)
    low = {s: 1 for s in over}  # the smallest count that may fit
    high = {s: layers[s] for s in over}  # a count that fits, or all layers (the most that can be saved)
    while any(low[s] < high[s] for s in over):
        mid = {s: (low[s] + high[s]) // 2 for s in over}
        trial = [plan("full-count", s, mid[s]) if s in over else stages[s] for s in range(pp)]
        peaks = stage_bytes(trial)
        for s in over:
            if low[s] < high[s]:
                if peaks[s] <= 0:
                    high[s] = mid[s]
                else:
                    low[s] = mid[s] + 1
    for s in over:
        stages[s] = plan("full-count", s, high[s])
    return evaluate(space, _strategy(model, base, stages, chunk_layers))


def greedy_search(space: SearchSpace, top: int = 10, progress=None, time_limit: float | None = None) -> SearchResult:
    """Every (layout, mbs, mbn, SP, ZeRO) of the space with its greedy recompute plan, ranked by step time.

    Status `heuristic` when something fits: the ranking is of greedy plans only, with no bound on what a better plan
    could reach (`ndcp search --recompute per-layer` gives the proven optimum). `infeasible` when no candidate fits
    even with every layer fully recomputed (the least memory the default partition allows). The time limit or
    Ctrl-C stops the walk early: the plans priced so far (`unknown` when none fits yet), the result saying how
    many candidates were priced."""
    start = time.perf_counter()
    expired = expiry(start, time_limit)
    walk = space.walk(expired)
    candidates = []
    for layout, mbs, mbn in walk.batches:
        _, sps, _ = space.inner_choices(layout.tp)
        candidates += [(layout, mbs, mbn, sp, zero) for sp in sps for zero in space.zero_stages(layout)]
    ranking = Ranking(top)

    def report(count: int) -> None:
        progress(Progress("greedy plan per candidate", time.perf_counter() - start, ranking.incumbent_seconds, None,
                          count, len(candidates)))

    def price(candidate) -> Evaluated:
        layout, mbs, mbn, sp, zero = candidate
        return greedy_plan(space, layout.strategy(mbs, mbn, zero, sp, "none"))

    stop = (ranking.price(candidates, price, expired, report if progress is not None else None, every=50)
            if walk.complete else TIME_LIMIT)
    priced = ranking.fitting + ranking.misses
    result = ranking.finish(SearchResult(
        method="greedy", status=STATUS if ranking.best else "feasible" if stop else "infeasible", strategies=[],
        lower_bound_seconds=0.0, space_size=len(candidates), refused=walk.refused, verified=priced,
        interrupted=stop == CTRL_C, space_complete=walk.complete), start)
    if stop:
        result.explanation = f"{stop}: greedy plans priced for {priced:,} of {len(candidates):,} candidates"
    elif not ranking.best:
        result.explanation = explain_infeasible(space, walk, ranking.least_miss)
    return result


__all__ = ["greedy_plan", "greedy_search", "STATUS"]
