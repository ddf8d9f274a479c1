"""A sweep's results: the JSON document, the CSV, and the knee of each time-to-train curve.

JSON: `{model, model_assumptions, tokens, price_per_gpu_hour, failures, points: [{device, gpus, global_batch,
seq_len, status, strategy, step_seconds, mfu, tokens_per_second, steps, ideal_time_to_train_seconds, goodput,
time_to_train_seconds, gpu_hours, cost, checkpoint_interval_seconds, ...}], knees}`: time_to_train_seconds,
gpu_hours and cost are expected, with failures (docs/goodput.md), the ideal_ ones without; times in seconds, None
(null) where nothing fits or no price was given; step_seconds_band and the expected figures' bands
(time_to_train_seconds_band, gpu_hours_band, cost_band): [low, high] at the run's confidence (docs/confidence.md
§4). The journal that --resume reads is journal.py.
"""
from __future__ import annotations

import csv
import io

from ..estimate.goodput import FailureSettings
from ..specs.model import ModelSpec
from .solve import BAND_KEYS, DERIVED_KEYS

POINT_KEYS = ("device", "gpus", "global_batch", "seq_len", "status", "strategy", "step_seconds", "mfu",
              "tokens_per_second", *DERIVED_KEYS, "solve_seconds", "explanation", "step_seconds_band", *BAND_KEYS)


def failures_document(failures: FailureSettings) -> dict:
    """The failure and checkpoint settings every point was priced with."""
    return {"gpu_mtbf_hours": failures.gpu_mtbf_hours, "restart_seconds": failures.restart_seconds,
            "asynchronous_checkpoint": failures.asynchronous,
            "checkpoint_node_bandwidth": failures.storage.node_bandwidth,
            "checkpoint_aggregate_bandwidth": failures.storage.aggregate_bandwidth}


def sweep_document(rows: list[dict], model: ModelSpec, tokens: int, price: float | None,
                   failures: FailureSettings = FailureSettings()) -> dict:
    return {"model": model.name, "model_assumptions": list(model.report_assumptions), "tokens": tokens,
            "price_per_gpu_hour": price, "failures": failures_document(failures),
            "points": [{key: row.get(key) for key in POINT_KEYS} for row in rows],
            "knees": knees(rows)}


def sweep_csv(rows: list[dict]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(POINT_KEYS)
    for row in rows:
        writer.writerow([_cell(row.get(k)) for k in POINT_KEYS])
    return out.getvalue()


def _cell(value) -> str:
    """A CSV cell: empty for None, floats exactly (repr), a band as its two edges separated by a space."""
    if value is None:
        return ""
    if isinstance(value, list):
        return " ".join(_cell(v) for v in value)
    return repr(value) if isinstance(value, float) else value


# -- the knee ----------------------------------------------------------------------------------------------------
def knee(gpus: list[int], seconds: list[float]) -> int | None:
    """The knee of time to train against GPUs (Kneedle, Satopaa et al. 2011; docs/sweep.md): with both scaled to the
    unit square (time reversed, so the curve rises), the point farthest above the chord from the first point to the
    last, where the curve bends from steep to flat. None for fewer than 3 points or no point above the chord."""
    if len(gpus) < 3:
        return None
    x0, x1, y0, y1 = gpus[0], gpus[-1], seconds[0], seconds[-1]
    if x1 == x0 or y0 == y1:
        return None
    lifts = [(y0 - y) / (y0 - y1) - (x - x0) / (x1 - x0) for x, y in zip(gpus, seconds)]
    best = max(range(len(lifts)), key=lambda i: (lifts[i], -i))
    return gpus[best] if lifts[best] > 1e-9 else None


def series(rows: list[dict]) -> dict[tuple, list[dict]]:
    """The points that fit, grouped by (device, global batch, sequence length), each ordered by GPUs."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        if row.get("time_to_train_seconds") is not None:
            groups.setdefault((row["device"], row["global_batch"], row["seq_len"]), []).append(row)
    return {k: sorted(v, key=lambda r: r["gpus"]) for k, v in groups.items()}


def knees(rows: list[dict]) -> list[dict]:
    out = []
    for (device, batch, length), points in series(rows).items():
        at = knee([p["gpus"] for p in points], [p["time_to_train_seconds"] for p in points])
        if at is not None:
            out.append({"device": device, "global_batch": batch, "seq_len": length, "gpus": at})
    return out


__all__ = ["POINT_KEYS", "sweep_document", "failures_document", "sweep_csv", "knee", "knees", "series"]
