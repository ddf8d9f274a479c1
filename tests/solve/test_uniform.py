"""The uniform search's first incumbent (ndcp.solve.uniform, `_dive`): a plan verified before the best-first
expansion, so that a search its time limit stops before the first solve still answers with a plan and its gap, and
nothing proven changes."""
import pytest

from ndcp.solve import uniform
from ndcp.solve.certificate import cpsat_search
from ndcp.solve.result import evaluate
from ndcp.space import SearchSpace
from ndcp.specs import ClusterSpec, RunSpec, device_preset
from ndcp.specs.library import load_model

# Under 40 GiB the cheapest items (no recompute) do not fit: the dive has to go past the front of the queue.
TIGHT = SearchSpace(load_model("llama3-70b"), ClusterSpec(device_preset("h100"), 64),
                    RunSpec(global_batch=128, seq_len=8192, memory_cap_bytes=40 * 2**30))


def test_a_search_stopped_before_its_first_solve_answers_with_the_dives_verified_plan(monkeypatch):
    exact = cpsat_search(TIGHT, top=1)
    monkeypatch.setattr(uniform._UniformSearch, "_optimum", lambda self: ("UNKNOWN", None, None))
    stopped = cpsat_search(TIGHT, top=1)
    assert stopped.status == "feasible" and len(stopped.strategies) == 1
    plan = stopped.strategies[0]
    again = evaluate(TIGHT, plan.strategy)  # the full estimators, once more
    assert again.fits and again.step_seconds == pytest.approx(plan.step_seconds)
    assert stopped.lower_bound_seconds <= exact.strategies[0].step_seconds <= plan.step_seconds


def test_without_the_dive_such_a_search_has_no_plan(monkeypatch):
    monkeypatch.setattr(uniform, "DIVE_ITEMS", 0)
    monkeypatch.setattr(uniform._UniformSearch, "_optimum", lambda self: ("UNKNOWN", None, None))
    assert not cpsat_search(TIGHT, top=1).strategies


@pytest.mark.parametrize("top", [1, 5])
def test_the_dive_changes_no_proven_answer(monkeypatch, top):
    with_dive = cpsat_search(TIGHT, top=top)
    monkeypatch.setattr(uniform, "DIVE_ITEMS", 0)
    without = cpsat_search(TIGHT, top=top)
    assert with_dive.status == without.status == "optimal"
    assert [(s.strategy, s.step_seconds) for s in with_dive.strategies] == \
        [(s.strategy, s.step_seconds) for s in without.strategies]
