"""scripts/build_evidence.py: the residual rows it writes, on two pinned runs (not every run: the shipped table's
digest and coverage are checked in tests/estimate/test_evidence.py)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ndcp.estimate.evidence import TABLE_PATH, plan_features

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import build_evidence  # noqa: E402

SHIPPED = json.loads(TABLE_PATH.read_text(encoding="utf-8"))
B200_RUN = "mbr26041_qwen3_30b_b200_mxfp8_8"  # B200: no fitted ceiling, its step residual is the shipped estimate's
PEAK_RUN = "torchtitan_l31_405b_3d_1f1b"  # a measured peak: nothing of memory is fitted


@pytest.fixture(scope="module")
def pinned():
    rows = build_evidence.measured_rows(build_evidence.RUNS_FILES, lambda run_id: run_id in (B200_RUN, PEAK_RUN))
    assert [row.id for row in rows] == [PEAK_RUN, B200_RUN]
    return rows, build_evidence.residuals(rows)


def _shipped(kind: str, run_id: str) -> dict:
    return next(entry for entry in SHIPPED[kind] if entry["id"] == run_id)


def test_residuals_are_measured_over_estimated_with_the_runs_features(pinned):
    rows, table = pinned
    step = next(r for r in table.steps if r.id == B200_RUN)
    peak = next(r for r in table.peaks if r.id == PEAK_RUN)
    assert step.ratio == pytest.approx(_shipped("steps", B200_RUN)["ratio"], abs=1e-6)
    assert peak.ratio == pytest.approx(_shipped("peaks", PEAK_RUN)["ratio"], abs=1e-6)
    assert sorted(peak.features) == _shipped("peaks", PEAK_RUN)["features"]
    row = next(r for r in rows if r.id == B200_RUN)
    assert step.features == plan_features(row.model, row.strategy, row.run, row.cluster.device.name)
    assert {"device blackwell", "fp8 mxfp8", "moe"} <= step.features
    assert step.source == "megatron-bridge-performance" and peak.source == "torchtitan"

