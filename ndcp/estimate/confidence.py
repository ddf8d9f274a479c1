"""Fits at a confidence (docs/confidence.md §1): a plan fits when its peak's upper edge at the run's confidence (the
peak times the band's factor, Evidence.peak_bytes_high) is within the capacity. The bytes that edge keeps free below
the capacity are the plan's margin: the one term the search's linear memory bounds add to a plan's memory
(solve/coefficients.py memory_margins), and the one verification subtracts from the capacity (MemoryEstimate.fits).
At confidence 0 every margin is 0 (the point estimate); --headroom is taken off the capacity before, as before.
"""
from __future__ import annotations

from functools import lru_cache
from math import ceil

from ..specs.model import ModelSpec
from ..specs.run import RunSpec
from ..specs.strategy import Strategy
from .evidence import evidence_for, plan_features


def upper_edge(peak_bytes: int, memory_high: float) -> int:
    """A peak's upper edge in bytes under the band factor `memory_high` (Evidence.peak_bytes_high)."""
    return int(ceil(peak_bytes * memory_high))


@lru_cache(maxsize=4096)
def fit_bytes(capacity_bytes: int, memory_high: float) -> int:
    """The largest peak whose upper edge under `memory_high` is within `capacity_bytes` (0 when none is). Cached: a
    search asks it for the same few capacities and band factors millions of times (a pure function of two
    numbers)."""
    if memory_high == 1.0:
        return capacity_bytes
    peak = int(capacity_bytes // memory_high)
    while peak > 0 and upper_edge(peak, memory_high) > capacity_bytes:  # float rounding, either way
        peak -= 1
    while upper_edge(peak + 1, memory_high) <= capacity_bytes:
        peak += 1
    return max(0, peak)


def margin_bytes(capacity_bytes: int, memory_high: float) -> int:
    """Bytes of the capacity a plan with band factor `memory_high` keeps free: capacity - fit_bytes."""
    return capacity_bytes - fit_bytes(capacity_bytes, memory_high)


def features_high(features: frozenset[str], confidence: float) -> float:
    """The band factor on the peak of a plan resting on `features` (evidence.plan_features) at `confidence`."""
    return evidence_for(features, confidence).memory_high if confidence else 1.0


def plan_margin(model: ModelSpec, device_name: str, run: RunSpec, strategy: Strategy, capacity_bytes: int) -> int:
    """margin_bytes of one plan on this device at the run's confidence."""
    features = plan_features(model, strategy, run, device_name)
    return margin_bytes(capacity_bytes, features_high(features, run.confidence))


__all__ = ["upper_edge", "fit_bytes", "margin_bytes", "features_high", "plan_margin"]
