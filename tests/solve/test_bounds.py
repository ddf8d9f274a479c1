"""The bounds the searches prune with are valid: no strategy of an item is faster than the item's bound, and no
strategy that fits is faster than its memory-aware bound (the proofs rest on this)."""
from hypothesis import HealthCheck, given, settings

from ndcp.solve.coefficients import (item_data_parallel_floor, item_lower_bound, item_memory_lower_bound,
                                     item_plan_lower_bound, item_plan_lower_bounds)
from ndcp.solve.result import evaluate

from .test_cpsat_vs_oracle import problems


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(space=problems())
def test_item_bounds_never_exceed_the_full_estimators(space):
    walk = space.walk()
    by_item: dict = {}
    for strategy in space.candidates(walk):
        key = (strategy.tp, strategy.pp, strategy.cp, strategy.dp, strategy.ep, strategy.etp, strategy.vpp,
               strategy.mbs, strategy.cp_comm, strategy.schedule)
        by_item.setdefault(key, []).append(evaluate(space, strategy))
    for layout, mbs, mbn in walk.batches:
        item = (layout, mbs, mbn)
        evaluated = by_item[(layout.tp, layout.pp, layout.cp, layout.dp, layout.ep, layout.etp, layout.vpp, mbs,
                             layout.cp_comm, layout.schedule)]
        fastest = min(e.step_seconds for e in evaluated)
        assert item_lower_bound(space, item) + item_data_parallel_floor(space, item) <= fastest * (1 + 1e-9)
        fitting = [e for e in evaluated if e.fits]
        plan_bound = item_plan_lower_bound(space, item)
        if fitting:
            assert plan_bound is not None
            assert plan_bound <= min(e.step_seconds for e in fitting) * (1 + 1e-9)
            assert item_memory_lower_bound(space, item) <= min(e.memory.peak_bytes for e in fitting)
        # per SP setting (the per-layer search skips a setting whose bound cannot beat the K-th best, or that is
        # left out because nothing with it fits)
        per_sp = item_plan_lower_bounds(space, item)
        for sp in {e.strategy.sp for e in fitting}:
            assert per_sp[sp] <= min(e.step_seconds for e in fitting if e.strategy.sp == sp) * (1 + 1e-9)
