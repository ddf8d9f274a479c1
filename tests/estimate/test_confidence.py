"""Fits at a confidence (estimate/confidence.py): the largest peak that fits is the one whose upper edge is within
the capacity, a plan may fit at the point estimate and not at 90 %, and confidence 0 is the point estimate."""
import pytest
from hypothesis import given, strategies as st

from ndcp.estimate.confidence import fit_bytes, margin_bytes
from ndcp.estimate.evidence import Evidence
from ndcp.estimate.memory import estimate_memory
from ndcp.specs import ClusterSpec, RunSpec, Strategy, device_preset
from ndcp.specs.library import load_model
from ndcp.specs.recompute import RecomputePlan


@given(capacity=st.integers(0, 2**40), memory_high=st.floats(1.0, 3.0))
def test_fit_bytes_is_the_largest_peak_whose_upper_edge_is_within_the_capacity(capacity, memory_high):
    band = Evidence(10, (0.9, 1.1), memory_high, 5, (), 0.9)  # the edge as the reports compute it
    fit = fit_bytes(capacity, memory_high)
    assert 0 <= fit <= capacity
    assert band.peak_bytes_high(fit) <= capacity or fit == 0
    assert band.peak_bytes_high(fit + 1) > capacity
    assert margin_bytes(capacity, memory_high) == capacity - fit


def test_the_point_estimate_keeps_no_margin():
    assert margin_bytes(80 * 2**30, 1.0) == 0


LLAMA_70B = load_model("llama3-70b")
CLUSTER = ClusterSpec(device_preset("h100"), 512)
# Llama-3-70B on 512 H100, the README's search at the point estimate: its winner, 76.76 GiB of 79.65 GiB
NEAR_FULL = Strategy(dp=64, tp=4, pp=2, vpp=8, mbs=1, mbn=16, zero=2, sp=True, schedule="interleaved",
                     recompute=RecomputePlan.uniform("none"))


def test_the_confidence_margin_flips_a_plan_from_fits_to_does_not_fit():
    point = estimate_memory(LLAMA_70B, CLUSTER, RunSpec(1024, 8192, confidence=0.0), NEAR_FULL)
    banded = estimate_memory(LLAMA_70B, CLUSTER, RunSpec(1024, 8192, confidence=0.9), NEAR_FULL)
    assert point.fits and point.margin_bytes == 0
    assert banded.peak_bytes == point.peak_bytes  # the same estimate, judged at its upper edge
    assert not banded.fits and banded.peak_bytes > banded.fit_bytes
    assert banded.fit_bytes + banded.margin_bytes == banded.capacity_bytes


def test_a_lower_confidence_keeps_a_smaller_margin():
    margins = [estimate_memory(LLAMA_70B, CLUSTER, RunSpec(1024, 8192, confidence=c), NEAR_FULL).margin_bytes
               for c in (0.0, 0.5, 0.9)]
    assert margins[0] == 0 < margins[2]
    assert margins == sorted(margins)


@pytest.mark.parametrize("value", [-0.1, 1.0, float("nan")])
def test_a_confidence_outside_zero_to_one_is_refused(value):
    from ndcp.specs import SpecError
    with pytest.raises(SpecError, match="confidence"):
        RunSpec(8, 1024, confidence=value)
