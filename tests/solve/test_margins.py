"""The confidence margin in the linear memory bounds (ndcp/solve/margins.py): none at confidence 0 (the models are
today's), exact per plan in the plan model (whichever recompute families the plan runs), and never above any plan's
own in the bounds."""
import pytest

from ndcp.solve import margins
from ndcp.solve.coefficients import expand_item, inner_choices
from ndcp.solve.margins import (FamilyMargin, PlanMargins, layout_margins, layout_point_margin, least_margin,
                                least_margins, plan_margins, point_margin)
from ndcp.space import SearchSpace, SpaceOptions
from ndcp.specs import ClusterSpec, RunSpec, device_preset
from ndcp.specs.library import load_model
from ndcp.specs.recompute import NO_RECOMPUTE
from tests.solve.test_plan_model import best, coefficients, stage

MODES = ("none", "selective", "offload", "full")


def space(confidence: float) -> SearchSpace:
    return SearchSpace(load_model("tiny"), ClusterSpec(device_preset("h100"), 8),
                       RunSpec(global_batch=32, seq_len=1024, memory_cap_bytes=2**30, reserve_bytes=2**20,
                               confidence=confidence),
                       SpaceOptions(zero_stages=(1, 2), recompute_modes=MODES))


def items(s: SearchSpace, count: int = 6):
    return s.walk().batches[:count]


def test_at_confidence_zero_no_model_carries_a_margin():
    s = space(0.0)
    for layout, mbs, mbn in items(s):
        base = layout.strategy(mbs, mbn, 1, False, NO_RECOMPUTE)
        assert not plan_margins(s, base, MODES, (1, 2)).any
        assert expand_item(s, (layout, mbs, mbn)).margin == ()
        assert least_margin(s, base, MODES, (None,)) == 0


def test_the_uniform_tables_carry_each_points_own_margin():
    s = space(0.9)
    inner, zeros = inner_choices(s)
    layout, mbs, mbn = items(s)[0]
    table = expand_item(s, (layout, mbs, mbn))
    for j, ((sp, mode), ok) in enumerate(zip(inner, table.allowed)):
        for z, zero in enumerate(zeros):
            expected = point_margin(s, layout.strategy(mbs, mbn, zero, sp, mode)) if ok else 0
            assert table.margin[j][z] == expected
    assert any(m > 0 for row in table.margin for m in row)


def test_the_bounds_margin_is_at_most_every_plans_own():
    s = space(0.9)
    inner, zeros = inner_choices(s)
    for layout, mbs, mbn in items(s):
        base = layout.strategy(mbs, mbn, zeros[0], False, NO_RECOMPUTE)
        least = least_margin(s, base, MODES, (None,))
        assert least > 0
        assert all(least <= point_margin(s, layout.strategy(mbs, mbn, z, sp, mode))
                   for sp, mode in inner for z in zeros)


def test_the_items_of_a_layout_share_their_margins():
    """A plan's features do not depend on its micro-batch size or count, so the bounds and the exact tables compute
    the margins once per layout (margins.layout_margins, layout_point_margin): the same as each item's own."""
    s = space(0.9)
    _, zeros = inner_choices(s)
    layouts = {}
    for layout, mbs, mbn in s.walk().batches:
        layouts.setdefault(layout, []).append((mbs, mbn))
    shared = [(layout, sizes) for layout, sizes in layouts.items() if len(sizes) > 1]
    assert shared  # the tiny space has layouts with several micro-batch sizes
    for layout, sizes in shared:
        for sp in (False, True):
            per_layout = layout_margins(s, layout, sp, zeros[0], MODES, (*zeros, None))
            for mbs, mbn in sizes:
                base = layout.strategy(mbs, mbn, zeros[0], sp, NO_RECOMPUTE)
                own = least_margins(s, base, MODES, zeros)
                assert per_layout == {**own, None: least_margin(s, base, MODES, (None,))}
                assert all(layout_point_margin(s, layout, z, sp, mode)
                           == point_margin(s, layout.strategy(mbs, mbn, z, sp, mode)) for z in zeros for mode in MODES)


@pytest.fixture
def fresh_margin_caches():
    margins._every_set.cache_clear(), margins._entries.cache_clear()
    yield
    margins._every_set.cache_clear(), margins._entries.cache_clear()


def test_plan_margins_hold_one_entry_when_the_families_do_not_matter(monkeypatch, fresh_margin_caches):
    s = space(0.9)
    layout, mbs, mbn = items(s)[0]
    base = layout.strategy(mbs, mbn, 1, False, NO_RECOMPUTE)
    # every feature set at one band factor (the measured peaks do not tell the families apart): one entry
    monkeypatch.setattr(margins, "features_high", lambda features, confidence: 1.25)
    evidenced = plan_margins(s, base, ("none", "selective", "full"), (1,))
    assert evidenced.per_zero[0] == (FamilyMargin(frozenset(), 1.25),)


def test_plan_margins_keep_an_entry_per_family_set_when_the_families_differ():
    s = space(0.9)
    layout, mbs, mbn = items(s)[0]
    base = layout.strategy(mbs, mbn, 1, False, NO_RECOMPUTE)
    with_offload = plan_margins(s, base, MODES, (1,))  # no measured run offloads: its sets keep more free
    assert with_offload.by_family
    high = {e.families: e.memory_high for e in with_offload.per_zero[0]}
    assert high[frozenset({"activation offload"})] > high[frozenset({"no recompute"})]


FAMILIES = (("full recompute", ("full",)), ("no recompute", ("none",)))


KEEPS_5, KEEPS_30 = 8 / 7, 4.0  # factors that keep 5 and 30 of 40 bytes free (the largest peaks: 35 and 10)


@pytest.mark.parametrize("entries,expected", [
    ((), 400),  # no margin: every layer keeps its activations (4 x 10 bytes of 40)
    ((FamilyMargin(frozenset({"no recompute"}), KEEPS_5),), 430),  # keeping them all needs 45: one layer recomputes
    # the margin of the exact set of families in use, not of its subsets: mixing keeps 30 bytes free, all full none
    ((FamilyMargin(frozenset({"no recompute"}), KEEPS_5),
      FamilyMargin(frozenset({"full recompute", "no recompute"}), KEEPS_30)), 520),
])
def test_the_plan_model_applies_the_margin_of_the_families_in_use(entries, expected):
    assert [FamilyMargin(frozenset(), h).margin(40) for h in (KEEPS_5, KEEPS_30)] == [5, 30]
    c = coefficients(stage(), margins=PlanMargins(FAMILIES, (entries,)))
    found = best(c, 40)
    assert found is not None and found[0] == expected
