"""Fits at a confidence (docs/evidence.md §4): a plan fits when its peak's upper edge at the run's confidence (the
peak times the band's factor, Evidence.peak_bytes_high) is within the capacity. The bytes that edge keeps free below
the capacity are the plan's margin: the one term the search's linear memory bounds add to a plan's memory
(solve/coefficients.py memory_margins), and the one verification subtracts from the capacity (MemoryEstimate.fits).
At confidence 0 every margin is 0 (the point estimate); --headroom is taken off the capacity before, as before.
"""
from __future__ import annotations

from ..specs.model import ModelSpec
from ..specs.run import RunSpec
from ..specs.strategy import Strategy
from .evidence import Evidence, evidence_for, plan_features


def fit_bytes(capacity_bytes: int, evidence: Evidence) -> int:
    """The largest peak whose upper edge is within `capacity_bytes` (0 when none is)."""
    if evidence.memory_high == 1.0:
        return capacity_bytes
    peak = int(capacity_bytes // evidence.memory_high)
    while peak > 0 and evidence.peak_bytes_high(peak) > capacity_bytes:  # float rounding, either way
        peak -= 1
    while evidence.peak_bytes_high(peak + 1) <= capacity_bytes:
        peak += 1
    return max(0, peak)


def margin_bytes(capacity_bytes: int, evidence: Evidence) -> int:
    """Bytes of the capacity a plan with this evidence keeps free at its confidence: capacity - fit_bytes."""
    return capacity_bytes - fit_bytes(capacity_bytes, evidence)


def features_margin(capacity_bytes: int, features: frozenset[str], confidence: float) -> int:
    """margin_bytes of a plan resting on `features` (evidence.plan_features) at `confidence`."""
    return margin_bytes(capacity_bytes, evidence_for(features, confidence)) if confidence else 0


def plan_margin(model: ModelSpec, device_name: str, run: RunSpec, strategy: Strategy, capacity_bytes: int) -> int:
    """margin_bytes of one plan on this device at the run's confidence."""
    return features_margin(capacity_bytes, plan_features(model, strategy, run, device_name), run.confidence)


__all__ = ["fit_bytes", "margin_bytes", "features_margin", "plan_margin"]
