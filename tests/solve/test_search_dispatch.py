"""`search(space, method, options)` runs the method's search function with the options."""
import pytest

from ndcp.solve import uniform
from ndcp.solve.certificate import cpsat_search
from ndcp.solve.exhaustive import exhaustive_search
from ndcp.solve.search import METHODS, SearchOptions, search, search_method
from ndcp.space import SearchSpace, SpaceOptions
from ndcp.specs import ClusterSpec, RunSpec, device_preset
from ndcp.specs.library import load_model


@pytest.fixture(scope="module")
def space():
    # none/selective/full: the per-layer oracle prices every per-stage split of the options (with all 7 of tiny's it
    # takes minutes; the dispatch is what is tested here)
    return SearchSpace(load_model("tiny"), ClusterSpec(device_preset("h100"), 8), RunSpec(global_batch=16, seq_len=512),
                       SpaceOptions(recompute_modes=("none", "selective", "full")))


def ranking(result):
    return [(e.strategy.key(), e.step_seconds) for e in result.strategies]


def test_methods_for_the_search_command():
    assert search_method("per-layer", False) == "per-layer"
    assert search_method("per-layer", True) == "exhaustive per-layer"
    assert search_method("uniform", True) == "exhaustive"
    assert search_method("selective", False) == "uniform"
    assert search_method("greedy", False) == "greedy"
    assert {search_method(r, e) for r in ("per-layer", "uniform", "greedy") for e in (False, True)} == set(METHODS)


def test_dispatch_matches_the_search_functions(space):
    options = SearchOptions(top=3)
    assert ranking(search(space, "uniform", options)) == ranking(cpsat_search(space, top=3))
    assert ranking(search(space, "exhaustive", options)) == ranking(exhaustive_search(space, top=3))
    for method in ("per-layer", "exhaustive per-layer", "greedy"):
        result = search(space, method, options)
        assert result.strategies and len(result.strategies) <= 3


def test_progress_callback_is_passed_on(space):
    seen = []
    search(space, "exhaustive", SearchOptions(top=1, progress=seen.append))
    assert seen


def test_the_default_search_reports_each_phase(space, monkeypatch):
    """Long searches spend most of their time bounding items: the live line says so, and what the uniform search run
    first reports carries no bound (its bounds do not hold for per-layer plans)."""
    monkeypatch.setattr(uniform, "PROGRESS_EVERY", 1)
    seen = []
    search(space, "per-layer", SearchOptions(top=3, progress=seen.append))
    assert seen[0].phase.startswith("bounding batch items 0/")
    first = [p for p in seen if p.phase.startswith("uniform first: ")]
    assert any(p.phase.endswith("bounds tightened") for p in first)
    assert first and all(p.lower_bound_seconds is None for p in first)
    assert any(p.phase == "solving per-stage recompute plans" for p in seen)


@pytest.mark.parametrize("method", ["per-layer", "uniform"])
def test_a_search_out_of_time_while_walking_says_so(space, method):
    result = search(space, method, SearchOptions(top=3, time_limit=0.0))
    assert result.status == "unknown" and not result.strategies  # nothing verified: not "feasible"
    assert not result.space_complete and result.as_dict()["space"]["complete"] is False
    assert result.explanation.startswith("time limit reached while walking the space")
    assert search(space, method, SearchOptions(top=3)).space_complete


def test_unknown_method(space):
    with pytest.raises(ValueError, match="unknown search method"):
        search(space, "simulated annealing")
