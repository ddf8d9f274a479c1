"""Sweep results: derived time to train / GPU-hours / cost, the knee, the JSONL log, the CSV."""
import csv
import io
import json
import math

import pytest

from ndcp.specs import SpecError
from ndcp.specs.library import load_model
from ndcp.sweep.results import append_answers, knee, knees, read_answers, sweep_csv, sweep_document
from ndcp.sweep.solve import derive

ANSWER = {"device": "h100", "gpus": 512, "global_batch": 1024, "seq_len": 8192, "key": "k512", "status": "optimal",
          "strategy": "tp=8 pp=1", "label": "tp8 pp1", "step_seconds": 14.0, "mfu": 0.53,
          "tokens_per_second": 1024 * 8192 / 14.0, "explanation": None, "solve_seconds": 1.0}


def test_time_to_train_counts_whole_steps_and_cost_is_price_times_gpu_hours():
    row = derive(ANSWER, tokens=10**12, price_per_gpu_hour=2.5)
    assert row["steps"] == math.ceil(10**12 / (1024 * 8192)) == 119210
    assert row["time_to_train_seconds"] == pytest.approx(119210 * 14.0)
    assert row["gpu_hours"] == pytest.approx(512 * 119210 * 14.0 / 3600)
    assert row["cost"] == pytest.approx(2.5 * row["gpu_hours"])
    assert derive(ANSWER, 10**12, None)["cost"] is None
    nothing = derive({**ANSWER, "status": "infeasible", "step_seconds": None}, 10**12, 2.5)
    assert nothing["time_to_train_seconds"] is None and nothing["gpu_hours"] is None and nothing["cost"] is None


def test_knee_is_where_time_to_train_bends_from_steep_to_flat():
    # perfect scaling to 512, then almost nothing gained
    assert knee([128, 256, 512, 1024, 2048], [80.0, 40.0, 20.0, 19.0, 18.5]) == 512
    assert knee([128, 256, 384], [30.0, 20.0, 10.0]) is None  # a straight line has no knee
    assert knee([128, 256], [30.0, 10.0]) is None
    rows = [derive({**ANSWER, "gpus": g, "step_seconds": s}, 10**9, None)
            for g, s in ((128, 80.0), (256, 40.0), (512, 20.0), (1024, 19.0))]
    assert knees(rows) == [{"device": "h100", "global_batch": 1024, "seq_len": 8192, "gpus": 512}]


def test_jsonl_log_round_trips_and_skips_a_line_cut_short(tmp_path, capsys):
    path = tmp_path / "sweep.jsonl"
    assert read_answers(path) == {}
    append_answers(path, [ANSWER])
    append_answers(path, [{**ANSWER, "gpus": 1024, "key": "k1024"}])
    with open(path, "a") as stream:
        stream.write('{"device": "h1')  # an interrupted write
    answers = read_answers(path)
    assert sorted(answers) == ["k1024", "k512"] and answers["k512"] == ANSWER
    assert "line 3 is not JSON" in capsys.readouterr().err
    path.write_text('{"something": 1}\n')
    with pytest.raises(SpecError, match="line 1: not a sweep answer"):
        read_answers(path)


def test_document_and_csv_carry_the_contract_keys():
    rows = [derive(ANSWER, 10**12, 2.0)]
    doc = json.loads(json.dumps(sweep_document(rows, load_model("llama3-70b"), 10**12, 2.0)))
    assert doc["model"] == "llama3-70b" and doc["model_assumptions"] == []
    point = doc["points"][0]
    for key in ("device", "gpus", "global_batch", "seq_len", "status", "strategy", "step_seconds", "mfu",
                "tokens_per_second", "time_to_train_seconds", "gpu_hours", "cost"):
        assert key in point
    assert point["cost"] == rows[0]["cost"]
    table = list(csv.DictReader(io.StringIO(sweep_csv(rows))))
    assert table[0]["gpus"] == "512" and float(table[0]["cost"]) == rows[0]["cost"]


def test_the_step_band_is_carried_into_time_to_train_gpu_hours_and_cost():
    row = derive({**ANSWER, "step_seconds_band": [12.0, 17.5]}, tokens=10**12, price_per_gpu_hour=2.5)
    assert row["time_to_train_seconds_band"] == pytest.approx([119210 * 12.0, 119210 * 17.5])
    assert row["gpu_hours_band"] == pytest.approx([512 * 119210 * s / 3600 for s in (12.0, 17.5)])
    assert row["cost_band"] == pytest.approx([2.5 * h for h in row["gpu_hours_band"]])
    low, high = row["time_to_train_seconds_band"]
    assert low < row["time_to_train_seconds"] < high
    assert derive({**ANSWER, "step_seconds_band": [12.0, 17.5]}, 10**12, None)["cost_band"] is None
    # an answer logged before bands existed: its step time as both edges
    assert derive(ANSWER, 10**12, None)["time_to_train_seconds_band"] == pytest.approx([119210 * 14.0] * 2)
    cells = next(csv.DictReader(io.StringIO(sweep_csv([row]))))
    assert cells["time_to_train_seconds_band"] == f"{low!r} {high!r}"
