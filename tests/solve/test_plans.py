"""The per-layer search (ndcp/solve/plans.py): its uniform first phase is not cut by a clock of its own."""
import pytest

from ndcp.solve import certificate, plans


def test_the_uniform_phase_has_the_whole_time_limit(monkeypatch):
    """The uniform phase's verified plans seed the per-layer ranking: which plan, among those within the plan
    tolerance, an item ranks with can follow from them. A uniform phase with a deadline of its own (it had half
    the time limit) could be cut short on a loaded machine and not on an idle one, and a proven answer would then
    depend on the load; with the whole time limit, a uniform phase the clock cuts ends the search `feasible`."""
    from tests.solve.test_interrupt import TIGHT

    budgets, original = [], plans.uniform_search

    def spy(ctx, *args, **kwargs):
        budgets.append(ctx.deadline - ctx.start)
        return original(ctx, *args, **kwargs)

    monkeypatch.setattr(plans, "uniform_search", spy)
    assert certificate.plan_search(TIGHT, top=1, time_limit=600).status == "optimal"
    assert budgets == [pytest.approx(600)]
