"""`ndcp sweep`: the JSON contract, cost = price x GPU-hours, the JSONL log and --resume, and its user errors."""
import json
import os
import zlib

import pytest

from ndcp.sweep import solve as solve_module
from ndcp.sweep.journal import decode_line, encode_line
from tests.cli_helpers import assert_one_line_error, run

SWEEP = ["sweep", "tiny", "--device", "h100", "--gpus", "2..8", "--global-batch", "16,32", "--seq-len", "512",
         "--tokens", "1B", "--recompute", "uniform", "--workers", "1"]


def test_json_points_carry_the_contract_keys_and_cost_is_price_times_gpu_hours(capsys):
    code, out, err = run(capsys, *SWEEP, "--price-per-gpu-hour", "2.5", "--json", "-")
    assert code == 0 and err == ""
    points = json.loads(out)["points"]
    assert [(p["gpus"], p["global_batch"]) for p in points] == [(2, 16), (2, 32), (4, 16), (4, 32), (8, 16), (8, 32)]
    for p in points:
        assert p["status"] == "optimal" and p["device"] == "h100" and p["seq_len"] == 512
        assert p["tokens_per_second"] == pytest.approx(p["global_batch"] * 512 / p["step_seconds"])
        assert p["gpu_hours"] == pytest.approx(p["gpus"] * p["time_to_train_seconds"] / 3600)
        assert p["cost"] == pytest.approx(2.5 * p["gpu_hours"])
        assert 0 < p["mfu"] < 1 and "tp=" in p["strategy"]
        assert 0 < p["goodput"] <= 1 and p["checkpoint_interval_seconds"] > 0  # issue 38's contract
        assert p["time_to_train_seconds"] == pytest.approx(p["ideal_time_to_train_seconds"] / p["goodput"])


def test_failure_flags_reach_every_point_and_the_document(capsys):
    _, base, _ = run(capsys, *SWEEP, "--gpus", "8", "--global-batch", "32", "--json", "-")
    _, frail, _ = run(capsys, *SWEEP, "--gpus", "8", "--global-batch", "32", "--json", "-", "--mtbf", "0.5",
                      "--checkpoint-bandwidth", "0.001,0.002", "--async-checkpoint", "--restart-time", "60")
    base, frail = json.loads(base), json.loads(frail)
    assert frail["failures"] == {"gpu_mtbf_hours": 0.5, "restart_seconds": 60.0, "asynchronous_checkpoint": True,
                                 "checkpoint_node_bandwidth": 1e6, "checkpoint_aggregate_bandwidth": 2e6}
    old, new = base["points"][0], frail["points"][0]
    assert new["ideal_time_to_train_seconds"] == old["ideal_time_to_train_seconds"]
    assert new["goodput"] < old["goodput"] and new["checkpoint_mode"] == "async"


def test_table_csv_and_quiet(tmp_path, capsys):
    code, out, _ = run(capsys, *SWEEP, "--csv", tmp_path / "s.csv")
    assert code == 0 and "GPU-h" in out and "goodput" in out and "ideal" in out
    assert "h100 x 8, GBS 32, seq 512 (optimal): tp" in out  # numbered at 80 columns: the status under the table
    assert (tmp_path / "s.csv").read_text().splitlines()[0].startswith("device,gpus,global_batch,seq_len,status")
    assert run(capsys, *SWEEP, "--quiet")[1] == ""


def test_resume_searches_only_the_points_not_in_the_log(tmp_path, capsys, monkeypatch):
    log = tmp_path / "sweep.jsonl"
    code, first, _ = run(capsys, *SWEEP, "--gpus", "2,4", "--jsonl", log, "--json", "-")
    assert code == 0 and len(log.read_text().splitlines()) == 4
    solved = []
    original = solve_module.solve_job
    monkeypatch.setattr("ndcp.sweep.executors.solve_job", lambda job: solved.append(job.point) or original(job))
    code, second, _ = run(capsys, *SWEEP, "--jsonl", log, "--resume", "--json", "-")
    assert code == 0 and [p.gpus for p in solved] == [8, 8]  # only the new points
    assert len(log.read_text().splitlines()) == 6
    def answers(doc):
        return [{k: v for k, v in p.items() if k != "solve_seconds"} for p in json.loads(doc)["points"]]
    assert answers(second)[:4] == answers(first)


def test_resume_with_other_failure_settings_derives_again_without_searching(tmp_path, capsys, monkeypatch):
    log = tmp_path / "sweep.jsonl"
    _, first, _ = run(capsys, *SWEEP, "--gpus", "2", "--global-batch", "16", "--jsonl", log, "--json", "-")
    monkeypatch.setattr("ndcp.sweep.executors.solve_job", lambda job: pytest.fail("searched again"))
    _, second, _ = run(capsys, *SWEEP, "--gpus", "2", "--global-batch", "16", "--jsonl", log, "--resume",
                       "--mtbf", "1", "--json", "-")
    assert json.loads(second)["points"][0]["goodput"] < json.loads(first)["points"][0]["goodput"]


def test_resume_searches_again_an_answer_without_checkpoint_facts(tmp_path, capsys, monkeypatch):
    log = tmp_path / "sweep.jsonl"
    run(capsys, *SWEEP, "--gpus", "2", "--global-batch", "16", "--jsonl", log, "--quiet")
    answer = decode_line(log.read_bytes().rstrip(b"\n"))
    log.write_bytes(encode_line({k: v for k, v in answer.items() if k != "checkpoint"}))  # an ndcp before issue 38
    solved = []
    original = solve_module.solve_job
    monkeypatch.setattr("ndcp.sweep.executors.solve_job", lambda job: solved.append(job.point) or original(job))
    code, out, _ = run(capsys, *SWEEP, "--gpus", "2", "--global-batch", "16", "--jsonl", log, "--resume",
                       "--json", "-")
    assert code == 0 and len(solved) == 1 and json.loads(out)["points"][0]["goodput"] is not None


@pytest.mark.parametrize("extra, words", [
    (["--resume"], ("--resume", "--jsonl")),
    (["--gpus", "8..2"], ("--gpus", "START <= END")),
    (["--device", "h100,tpu9"], ("tpu9", "not known")),
    (["--seq-len", "8q"], ("--seq-len", "8q")),
    (["--tokens", "lots"], ("--tokens", "lots")),
    (["--ray-address", "auto"], ("--ray-address", "--executor ray")),
    (["--price-per-gpu-hour", "-1"], ("price",)),
    (["--plot", "x.pdf"], (".png or .svg",)),
    (["--jsonl", "/nonexistent/dir/sweep.jsonl"], ("--jsonl", "cannot write")),
    (["--device", "h100,,b200"], ("--device", "h100,b200,my-h100.yaml")),
    (["--mtbf", "0"], ("--mtbf", "positive number of hours")),
    (["--checkpoint-bandwidth", "40,2000,9"], ("--checkpoint-bandwidth", "NODE[,TOTAL]")),
    (["--checkpoint-bandwidth", "fast"], ("--checkpoint-bandwidth", "GB/s")),
    (["--restart-time", "-5"], ("--restart-time", "seconds")),
])
def test_user_errors_are_one_line(capsys, extra, words):
    assert_one_line_error(*run(capsys, *SWEEP, *extra), *words)


def test_ray_missing_is_one_line(capsys, monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    assert_one_line_error(*run(capsys, *SWEEP, "--executor", "ray"), "pip install 'ndcp[ray]'")


def test_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    code, _, err = run(capsys, *SWEEP, "--quiet", "--plot", tmp_path / "sweep.svg")
    assert code == 0 and "wrote the plot" in err
    assert "time to train (days)" in (tmp_path / "sweep.svg").read_text()


def test_a_device_file_is_a_point_named_by_its_device(tmp_path, capsys):
    path = tmp_path / "slow.yaml"
    path.write_text("base: h100\ncompute_efficiency: 0.5\n")
    code, out, _ = run(capsys, *SWEEP, "--gpus", "8", "--global-batch", "16", "--device", f"h100,{path}", "--json", "-")
    fast, slow = json.loads(out)["points"]
    assert code == 0 and (fast["device"], slow["device"]) == ("h100", "slow")
    assert slow["step_seconds"] > fast["step_seconds"]


def test_a_torn_journal_resumes_whole_at_the_second_try(tmp_path, capsys, monkeypatch):
    # the probe: `SW --jsonl F; truncate -s -30 F; SW --jsonl F --resume` twice said "23 of 24" both times
    log = tmp_path / "sweep.jsonl"
    assert run(capsys, *SWEEP, "--jsonl", log, "--quiet")[0] == 0
    os.truncate(log, log.stat().st_size - 30)
    code, _, err = run(capsys, *SWEEP, "--jsonl", log, "--resume")
    assert code == 0 and "resuming: 5 of 6 points" in err and "line 6 cut short" in err
    code, _, err = run(capsys, *SWEEP, "--jsonl", log, "--resume")
    assert code == 0 and "resuming: 6 of 6 points" in err and "cut short" not in err


@pytest.mark.parametrize("value", ['"abc"', "-5"])  # the probe: exit 3, and a negative time to train
def test_a_journaled_answer_with_a_bad_field_is_searched_again(tmp_path, capsys, value):
    log = tmp_path / "sweep.jsonl"
    code, first, _ = run(capsys, *SWEEP, "--jsonl", log, "--json", "-")
    lines = log.read_text().splitlines(keepends=True)
    record = json.loads(lines[0])
    record["answer"]["step_seconds"] = json.loads(value)
    text = json.dumps(record["answer"], sort_keys=True, separators=(",", ":"))
    record["crc32"] = f"{zlib.crc32(text.encode()):08x}"  # a checksum that matches: the fields are checked too
    log.write_text(json.dumps(record) + "\n" + "".join(lines[1:]))
    code, second, err = run(capsys, *SWEEP, "--jsonl", log, "--resume", "--json", "-")
    assert code == 0 and "line 1 cut short, corrupt or not a valid answer" in err
    def answers(doc):
        return [{k: v for k, v in p.items() if k != "solve_seconds"} for p in json.loads(doc)["points"]]
    assert answers(second) == answers(first)
    assert all(p["time_to_train_seconds"] > 0 for p in json.loads(second)["points"])


def test_a_journal_another_sweep_holds_is_refused_in_one_line(tmp_path, capsys):
    from ndcp.sweep.journal import Journal
    with Journal.open(tmp_path / "sweep.jsonl"):
        assert_one_line_error(*run(capsys, *SWEEP, "--jsonl", tmp_path / "sweep.jsonl"), "--jsonl",
                              "another ndcp sweep is using this journal")


def test_failed_points_are_listed_and_the_sweep_exits_0(tmp_path, capsys, monkeypatch):
    from ndcp.sweep.solve import failed_answer
    monkeypatch.setattr("ndcp.cli.sweep.run_jobs", lambda jobs, *rest: (
        (i, failed_answer(job, "its worker process died") if job.point.gpus == 4 else solve_module.solve_job(job))
        for i, job in enumerate(jobs)))
    log = tmp_path / "sweep.jsonl"
    code, out, err = run(capsys, *SWEEP, "--jsonl", log, "--json", "-")
    assert code == 0 and "2 points failed" in err and "h100 x 4, GBS 16, seq 512; h100 x 4, GBS 32" in err
    statuses = [p["status"] for p in json.loads(out)["points"]]
    assert statuses == ["optimal", "optimal", "failed", "failed", "optimal", "optimal"]
    monkeypatch.undo()
    code, out, err = run(capsys, *SWEEP, "--jsonl", log, "--resume", "--json", tmp_path / "resumed.json")
    assert code == 0 and "resuming: 4 of 6" in err  # a failed point is searched again
    assert {p["status"] for p in json.loads((tmp_path / "resumed.json").read_text())["points"]} == {"optimal"}
