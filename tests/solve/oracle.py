"""The one comparison every oracle test makes: a search and the exhaustive enumeration of the same space rank the
same step times (the per-layer plans within PLAN_TOLERANCE, the plan model's proven rounding)."""
import pytest

from ndcp.solve.certificate import PLAN_TOLERANCE, cpsat_search, plan_search
from ndcp.solve.exhaustive import exhaustive_plan_search, exhaustive_search


def _assert_same_ranking(solved, oracle, rel: float):
    assert solved.status == oracle.status
    assert [e.step_seconds for e in solved.strategies] == pytest.approx([e.step_seconds for e in oracle.strategies],
                                                                        rel=rel)


def assert_uniform_search_matches_oracle(space, top: int):
    """CP-SAT (uniform recompute) against exhaustive_search; returns (oracle, solved)."""
    oracle, solved = exhaustive_search(space, top=top), cpsat_search(space, top=top, time_limit=60)
    _assert_same_ranking(solved, oracle, 1e-9)
    return oracle, solved


def assert_plan_search_matches_oracle(space, top: int):
    """The joint per-layer plan search against exhaustive_plan_search; returns (oracle, solved)."""
    oracle, solved = exhaustive_plan_search(space, top=top), plan_search(space, top=top, time_limit=60)
    _assert_same_ranking(solved, oracle, PLAN_TOLERANCE)
    if oracle.strategies:  # the proven bound holds for the true optimum, plans accepted within the tolerance included
        assert solved.lower_bound_seconds <= oracle.strategies[0].step_seconds * (1 + 1e-9)
    return oracle, solved
