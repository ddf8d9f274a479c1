"""scripts/small_hidden_whatif.py (docs/formulas.md §3, "Small hidden sizes: candidates checked"): each candidate is
priced by patching one ndcp term in a fresh process, and "to close" is the candidate's value, linear in its time,
that meets the measured step."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import small_hidden_whatif as whatif  # noqa: E402

ROW = "mpt_h100_1b_s2048_64"  # llm-foundry MPT-1B on 64 H100: every knob published (no pinned search), pp 1


def test_to_close_is_linear_in_the_candidates_time():
    # gap and loss add time in proportion to their value: 1 us moved 0.8 -> 0.9 s, so 2 us meet 1.0 s
    assert whatif.to_close("gap", (1.0, 0.8), 0.9, 1.0) == pytest.approx(2.0)
    assert whatif.to_close("loss", (1.0, 0.8), 0.9, 13.0) == pytest.approx(21.0)
    # hbm and gemm act as 1 / value: half the bandwidth (time x 2) moved 0.8 -> 0.9 s, so time x 3 meets 1.0 s
    assert whatif.to_close("hbm", (1.0, 0.8), 0.9, 0.5) == pytest.approx(1 / 3)
    assert whatif.to_close("gemm", (1.0, 0.8), 0.9, 0.5) == pytest.approx(1 / 3)
    # a row already too slow asks for less of the candidate than ndcp prices (a negative gap)
    assert whatif.to_close("gap", (1.0, 1.1), 1.2, 1.0) < 0


def test_an_unknown_variant_is_refused_with_the_valid_ones():
    with pytest.raises(ValueError, match="hbm, loss, gap, gemm, fp8, grads"):
        whatif.apply("kernels", 1.0)


def test_each_candidate_slows_the_row_and_its_value_to_close_meets_the_measured_step():
    base = whatif._worker("base", 0.0, [ROW])[ROW]
    measured, estimated = base
    assert estimated < measured  # the row is estimated too fast (issue #34)
    for variant in ("gap", "hbm"):
        value = whatif.VARIANTS[variant][2]
        moved = whatif._worker(variant, value, [ROW])[ROW][1]
        assert moved > estimated
        closing = whatif.to_close(variant, base, moved, value)
        assert whatif._worker(variant, closing, [ROW])[ROW][1] == pytest.approx(measured, rel=0.01)
