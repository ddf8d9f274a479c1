"""`ndcp recompute`: the memory-time frontier of one strategy is monotone, verified, and a cap below the least
memory exits 1 with one clear line."""
import json

import pytest

from ndcp.cli import main
from ndcp.solve.frontier import frontier
from ndcp.solve.greedy import greedy_plan
from ndcp.space import SearchSpace, SpaceOptions
from ndcp.specs import ClusterSpec, RunSpec, device_preset
from ndcp.specs.library import load_model
from ndcp.specs.recompute import RECOMPUTE_MODES, RecomputePlan

GIB = 2**30
PROBLEM = ["llama3-8b", "--device", "h100", "--gpus", "64", "--global-batch", "256", "--seq-len", "8192"]
STRATEGY = ["--strategy", "tp=2,pp=4,mbs=2,zero=1,sp=on"]


@pytest.fixture(scope="module")
def doc():
    import io
    from contextlib import redirect_stdout

    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["recompute", *PROBLEM, *STRATEGY, "--trainer", "any", "--json", "-"])
    assert code == 0
    return json.loads(out.getvalue())


def test_frontier_is_monotone_and_verified(doc):
    rows = doc["frontier"]
    assert len(rows) >= 3
    caps = [r["cap_bytes"] for r in rows]
    steps = [r["step_seconds"] for r in rows]
    assert caps == sorted(caps)
    assert all(a >= b for a, b in zip(steps, steps[1:]))  # a looser cap never gives a slower optimum
    for r in rows:
        assert r["peak_bytes"] <= r["cap_bytes"]
        assert r["bound_seconds"] <= r["step_seconds"] * (1 + 1e-9)
        assert sum(s["layers"] for s in r["stages"]) == 32
        # every layer runs one recompute option (module options and offload included)
        assert all(sum(n for k, n in s.items() if k in RECOMPUTE_MODES) == s["layers"] for s in r["stages"])
    assert doc["least_memory_bytes"] <= caps[0]
    assert rows[0]["stages"][0]["full"] > 0  # the tightest point recomputes
    assert all(s["full"] == 0 for s in rows[-1]["stages"])  # the loosest keeps activations


def test_a_trainer_running_one_option_per_layer_gets_its_fastest_uniform_plan_under_each_cap(capsys):
    # Megatron (the default trainer) runs one recompute option on every layer: a per-stage frontier point could not
    # be emitted for it, so the frontier holds the uniform plans, each priced in full: under each cap, the fastest
    # of them that fits
    from dataclasses import replace

    from ndcp.cli import build_strategy
    from ndcp.solve.result import evaluate

    code = main(["recompute", *PROBLEM, *STRATEGY, "--caps", "20GiB,30GiB,70GiB", "--json", "-"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["plans"] == "uniform"
    model, cluster = load_model("llama3-8b"), ClusterSpec(device_preset("h100"), 64)
    space = SearchSpace(model, cluster, RunSpec(global_batch=256, seq_len=8192))
    strategy = build_strategy(model, cluster, space.run, {"tp": 2, "pp": 4, "mbs": 2, "zero": 1, "sp": True})
    options = space.inner_choices(2)[2]
    for row in doc["frontier"]:
        assert all(sum(1 for k in RECOMPUTE_MODES if s[k]) == 1 for s in row["stages"])  # one option per stage
        for cap in row["caps_bytes"]:
            capped = replace(space, run=replace(space.run, memory_cap_bytes=cap))
            fitting = [e.step_seconds for e in (evaluate(capped, replace(strategy, recompute=RecomputePlan.uniform(o)))
                                                for o in options) if e.fits]
            assert row["step_seconds"] == pytest.approx(min(fitting), rel=1e-12)
            assert row["proven"] and row["bound_seconds"] == pytest.approx(row["step_seconds"], rel=1e-12)


def test_tight_caps_monotone_and_no_slower_than_greedy():
    model = load_model("llama3-8b")
    cluster = ClusterSpec(device_preset("h100"), 64)
    run = RunSpec(global_batch=256, seq_len=8192, confidence=0.0)  # caps chosen at the point estimate
    space = SearchSpace(model, cluster, run, SpaceOptions(max_offset=2))
    from ndcp.cli import build_strategy

    strategy = build_strategy(model, cluster, run, {"tp": 2, "pp": 4, "mbs": 2, "zero": 1, "sp": True})
    caps = [15 * GIB, 16 * GIB, 18 * GIB, 22 * GIB, 28 * GIB]  # the least plan needs 14.25 GiB with its reserve
    result = frontier(space, strategy, caps=caps)
    assert not result.infeasible_caps
    best_at = {}
    for p in result.points:
        for c in p.caps:
            best_at[c] = p.step_seconds
    steps = [best_at[c] for c in caps]
    assert all(a >= b for a, b in zip(steps, steps[1:]))
    from dataclasses import replace

    for cap in caps:  # the exact plan is never slower than the greedy one under the same cap
        tight = replace(space, run=replace(run, memory_cap_bytes=cap))
        greedy = greedy_plan(tight, strategy)
        if greedy.fits:
            assert best_at[cap] <= greedy.step_seconds * (1 + 1e-9)


def test_cap_below_least_memory_exits_1(capsys):
    code = main(["recompute", *PROBLEM, *STRATEGY, "--caps", "8GiB,30GiB"])
    out, err = capsys.readouterr()
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ndcp: infeasible: cap 8.00 GiB is below the least memory")
    assert "Traceback" not in out + err


def test_csv_and_usage_errors(capsys):
    code = main(["recompute", *PROBLEM, *STRATEGY, "--caps", "20GiB,40GiB", "--csv", "-"])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = out.strip().splitlines()
    assert lines[0].startswith("cap_gib,") and len(lines) >= 2
    code = main(["recompute", *PROBLEM, *STRATEGY, "--caps", "900GiB"])
    out, err = capsys.readouterr()
    assert code == 2 and err.startswith("ndcp: error: --caps")


def test_the_time_limit_covers_the_whole_frontier():
    model = load_model("llama3-8b")
    cluster = ClusterSpec(device_preset("h100"), 64)
    run = RunSpec(global_batch=256, seq_len=8192)
    from ndcp.cli import build_strategy

    strategy = build_strategy(model, cluster, run, {"tp": 2, "pp": 4, "mbs": 2, "zero": 1, "sp": True})
    caps = [(15 + i) * GIB for i in range(40)]
    result = frontier(SearchSpace(model, cluster, run), strategy, caps=caps, time_limit=0.5)
    assert result.stopped == "time limit" and not result.complete and result.solve_seconds < 2.0
    solved = set(result.infeasible_caps) | {c for p in result.points for c in p.caps}
    assert result.unsolved_caps and sorted(solved | set(result.unsolved_caps)) == caps


@pytest.mark.parametrize("option", [["--points", "100000"], ["--caps", ",".join(["40GiB"] * 201)]])
def test_more_caps_than_a_frontier_solves_is_a_user_error(capsys, option):
    code = main(["recompute", *PROBLEM, *STRATEGY, *option])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "expected at most 200" in err, err
