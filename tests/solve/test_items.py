"""Batch items' bounds (ndcp/solve/items.py): levels tighten in order, an item that cannot fit leaves the search, and
the per-layer search reuses the uniform search's tightening instead of repeating it."""
from collections import Counter
from dataclasses import replace

import pytest

from ndcp.solve import items, plan_bounds
from ndcp.solve.certificate import plan_search
from ndcp.solve.coefficients import item_work_bounds
from ndcp.solve.plan_bounds import item_plan_lower_bound
from ndcp.solve.items import READY, ItemBounds
from ndcp.space import SearchSpace, SpaceOptions
from ndcp.specs import ClusterSpec, ModelSpec, RunSpec, device_preset

MODEL = ModelSpec(name="small", layers=4, hidden=512, heads=8, kv_heads=8, ffn_hidden=1024, vocab=32000)


def space(cap: int = 2**29, max_offset: int = 0) -> SearchSpace:
    return SearchSpace(MODEL, ClusterSpec(device_preset("h100"), 4),
                       RunSpec(global_batch=8, seq_len=4096, memory_cap_bytes=cap, reserve_bytes=2**20),
                       SpaceOptions(zero_stages=(1, 3), max=(("vpp", 2),), max_offset=max_offset))


def test_levels_tighten_in_order_and_record_the_bound_per_sp_setting():
    s = space()
    walk = s.walk()
    bounds = ItemBounds(s, walk.batches, item_work_bounds(s, walk.batches))
    for i in range(len(walk.batches)):
        first = bounds.seconds[i]
        seen = [first]
        for _ in range(READY):
            seen.append(bounds.tighten(i))
        assert all(b is None or a <= b for a, b in zip(seen, seen[1:]))  # each level at least the one before
        assert bounds.levels[i] == READY
        plan = item_plan_lower_bound(s, walk.batches[i])
        if plan is None:  # cannot fit: it leaves the queue
            assert bounds.seconds[i] is None and i not in {j for _, j, _ in bounds.queue()}
        else:
            assert bounds.seconds[i] == min(bounds.per_sp[i].values())
            assert bounds.seconds[i] == pytest.approx(max(first, plan), rel=1e-12)  # two summation orders
            assert all(b >= first for b in bounds.per_sp[i].values())


def _plan_bounds_per_item(monkeypatch, searched: SearchSpace) -> Counter:
    calls = Counter()
    original = plan_bounds.item_plan_lower_bounds

    def counted(space, item):
        calls[(space.options.max_offset, item)] += 1
        return original(space, item)

    monkeypatch.setattr(items, "item_plan_lower_bounds", counted)
    assert plan_search(searched, top=2, time_limit=30).status == "optimal"
    return calls


def test_the_per_layer_search_tightens_no_item_twice(monkeypatch):
    calls = _plan_bounds_per_item(monkeypatch, space())
    assert calls and max(calls.values()) == 1


def test_with_uneven_partitions_the_uniform_search_bounds_its_own_items(monkeypatch):
    """Uniform plans keep the default partition, so their bounds are not valid for uneven ones: two sets."""
    calls = _plan_bounds_per_item(monkeypatch, replace(space(), options=replace(space().options, max_offset=1)))
    assert {offset for offset, _ in calls} <= {0, 1} and max(calls.values()) == 1
