"""Sweep results: derived time to train / GPU-hours / cost, the knee, the JSON document, the CSV."""
import csv
import io
import json
import math

import pytest

from ndcp.specs.library import load_model
from ndcp.estimate.goodput import FailureSettings
from ndcp.sweep.results import knee, knees, sweep_csv, sweep_document
from ndcp.sweep.solve import DERIVED_KEYS, derive

ANSWER = {"device": "h100", "gpus": 512, "global_batch": 1024, "seq_len": 8192, "key": "k512", "status": "optimal",
          "strategy": "tp=8 pp=1", "label": "tp8 pp1", "step_seconds": 14.0, "mfu": 0.53,
          "tokens_per_second": 1024 * 8192 / 14.0, "explanation": None, "solve_seconds": 1.0,
          "checkpoint": {"written_per_rank": 2e9, "total": 1e12, "staged_per_rank": 20e9, "devices_per_node": 8,
                         "host_bandwidth": 50e9, "staging_capacity": 200e9}}


def test_time_to_train_counts_whole_steps_and_cost_is_price_times_gpu_hours():
    row = derive(ANSWER, tokens=10**12, price_per_gpu_hour=2.5)
    assert row["steps"] == math.ceil(10**12 / (1024 * 8192)) == 119210
    assert row["ideal_time_to_train_seconds"] == pytest.approx(119210 * 14.0)
    assert row["ideal_gpu_hours"] == pytest.approx(512 * 119210 * 14.0 / 3600)
    assert row["ideal_cost"] == pytest.approx(2.5 * row["ideal_gpu_hours"])
    # expected, with failures: the ideal divided by the goodput, in GPU-hours and cost alike
    assert 0.9 < row["goodput"] < 1
    assert row["time_to_train_seconds"] == pytest.approx(row["ideal_time_to_train_seconds"] / row["goodput"])
    assert row["gpu_hours"] == pytest.approx(512 * row["time_to_train_seconds"] / 3600)
    assert row["cost"] == pytest.approx(2.5 * row["gpu_hours"])
    assert row["checkpoint_interval_seconds"] == 14.0 * row["checkpoint_interval_steps"]
    assert row["checkpoint_mode"] == "sync" and row["blast_radius_gpus"] == 512
    assert derive(ANSWER, 10**12, None)["cost"] is None
    nothing = derive({**ANSWER, "status": "infeasible", "step_seconds": None, "checkpoint": None}, 10**12, 2.5)
    assert all(nothing[key] is None for key in DERIVED_KEYS)


def test_an_answer_without_checkpoint_facts_gets_the_ideal_figures_only():
    old = derive({k: v for k, v in ANSWER.items() if k != "checkpoint"}, 10**12, 2.5)
    assert old["ideal_cost"] == derive(ANSWER, 10**12, 2.5)["ideal_cost"]
    assert old["goodput"] is None and old["time_to_train_seconds"] is None and old["cost"] is None


def test_failure_settings_move_the_expected_figures_not_the_ideal_ones():
    base = derive(ANSWER, 10**12, 2.5)
    frail = derive(ANSWER, 10**12, 2.5, FailureSettings(gpu_mtbf_hours=5_000.0))
    assert frail["ideal_cost"] == base["ideal_cost"] and frail["cost"] > base["cost"]
    assert frail["checkpoint_interval_seconds"] < base["checkpoint_interval_seconds"]  # more failures: save more often
    quick = derive(ANSWER, 10**12, 2.5, FailureSettings(asynchronous=True))
    assert quick["checkpoint_mode"] == "async" and quick["goodput"] > base["goodput"]
    no_room = derive({**ANSWER, "checkpoint": {**ANSWER["checkpoint"], "staging_capacity": 1e9}}, 10**12, 2.5,
                     FailureSettings(asynchronous=True))
    assert no_room["checkpoint_mode"] == "sync" and no_room["goodput"] == base["goodput"]  # host memory too small


def test_knee_is_where_time_to_train_bends_from_steep_to_flat():
    # perfect scaling to 512, then almost nothing gained
    assert knee([128, 256, 512, 1024, 2048], [80.0, 40.0, 20.0, 19.0, 18.5]) == 512
    assert knee([128, 256, 384], [30.0, 20.0, 10.0]) is None  # a straight line has no knee
    assert knee([128, 256], [30.0, 10.0]) is None
    rows = [derive({**ANSWER, "gpus": g, "step_seconds": s}, 10**9, None)
            for g, s in ((128, 80.0), (256, 40.0), (512, 20.0), (1024, 19.0))]
    assert knees(rows) == [{"device": "h100", "global_batch": 1024, "seq_len": 8192, "gpus": 512}]


def test_document_and_csv_carry_the_contract_keys():
    rows = [derive(ANSWER, 10**12, 2.0)]
    doc = json.loads(json.dumps(sweep_document(rows, load_model("llama3-70b"), 10**12, 2.0)))
    assert doc["model"] == "llama3-70b" and doc["model_assumptions"] == []
    point = doc["points"][0]
    for key in ("device", "gpus", "global_batch", "seq_len", "status", "strategy", "step_seconds", "mfu",
                "tokens_per_second", "time_to_train_seconds", "gpu_hours", "cost", "ideal_time_to_train_seconds",
                "goodput", "checkpoint_interval_seconds"):  # the last three and the expected cost: issue 38
        assert key in point
    assert point["cost"] == rows[0]["cost"] and point["goodput"] == rows[0]["goodput"]
    assert doc["failures"]["gpu_mtbf_hours"] == pytest.approx(54 * 24 * 16384 / 419)  # the Llama 3 report's rate
    table = list(csv.DictReader(io.StringIO(sweep_csv(rows))))
    assert table[0]["gpus"] == "512" and float(table[0]["cost"]) == rows[0]["cost"]
    assert float(table[0]["ideal_time_to_train_seconds"]) == rows[0]["ideal_time_to_train_seconds"]


def test_the_step_band_is_carried_into_the_expected_time_to_train_gpu_hours_and_cost():
    row = derive({**ANSWER, "step_seconds_band": [12.0, 17.5]}, tokens=10**12, price_per_gpu_hour=2.5)
    at = [derive({**ANSWER, "step_seconds": s}, 10**12, 2.5) for s in (12.0, 17.5)]  # the figures at each edge
    for band, key in (("time_to_train_seconds_band", "time_to_train_seconds"), ("gpu_hours_band", "gpu_hours"),
                      ("cost_band", "cost")):
        assert row[band] == pytest.approx([edge[key] for edge in at])
    low, high = row["time_to_train_seconds_band"]
    assert 119210 * 12.0 < low < row["time_to_train_seconds"] < high  # expected: above the ideal at the low edge
    assert derive({**ANSWER, "step_seconds_band": [12.0, 17.5]}, 10**12, None)["cost_band"] is None
    # an answer logged before bands existed: its step time as both edges
    assert derive(ANSWER, 10**12, None)["time_to_train_seconds_band"] == pytest.approx(
        [derive(ANSWER, 10**12, None)["time_to_train_seconds"]] * 2)
    cells = next(csv.DictReader(io.StringIO(sweep_csv([row]))))
    assert cells["time_to_train_seconds_band"] == f"{low!r} {high!r}"
