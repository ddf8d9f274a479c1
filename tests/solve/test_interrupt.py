"""Ctrl-C during a search returns what is known, like the time limit: the best verified strategies (if any) with
the proven bound, status `feasible`, never a traceback."""
import _thread
import threading

from ndcp.solve.certificate import cpsat_search
from ndcp.space import SearchSpace
from ndcp.specs import ClusterSpec, RunSpec, device_preset
from ndcp.specs.library import load_model


def test_interrupted_search_returns_feasible_with_a_bound():
    space = SearchSpace(load_model("mixtral-8x22b"), ClusterSpec(device_preset("h100"), 2048),
                        RunSpec(global_batch=2048, seq_len=4096))
    timer = threading.Timer(1.0, _thread.interrupt_main)
    timer.start()
    try:
        result = cpsat_search(space, top=10, time_limit=60)
    finally:
        timer.cancel()
    assert result.status == "feasible" and "interrupted" in result.explanation
    assert result.solve_seconds < 10
    if result.strategies:
        assert result.lower_bound_seconds <= result.strategies[0].step_seconds
