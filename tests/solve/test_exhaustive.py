"""The exhaustive oracle streams: its ranking, nearest misses and counts are those of pricing every strategy and
sorting them all; its time limit and Ctrl-C return the best priced so far; it refuses spaces above its size."""
import pytest

from ndcp.solve import exhaustive, greedy, result as results
from ndcp.solve.exhaustive import exhaustive_search
from ndcp.solve.greedy import greedy_search
from ndcp.solve.result import CTRL_C, TIME_LIMIT, Evaluated, Ranking, evaluate, nearest_misses
from ndcp.space import SearchSpace, SpaceOptions
from ndcp.specs import ClusterSpec, RunSpec, device_preset
from ndcp.specs.fields import SpecError
from ndcp.specs.library import load_model
from tests.solve.test_interrupt import interrupt_on_call

# Under 30 GiB some strategies fit and many do not: the ranking and the nearest misses both have work to do.
SPACE = SearchSpace(load_model("llama3-8b"), ClusterSpec(device_preset("h100"), 8),
                    RunSpec(global_batch=32, seq_len=8192, memory_cap_bytes=30 * 2**30))
LARGE = SearchSpace(load_model("llama3-70b"), ClusterSpec(device_preset("h100"), 512),
                    RunSpec(global_batch=1024, seq_len=8192))


def test_the_streamed_ranking_is_the_sorted_one():
    priced = [evaluate(SPACE, s) for s in SPACE.candidates()]
    fitting = sorted((e for e in priced if e.fits), key=Evaluated.rank_key)
    misses = [e for e in priced if not e.fits]
    assert fitting and misses
    found = exhaustive_search(SPACE, top=7)
    assert [e.strategy for e in found.strategies] == [e.strategy for e in fitting[:7]]
    assert [e.strategy for e in found.nearest_misses] == [e.strategy for e in
                                                          nearest_misses(misses, fitting[0].step_seconds)]
    assert (found.over_memory, found.verified, found.status) == (len(misses), len(priced), "optimal")


def test_a_ranking_keeps_only_what_it_reports():
    ranking = Ranking(top=3)
    for strategy in SPACE.candidates():
        ranking.add(evaluate(SPACE, strategy))
    assert len(ranking.best) == 3 and len(ranking.fastest_misses) == results.NEAREST_MISSES
    assert ranking.fitting + ranking.misses == SPACE.size(SPACE.walk())


def test_the_time_limit_returns_the_best_priced_so_far():
    found = exhaustive_search(LARGE, top=3, time_limit=1.0)
    assert found.status in ("feasible", "unknown") and found.explanation.startswith(TIME_LIMIT)
    assert found.verified < found.space_size and found.lower_bound_seconds == 0.0
    assert found.solve_seconds < 3.0


def test_ctrl_c_returns_the_best_priced_so_far(monkeypatch):
    interrupt_on_call(monkeypatch, exhaustive, "evaluate", 300)
    found = exhaustive_search(SPACE, top=3)
    assert found.interrupted and found.explanation.startswith(CTRL_C) and found.verified == 299
    assert found.status == ("feasible" if found.strategies else "unknown")


def test_greedy_answers_ctrl_c_with_the_plans_priced_so_far(monkeypatch):
    interrupt_on_call(monkeypatch, greedy, "greedy_plan", 20)
    found = greedy_search(SPACE, top=3)
    assert found.interrupted and found.explanation.startswith(CTRL_C) and found.verified == 19
    assert found.status in ("heuristic", "unknown")


def test_a_space_above_the_size_cap_is_refused_up_front(monkeypatch):
    monkeypatch.setattr(exhaustive, "MAX_CANDIDATES", 100)
    with pytest.raises(SpecError, match=r"--exhaustive would price [\d,]+ strategies \(at most 100\)"):
        exhaustive_search(SPACE)


def test_the_flag_states_the_size_cap():
    from ndcp.options import SOLVER_OPTIONS

    (option,) = [o for o in SOLVER_OPTIONS if o.flag == "--exhaustive"]
    assert f"at most {exhaustive.MAX_CANDIDATES // 10**6} million" in option.help


def test_the_per_layer_oracle_answers_ctrl_c_and_its_time_limit(monkeypatch):
    # three recompute options keep the enumeration of every plan to a few seconds (all of them: over a minute)
    tiny = SearchSpace(load_model("tiny"), ClusterSpec(device_preset("h100"), 8), RunSpec(global_batch=16, seq_len=512),
                       SpaceOptions(recompute_modes=("none", "selective", "full")))
    whole = exhaustive.exhaustive_plan_search(tiny, top=3)
    assert whole.status == "optimal" and whole.verified > 40
    timed = exhaustive.exhaustive_plan_search(tiny, top=3, time_limit=0.0)
    assert timed.status == "unknown" and timed.explanation.startswith(TIME_LIMIT) and timed.verified == 0
    interrupt_on_call(monkeypatch, exhaustive, "evaluate", 40)
    found = exhaustive.exhaustive_plan_search(tiny, top=3)
    assert found.interrupted and found.verified == 39 and found.explanation.startswith(CTRL_C)
    assert found.status == "feasible" and found.strategies[0].step_seconds >= whole.strategies[0].step_seconds
