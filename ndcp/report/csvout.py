"""CSV ranking for `ndcp search --csv`: one row per verified strategy, in rank order.

Sizes are integer bytes, times seconds; the columns copy what the estimators returned, nothing is re-estimated.
"""
from __future__ import annotations

import csv
import io
from pathlib import Path

from .output import write_output

DEGREE_COLUMNS = ("tp", "pp", "cp", "dp", "ep", "etp", "vpp")
# cp_comm, dp_shard (HSDP: ZeRO-3 over dp_shard ranks, 0 = all) and optimizer_offload tell apart plans the search
# ranks separately (--cp-comm, --hsdp both, --optimizer-offload both) that the other columns would show as one
COLUMNS = ("rank", *DEGREE_COLUMNS, "mbs", "mbn", "zero", "sp", "recompute", "schedule", "cp_comm", "dp_shard",
           "optimizer_offload", "peak_bytes", "capacity_bytes", "fits", "step_seconds", "mfu", "hfu",
           "tokens_per_second_per_gpu")


def time_part_names(result) -> list[str]:
    """Every time part any ranked strategy reports, in the estimator's order."""
    names: list[str] = []
    for e in result.strategies:
        for name in e.time.parts:
            if name not in names:
                names.append(name)
    return names


def ranking_rows(result) -> tuple[list[str], list[list]]:
    """The header and the rows (rank order) of the ranking CSV."""
    parts = time_part_names(result)
    header = [*COLUMNS, *(f"{name}_seconds" for name in parts)]
    rows = []
    for rank, e in enumerate(result.strategies, 1):
        s, m, t = e.strategy, e.memory, e.time
        rows.append([rank, *(getattr(s, k) for k in DEGREE_COLUMNS), s.mbs, s.mbn, s.zero, "on" if s.sp else "off",
                     s.recompute.summary(), s.schedule, s.cp_comm, s.dp_shard, "on" if s.optimizer_offload else "off",
                     int(m.peak_bytes), int(m.capacity_bytes),
                     "true" if m.fits else "false", repr(float(t.step_seconds)), repr(float(t.mfu)),
                     repr(float(t.hfu)), repr(float(t.tokens_per_second_per_gpu)),
                     *(repr(float(t.parts.get(name, 0.0))) for name in parts)])
    return header, rows


def write_ranking_csv(result, path: str | Path) -> None:
    """Write every verified strategy of `result` (result.strategies) to `path` ("-" = stdout) in rank order."""
    header, rows = ranking_rows(result)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    write_output(buffer.getvalue(), path, "--csv")


__all__ = ["write_ranking_csv", "ranking_rows", "COLUMNS"]
