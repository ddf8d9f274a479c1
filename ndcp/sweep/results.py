"""A sweep's results: the JSON document, the CSV, the JSONL log that `--resume` reads, and the knee of each
time-to-train curve.

JSON: `{model, model_assumptions, points: [{device, gpus, global_batch, seq_len, status, strategy, step_seconds, mfu, tokens_per_second,
time_to_train_seconds, gpu_hours, cost, ...}]}`; times in seconds, None (null) where nothing fits or no price was
given; each point's step_seconds_band, time_to_train_seconds_band, gpu_hours_band and cost_band: [low, high] at the
run's confidence (docs/confidence.md §4). The JSONL log holds one answer per line, with its problem key (solve.Job.key), appended as points finish.
"""
from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

from ..specs.fields import SpecError
from ..specs.files import RUNS_CAP, read_text
from ..specs.model import ModelSpec

POINT_KEYS = ("device", "gpus", "global_batch", "seq_len", "status", "strategy", "step_seconds", "mfu",
              "tokens_per_second", "steps", "time_to_train_seconds", "gpu_hours", "cost", "solve_seconds",
              "explanation", "step_seconds_band", "time_to_train_seconds_band", "gpu_hours_band", "cost_band")


def sweep_document(rows: list[dict], model: ModelSpec, tokens: int, price: float | None) -> dict:
    return {"model": model.name, "model_assumptions": list(model.assumptions), "tokens": tokens,
            "price_per_gpu_hour": price,
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


# -- the JSONL log -----------------------------------------------------------------------------------------------
def append_answers(path: str | Path, answers: list[dict]) -> None:
    """Append answers, one line each, and close the file (so an interrupted sweep keeps every finished point);
    none: check that PATH can be appended to (it is created if missing)."""
    try:
        with open(Path(path).expanduser(), "a", encoding="utf-8") as stream:
            stream.writelines(json.dumps(answer, sort_keys=True) + "\n" for answer in answers)
    except (OSError, ValueError) as error:
        raise SpecError(f"--jsonl {path}: cannot write: {getattr(error, 'strerror', None) or type(error).__name__}") \
            from None


def read_answers(path: str | Path) -> dict[str, dict]:
    """The answers of an earlier run, by problem key (a missing file is an empty log; a line cut short by an
    interrupted write is skipped with a note on stderr)."""
    path = Path(path).expanduser()
    if not path.exists():
        return {}
    lines = read_text(path, f"--jsonl {path}", "the answers", RUNS_CAP).splitlines()  # a FIFO or device refused
    answers = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            answer = json.loads(line)
        except json.JSONDecodeError:
            print(f"ndcp: note: --jsonl {path} line {number} is not JSON (an interrupted write?); skipped",
                  file=sys.stderr)
            continue
        if not isinstance(answer, dict) or not isinstance(answer.get("key"), str) or "status" not in answer:
            raise SpecError(f"--jsonl {path} line {number}: not a sweep answer (no key and status); give another file")
        answers[answer["key"]] = answer
    return answers


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


__all__ = ["POINT_KEYS", "sweep_document", "sweep_csv", "append_answers", "read_answers", "knee", "knees", "series"]
