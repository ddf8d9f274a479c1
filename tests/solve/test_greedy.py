"""The greedy recompute baseline (SAPP ND): it fits when it says so, is never faster than the exact per-layer
optimum, and `ndcp search --recompute greedy` reports it as a heuristic (no proof, no bound)."""
import json

from ndcp.cli import main
from ndcp.solve.certificate import plan_search
from ndcp.solve.greedy import greedy_search
from ndcp.space import SearchSpace
from ndcp.specs import ClusterSpec, RunSpec, device_preset
from ndcp.specs.library import load_model

GIB = 2**30


def test_greedy_never_beats_per_layer_optimum():
    space = SearchSpace(load_model("tiny"), ClusterSpec(device_preset("h100"), 8),
                        RunSpec(global_batch=32, seq_len=1024, memory_cap_bytes=int(1.2 * GIB)))
    greedy = greedy_search(space, top=3)
    exact = plan_search(space, top=3, time_limit=60)
    assert greedy.status in ("heuristic", "infeasible")
    assert not greedy.proven
    if greedy.strategies:
        assert all(e.fits for e in greedy.strategies)
        assert exact.status == "optimal"
        assert exact.best.step_seconds <= greedy.best.step_seconds * (1 + 1e-9)


def test_search_greedy_json_is_honest(capsys):
    code = main(["search", "tiny", "--device", "h100", "--gpus", "8", "--global-batch", "32", "--seq-len", "1024",
                 "--recompute", "greedy", "--json", "-"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    assert doc["status"] == "heuristic" and doc["proven"] is False
    assert doc["gap"] is None and doc["lower_bound_seconds"] is None
    assert doc["method"] == "greedy"
