"""`ndcp search`, run in-process: the JSON contract, CP-SAT against the exhaustive oracle, CSV, --fix/--max,
and exit codes (0 found, 1 infeasible with an explanation, 2 one-line user errors, 4 stopped before any
strategy was verified)."""
import csv
import subprocess
import sys
import json

import pytest

from ndcp.cli import main
from ndcp.cli.search import parse_degree_bounds
from ndcp.report.progress import SearchProgress
from ndcp.specs import SpecError

from .cli_helpers import assert_one_line_error, run as run_cli

TINY = ["tiny", "--device", "h100", "--gpus", "8", "--global-batch", "32", "--seq-len", "1024"]


def run(capsys, *args):
    return run_cli(capsys, "search", *args)


def run_json(capsys, *args, code=0):
    got, out, err = run(capsys, *args, "--json", "-")
    assert got == code, err
    return json.loads(out), err  # stdout holds exactly one JSON document




@pytest.fixture(scope="module")
def tiny_docs():
    """The CP-SAT and exhaustive documents for the tiny problem, uniform recompute (computed once)."""
    import io
    from contextlib import redirect_stdout

    docs = {}
    for name, extra in (("cpsat", ["--recompute", "uniform"]), ("exhaustive", ["--recompute", "uniform", "--exhaustive"])):
        buffer = io.StringIO()
        with redirect_stdout(buffer):
            assert main(["search", *TINY, *extra, "--json", "-"]) == 0
        docs[name] = json.loads(buffer.getvalue())
    return docs


def test_json_contract(tiny_docs):
    doc = tiny_docs["cpsat"]
    for key in ("status", "proven", "gap", "lower_bound_seconds", "solve_seconds", "space", "strategies",
                "model", "device", "gpus", "run"):
        assert key in doc, key
    assert doc["status"] == "optimal" and doc["proven"] is True and doc["gap"] == 0
    assert doc["space"]["size"] > 0 and isinstance(doc["space"]["refused"], dict)
    assert doc["model"]["name"] == "tiny" and doc["device"]["name"] == "h100" and doc["gpus"] == 8
    assert doc["run"]["global_batch"] == 32 and doc["run"]["seq_len"] == 1024
    strategies = doc["strategies"]
    assert 1 <= len(strategies) <= 10
    for i, s in enumerate(strategies, 1):
        assert s["rank"] == i
        for key in ("strategy", "memory", "time"):
            assert key in s
        assert s["memory"]["fits"] is True
        low, high = s["time"]["step_seconds_band"]  # its band (docs/confidence.md §1)
        assert low <= s["time"]["step_seconds"] <= high
        assert s["memory"]["peak_bytes_band_high"] >= s["memory"]["peak_bytes"]
        assert s["evidence"]["confidence"] == 0.9 and s["evidence"]["runs"] > 0
        assert s["strategy"]["dp"] * s["strategy"]["tp"] * s["strategy"]["pp"] * s["strategy"]["cp"] == 8
    steps = [s["time"]["step_seconds"] for s in strategies]
    assert steps == sorted(steps)
    assert doc["lower_bound_seconds"] <= steps[0] * (1 + 1e-9)


def test_strategy_objects_match_estimate(tiny_docs, capsys):
    """Each ranked strategy carries the same strategy/memory/time objects `estimate --json` writes."""
    best = tiny_docs["cpsat"]["strategies"][0]
    s = best["strategy"]
    spec = ",".join(f"{k}={v if not isinstance(v, bool) else ('on' if v else 'off')}"
                    for k, v in s.items() if k not in ("layers_per_stage", "layout"))  # layout: a report
    code = main(["estimate", *TINY, "--strategy", spec, "--json", "-"])
    out, err = capsys.readouterr()
    assert code == 0, err
    estimate = json.loads(out)
    assert estimate["strategy"] == s
    assert estimate["memory"] == best["memory"]
    assert estimate["time"] == best["time"]


def test_cpsat_equals_exhaustive(tiny_docs):
    a = tiny_docs["cpsat"]["strategies"][0]["time"]["step_seconds"]
    b = tiny_docs["exhaustive"]["strategies"][0]["time"]["step_seconds"]
    assert abs(a - b) <= 1e-9 * b
    assert tiny_docs["exhaustive"]["status"] == "optimal"
    assert tiny_docs["exhaustive"]["method"] == "exhaustive"
    assert tiny_docs["cpsat"]["space"]["size"] == tiny_docs["exhaustive"]["space"]["size"]


def test_csv_rows_in_rank_order(capsys, tmp_path):
    path = tmp_path / "ranking.csv"
    doc, _ = run_json(capsys, *TINY, "--top", "5", "--csv", str(path))
    rows = list(csv.DictReader(path.open()))
    assert [int(r["rank"]) for r in rows] == list(range(1, len(doc["strategies"]) + 1))
    steps = [float(r["step_seconds"]) for r in rows]
    assert steps == sorted(steps)
    for row, s in zip(rows, doc["strategies"]):
        assert float(row["step_seconds"]) == s["time"]["step_seconds"]
        assert int(row["peak_bytes"]) == s["memory"]["peak_bytes"]
        assert int(row["tp"]) == s["strategy"]["tp"] and int(row["mbn"]) == s["strategy"]["mbn"]
        assert row["recompute"] == s["strategy"]["recompute"]
        for part, seconds in s["time"]["parts"].items():
            assert float(row[f"{part}_seconds"]) == seconds
    for column in ("degrees",):
        assert column not in rows[0]
    for column in ("dp", "ep", "vpp", "mbs", "zero", "sp", "schedule", "capacity_bytes", "fits", "mfu", "hfu",
                   "tokens_per_second_per_gpu"):
        assert column in rows[0]


def test_fix_pins_and_max_bounds(capsys):
    doc, _ = run_json(capsys, *TINY, "--fix", "tp=2", "--top", "20")
    assert doc["strategies"] and all(s["strategy"]["tp"] == 2 for s in doc["strategies"])
    assert doc["space"]["refused"].get("fixed", 0) > 0
    doc, _ = run_json(capsys, *TINY, "--max", "dp=2", "--top", "20")
    assert doc["strategies"] and all(s["strategy"]["dp"] <= 2 for s in doc["strategies"])


def test_inner_choices(capsys):
    doc, _ = run_json(capsys, *TINY, "--recompute", "full", "--zero", "3", "--sp", "on", "--fix", "tp=2",
                      "--top", "20")
    assert doc["strategies"]
    for s in doc["strategies"]:
        assert s["strategy"]["recompute"] == "full"
        assert s["strategy"]["zero"] == 3
        assert s["strategy"]["sp"] is True and s["strategy"]["tp"] > 1


def test_sp_on_alone(capsys):
    doc, _ = run_json(capsys, *TINY, "--sp", "on", "--top", "20")
    assert doc["strategies"] and all(s["strategy"]["sp"] and s["strategy"]["tp"] > 1 for s in doc["strategies"])


@pytest.mark.parametrize("args, words", [
    (["--fix", "foo=2"], ["--fix", "foo", "valid keys", "tp"]),
    (["--max", "tp"], ["--max", "valid keys"]),
    (["--fix", "tp=two"], ["--fix", "tp"]),
    (["--fix", "zero=5"], ["zero=5", "0, 1, 2, 3"]),
    (["--fix", "sp=maybe"], ["sp"]),
    (["--zero", "4"], ["--zero"]),
    (["--recompute", "sometimes"], ["--recompute"]),
    (["--time-limit", "0"], ["--time-limit"]),
    (["--fix", "zero=3", "--zero", "0,1"], ["zero=3"]),
])
def test_user_errors_exit_2_one_line(capsys, args, words):
    assert_one_line_error(*run(capsys, *TINY, *args), *words)


def test_parse_degree_bounds():
    assert parse_degree_bounds("--fix", "tp=8, pp=16,sp=on") == (("tp", 8), ("pp", 16), ("sp", 1))
    assert parse_degree_bounds("--fix", "") == ()
    with pytest.raises(SpecError, match="given twice"):
        parse_degree_bounds("--fix", "tp=2,tp=4")


def test_empty_space_exits_1_with_explanation(capsys):
    problem = ["tiny", "--device", "h100", "--gpus", "8", "--global-batch", "3", "--seq-len", "1024"]
    doc, err = run_json(capsys, *problem, "--max", "cp=1,tp=1", code=1)
    assert doc["status"] == "infeasible" and doc["strategies"] == [] and doc["space"]["size"] == 0
    assert "global batch 3" in doc["explanation"]
    assert "infeasible" in err and "Traceback" not in err
    code, out, err = run(capsys, *problem, "--max", "cp=1,tp=1")
    assert code == 1
    assert "infeasible" in out and "validity rules" in " ".join(out.split())


# the per-layer oracle over none/selective/full (every option would price millions of plans of TINY)
@pytest.mark.parametrize("method", [[], ["--exhaustive", "--recompute", "classic"]], ids=["cpsat", "exhaustive"])
def test_impossible_memory_cap_exits_1_naming_the_least_memory(capsys, method):
    doc, err = run_json(capsys, *TINY, "--memory-cap", "1030MiB", *method, code=1)
    assert doc["status"] == "infeasible" and doc["strategies"] == []
    assert "Nothing fits" in doc["explanation"]
    assert "least memory" in doc["explanation"] or "at least" in doc["explanation"], doc["explanation"]


def test_quiet_prints_one_line(capsys):
    code, out, err = run(capsys, *TINY, "--quiet")
    assert code == 0
    lines = out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("optimal: ")
    assert err == ""


def test_report_on_stdout_and_json_file(capsys, tmp_path):
    path = tmp_path / "search.json"
    code, out, err = run(capsys, *TINY, "--json", str(path), "--top", "3")
    assert code == 0, err
    for title in ("Assumptions", "Result", "Top 3 strategies", "Best strategy"):
        assert title in out
    doc = json.loads(path.read_text())
    assert doc["status"] == "optimal" and len(doc["strategies"]) == 3


def test_progress_lines_when_not_a_tty(capsys, monkeypatch):
    """Off a terminal, progress goes to stderr as plain lines, at most one per interval."""
    monkeypatch.setattr(SearchProgress, "INTERVAL", 0.0)
    two_gpus = ["tiny", "--device", "h100", "--gpus", "2", "--global-batch", "32", "--seq-len", "1024"]  # TINY on 2
    for recompute in ("uniform", "classic"):  # classic: the per-layer oracle over none/selective/full (8 GPUs: 2.5 s)
        code, out, err = run(capsys, *two_gpus, "--exhaustive", "--recompute", recompute, "--trainer", "any")
        assert code == 0
        lines = [line for line in err.splitlines() if line]
        progress, rest = lines[:-1], lines[-1]  # under --trainer any: megatron's best plan last
        assert progress and all(line.startswith("ndcp: exhaustive ") for line in progress)
        assert "incumbent" in lines[0] and "priced" in lines[0] and rest.startswith("ndcp: best megatron plan: ")


def test_per_layer_exhaustive_refuses_an_enumeration_too_large_to_finish(capsys):
    code, out, err = run(capsys, "llama3-70b", "--device", "h100", "--gpus", "64", "--global-batch", "128",
                         "--seq-len", "8192", "--exhaustive", "--trainer", "any")
    assert code == 2
    assert "per-layer" in err and "--recompute uniform" in err and "Traceback" not in err


def test_cp_comm_types_are_searched_on_request(capsys):
    """The default searches the p2p ring only; --cp-comm all lets the search pick another type, and its answer is
    never slower (a superset of candidates, same estimators)."""
    long = ["llama3-8b", "--device", "h100", "--gpus", "64", "--global-batch", "16", "--seq-len", "131072",
            "--fix", "tp=1,cp=8", "--top", "3"]
    ring, _ = run_json(capsys, *long)
    every, _ = run_json(capsys, *long, "--cp-comm", "all")
    allgather, _ = run_json(capsys, *long, "--cp-comm", "allgather")
    assert {s["strategy"]["cp_comm"] for s in ring["strategies"]} == {"p2p"}
    assert {s["strategy"]["cp_comm"] for s in allgather["strategies"]} == {"allgather"}
    best = [doc["strategies"][0]["time"]["step_seconds"] for doc in (ring, every, allgather)]
    assert best[1] <= min(best[0], best[2]) * (1 + 1e-9)
    assert_one_line_error(*run(capsys, *long, "--cp-comm", "ring"), "--cp-comm")


def test_an_explicit_trainer_gets_only_plans_it_can_express(capsys):
    """--trainer torchtitan runs one recompute option on every layer and no DualPipe: the search returns such plans
    (and says so); without --trainer the plan is per stage and --emit converts it."""
    args = ["llama3-8b", "--device", "h100", "--gpus", "8", "--global-batch", "16", "--seq-len", "8192",
            "--memory-cap", "30GiB", "--top", "3"]
    doc, err = run_json(capsys, *args, "--trainer", "torchtitan")
    assert "runs one recompute option on every layer" in err
    assert all(isinstance(s["strategy"]["recompute"], str) for s in doc["strategies"])
    assert_one_line_error(*run(capsys, *args, "--trainer", "torchtitan", "--schedules", "dualpipe"), "runs none")


def test_a_search_stopped_before_any_verified_strategy_is_unknown_with_its_own_exit_code():
    # status unknown (exit 4): neither a strategy found (0) nor proven infeasible (1)
    done = subprocess.run([sys.executable, "-m", "ndcp", "search", "llama3-70b", "--device", "h100", "--gpus", "512",
                           "--global-batch", "1024", "--seq-len", "8192", "--time-limit", "0.001", "--json", "-"],
                          capture_output=True, text=True)
    answer = json.loads(done.stdout)
    assert (done.returncode, answer["status"], answer["strategies"]) == (4, "unknown", [])
    assert "nothing verified" in done.stderr


def test_deepseek_v3_ep64_all_to_all_runs_on_nvlink_in_a_gb200_rack_and_over_the_nics_of_h100_nodes(capsys):
    """Issue 37 (docs/formulas.md §7.4): on 2,048 GB200 NVL72 GPUs the job fills each 72-GPU rack with 64 ranks, so
    an EP group of 64 stays on NVLink; on H100 the same group spans 8 nodes and its all-to-all crosses InfiniBand."""
    problem = ["deepseek-v3", "--gpus", "2048", "--global-batch", "8192", "--seq-len", "4096", "--fix", "ep=64",
               "--top", "1"]
    rack, _ = run_json(capsys, *problem, "--device", "gb200-nvl72")
    nodes, _ = run_json(capsys, *problem, "--device", "h100")

    def ep_share(doc):
        time = doc["strategies"][0]["time"]
        return time["parts"]["ep_comm"] / time["step_seconds"]

    assert rack["domain_ranks"] == 64 and rack["device"]["devices_per_domain"] == 72
    assert nodes["domain_ranks"] == 8 and nodes["device"]["devices_per_domain"] == 8
    assert rack["strategies"][0]["strategy"]["ep"] == 64
    assert ep_share(rack) < 0.25 and ep_share(nodes) > 0.4


def test_hsdp_is_searched_only_on_request_and_recorded_in_the_json(capsys):
    """--hsdp off (default: unvalidated) searches plain ZeRO only; on, HSDP plans only, each sharded over one node's
    data-parallel ranks; both, the two jointly: never slower than either. The document records what was searched."""
    args = ["tiny", "--device", "h100", "--gpus", "16", "--global-batch", "64", "--seq-len", "1024",
            "--recompute", "uniform", "--top", "20"]
    docs = {hsdp: run_json(capsys, *args, *(["--hsdp", hsdp] if hsdp else []))[0] for hsdp in ("", "on", "both")}
    assert [docs[h]["search"]["hsdp"] for h in ("", "on", "both")] == [[False], [True], [False, True]]
    assert not any(s["strategy"].get("dp_shard") for s in docs[""]["strategies"])
    on = [s["strategy"] for s in docs["on"]["strategies"]]
    assert on and all(s["zero"] == 3 and s["dp_shard"] == 8 // (s["tp"] * s["cp"]) < s["dp"] for s in on)
    best = {h: doc["strategies"][0]["time"]["step_seconds"] for h, doc in docs.items()}
    assert best["both"] <= min(best[""], best["on"]) * (1 + 1e-9)
    assert docs["both"]["space"]["size"] > docs[""]["space"]["size"]


def test_hsdp_on_under_a_trainer_that_does_not_run_it_is_a_one_line_error(capsys):
    args = ["tiny", "--device", "h100", "--gpus", "16", "--global-batch", "64", "--seq-len", "1024", "--hsdp", "on"]
    assert_one_line_error(*run(capsys, *args, "--trainer", "mindformers"), "--hsdp on", "mindformers does not run it")
    assert_one_line_error(*run(capsys, *args[:-1], "sometimes"), "--hsdp")
