"""scripts/host_time_whatif.py and the table it reads (docs/host_time.yaml, written by scripts/measure_host_time.py;
docs/formulas.md §3.2, "host issue time, measured"): the table's fits are the least squares of its own rows, and a
segment between two of the dispatcher's waits takes the longer of its host and GPU times."""
from __future__ import annotations

import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import host_time_whatif as whatif  # noqa: E402

TABLE = yaml.safe_load((ROOT / "docs" / "host_time.yaml").read_text(encoding="utf-8"))
SEGMENTS = ("forward_before_sync", "forward_after_sync", "backward")


def _least_squares(xs: list[float], ys: list[float]) -> tuple[float, float]:
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((a - mx) * (b - my) for a, b in zip(xs, ys)) / sum((a - mx) ** 2 for a in xs)
    return my - slope * mx, slope


@pytest.mark.parametrize("rows, fit, stat, experts", [
    ("rows", "moe_fit", "median_us", "experts"), ("rows", "moe_fit_min", "min_us", "experts"),
    ("ep_rows", "moe_ep_fit", "median_us", "local_experts"), ("ep_rows", "moe_ep_fit_min", "min_us", "local_experts")])
def test_the_fits_are_the_least_squares_of_the_rows(rows, fit, stat, experts):
    moe = [row for row in TABLE[rows] if row["layer"] == "moe"]
    assert len(moe) >= 3
    counts = [float(row[experts]) for row in moe]
    for segment in SEGMENTS:
        fixed, per = _least_squares(counts, [row[segment][stat] for row in moe])
        assert TABLE[fit][segment]["fixed_us"] == pytest.approx(fixed, abs=0.06)
        assert TABLE[fit][segment]["per_expert_us"] == pytest.approx(per, abs=0.006)


def test_ep_rows_split_the_same_experts_over_their_ranks():
    for row in TABLE["ep_rows"]:
        assert row["local_experts"] * row["ep"] == row["experts"]


def test_every_row_counts_fewer_kernels_than_operations():
    for row in TABLE["rows"] + TABLE["ep_rows"]:
        for segment, count in row["kernel_ops"].items():
            assert 0 < count <= row["ops"][segment]


def test_the_reader_takes_the_minima_fit_and_the_dense_row():
    table = whatif.host_table()
    dense = next(row for row in TABLE["rows"] if row["layer"] == "dense")
    assert table["dense_forward"] == dense["forward"]["min_us"]
    assert table["dense_backward"] == dense["backward"]["min_us"]
    for segment in SEGMENTS:
        fit = TABLE["moe_fit_min"][segment]
        assert table["fit"][segment] == (fit["fixed_us"], fit["per_expert_us"])


TABLE_US = {"fit": {"forward_before_sync": (1000.0, 0.0), "forward_after_sync": (500.0, 100.0),
                    "backward": (2000.0, 50.0)}, "dense_forward": 800.0, "dense_backward": 700.0}
ROW = SimpleNamespace(model=SimpleNamespace(moe=SimpleNamespace(experts=64)), strategy=SimpleNamespace(ep=8))
# host per MoE layer with 8 local experts: forward 1000 + 500 + 8 x 100 = 2300 us, backward 2000 + 8 x 50 = 2400 us


def _stage(moe=2, other=0, forward=0.0, backward=0.0, reruns=0, rerun_seconds=0.0) -> whatif.Stage:
    return whatif.Stage(moe, other, forward, backward, reruns, rerun_seconds)


def test_a_gpu_bound_segment_adds_nothing():
    assert whatif.stage_extra(ROW, _stage(forward=2 * 2.3e-3, backward=1.0), TABLE_US, False, True, 1.0) == 0.0


def test_a_host_bound_forward_waits_for_the_host():
    extra = whatif.stage_extra(ROW, _stage(forward=1e-3, backward=1.0), TABLE_US, False, False, 1.0)
    assert extra == pytest.approx(2 * 2.3e-3 - 1e-3)


def test_low_leaves_out_the_per_expert_loop():
    extra = whatif.stage_extra(ROW, _stage(forward=1e-3, backward=1.0), TABLE_US, True, False, 1.0)
    assert extra == pytest.approx(2 * 1.5e-3 - 1e-3)


def test_the_other_layers_host_time_joins_the_segments():
    extra = whatif.stage_extra(ROW, _stage(other=3, forward=1e-3, backward=1.0), TABLE_US, False, False, 1.0)
    assert extra == pytest.approx(2 * 2.3e-3 + 3 * 0.8e-3 - 1e-3)


def test_the_backward_is_bounded_only_when_asked_or_without_waits():
    stage = _stage(forward=1.0, backward=1e-3)
    assert whatif.stage_extra(ROW, stage, TABLE_US, False, False, 1.0) == 0.0
    assert whatif.stage_extra(ROW, stage, TABLE_US, False, True, 1.0) == pytest.approx(2 * 2.4e-3 - 1e-3)
    dense = _stage(moe=0, other=4, forward=1e-3, backward=1e-3)
    assert whatif.stage_extra(ROW, dense, TABLE_US, False, False, 1.0) == pytest.approx(
        4 * 0.8e-3 - 1e-3 + 4 * 0.7e-3 - 1e-3)


def test_full_recompute_forwards_wait_too_and_scale_multiplies_the_host():
    stage = _stage(forward=1.0, backward=1.0, reruns=2, rerun_seconds=1e-3)
    assert whatif.stage_extra(ROW, stage, TABLE_US, False, False, 1.0) == pytest.approx(2 * 2.3e-3 - 1e-3)
    assert whatif.stage_extra(ROW, stage, TABLE_US, False, False, 2.0) == pytest.approx(2 * 2 * 2.3e-3 - 1e-3)
