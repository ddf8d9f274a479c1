"""Agreement statistics over compared runs (numpy only): Pearson, Spearman, top-k agreement and the summary."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .compare import RunComparison

TOP_K = 5


@dataclass(frozen=True)
class ValidationSummary:
    """Aggregate agreement over the compared runs (None where fewer than two values exist)."""

    runs: int
    mean_abs_mfu_points: float | None
    max_abs_mfu_points: float | None
    mean_abs_step_relative: float | None
    mfu_pearson: float | None
    mfu_spearman: float | None
    step_pearson: float | None
    step_spearman: float | None
    top_k: int
    top_k_agreement: float | None
    mean_abs_memory_relative: float | None


def pearson(x, y) -> float | None:
    """Pearson correlation; None with fewer than two points or a constant series."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 2 or x.std() == 0 or y.std() == 0:
        return None
    return float(np.corrcoef(x, y)[0, 1])


def ranks(values) -> np.ndarray:
    """Ranks starting at 1, ties sharing their average rank."""
    values = np.asarray(values, float)
    order = np.argsort(values, kind="mergesort")
    out = np.empty(len(values))
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[order[j + 1]] == values[order[i]]:
            j += 1
        out[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(x, y) -> float | None:
    """Spearman rank correlation: Pearson on the ranks."""
    return pearson(ranks(x), ranks(y)) if len(x) >= 2 else None


def top_k_agreement(measured, estimated, k: int) -> float | None:
    """Share of the k best measured runs that are also among the k best estimated ones (higher is better)."""
    k = min(k, len(measured))
    if k == 0:
        return None
    best = set(np.argsort(-np.asarray(measured, float), kind="mergesort")[:k])
    guessed = set(np.argsort(-np.asarray(estimated, float), kind="mergesort")[:k])
    return len(best & guessed) / k


def summarise(runs: tuple[RunComparison, ...]) -> ValidationSummary:
    with_mfu = [r for r in runs if r.measured_mfu is not None]
    with_step = [r for r in runs if r.measured_step]
    with_memory = [r for r in runs if r.memory_relative_error is not None]
    mfu_err = [abs(r.mfu_error_points) for r in with_mfu]
    measured_mfu, estimated_mfu = [r.measured_mfu for r in with_mfu], [r.estimated_mfu for r in with_mfu]
    measured_step, estimated_step = [r.measured_step for r in with_step], [r.estimated_step for r in with_step]
    return ValidationSummary(
        runs=len(runs),
        mean_abs_mfu_points=float(np.mean(mfu_err)) if mfu_err else None,
        max_abs_mfu_points=float(np.max(mfu_err)) if mfu_err else None,
        mean_abs_step_relative=float(np.mean([abs(r.step_relative_error) for r in with_step])) if with_step else None,
        mfu_pearson=pearson(measured_mfu, estimated_mfu),
        mfu_spearman=spearman(measured_mfu, estimated_mfu),
        step_pearson=pearson(np.log(measured_step), np.log(estimated_step)) if with_step else None,
        step_spearman=spearman(measured_step, estimated_step) if with_step else None,
        top_k=min(TOP_K, len(with_mfu)),
        top_k_agreement=top_k_agreement(measured_mfu, estimated_mfu, TOP_K),
        mean_abs_memory_relative=float(np.mean([abs(r.memory_relative_error) for r in with_memory]))
        if with_memory else None,
    )


__all__ = ["ValidationSummary", "TOP_K", "pearson", "ranks", "spearman", "top_k_agreement", "summarise"]
