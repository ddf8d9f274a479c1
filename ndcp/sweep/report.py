"""A sweep on the terminal (the table, the progress bar with ETA on stderr) and as a plot (time to train and cost
against GPUs, the knee marked). Numbers are the ones the searches returned; nothing is re-estimated."""
from __future__ import annotations

import sys
from pathlib import Path

from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from ..report.notation import Breakable, text_plan_legend
from ..report.plots import _check_path, _matplotlib, _save
from ..report.terminal import assumed_lines
from ..specs.model import ModelSpec
from .results import knees, series

DAY = 86400.0


def _number(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _short(value: float | None) -> str:
    """3 significant digits with k/M/G (the exact numbers are in --json and --csv)."""
    if value is None:
        return "-"
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


POINT_COLUMNS = ("device", "GBS", "seq", "status")  # left out of the numbered table: the lines under it name them


def sweep_table(rows: list[dict], priced: bool, numbered: bool = False) -> Table:
    """One row per point, the numbers (print_sweep lists each point's strategy under the table): days, GPU-hours
    and cost expected with failures and checkpoints (docs/goodput.md), beside the ideal days and the goodput.
    `numbered`: the points numbered instead of their device, batch and length columns (for narrow consoles)."""
    table = Table(title="sweep: the best proven strategy per point", title_justify="left", box=box.SIMPLE_HEAD,
                  padding=(0, 0, 0, 1))
    names = (*(("#",) if numbered else ()), "device", "GPUs", "GBS", "seq", "status", "step s", "MFU", "tok/s",
             "ideal\ndays", "goodput", "days", "GPU-h", *(("cost",) if priced else ()))
    names = tuple(n for n in names if not (numbered and n in POINT_COLUMNS))
    for name in names:
        table.add_column(name, justify="left" if name in ("device", "status") else "right", no_wrap=True,
                         min_width=max(len(line) for line in name.splitlines()))
    for number, r in enumerate(rows, 1):
        mfu = None if r.get("mfu") is None else 100 * r["mfu"]
        days, ideal_days = (None if r.get(key) is None else r[key] / DAY
                            for key in ("time_to_train_seconds", "ideal_time_to_train_seconds"))
        goodput = None if r.get("goodput") is None else 100 * r["goodput"]
        band = r.get("time_to_train_seconds_band")
        spread = f" ({band[0] / DAY:,.1f}–{band[1] / DAY:,.1f})" if band and band[0] != band[1] else ""
        cells = {"#": str(number), "device": r["device"], "GPUs": str(r["gpus"]), "GBS": str(r["global_batch"]),
                 "seq": str(r["seq_len"]), "status": r["status"],
                 "step s": _number(r.get("step_seconds"), 2),
                 "MFU": "-" if mfu is None else f"{mfu:.1f}%", "tok/s": _short(r.get("tokens_per_second")),
                 "ideal\ndays": _number(ideal_days, 1), "goodput": "-" if goodput is None else f"{goodput:.1f}%",
                 "days": _number(days, 1) + spread, "GPU-h": _short(r.get("gpu_hours")), "cost": _short(r.get("cost"))}
        table.add_row(*(cells[name] for name in names))
    return table


def print_sweep(console: Console, model: ModelSpec, rows: list[dict], priced: bool) -> None:
    """What the model assumes, the table (numbered when the full one is wider than the console), each point's
    strategy under it (wrapped between words and a plan's pieces), the knees, and the plan notation's legend when a
    plan is per stage."""
    for line in assumed_lines(model):
        console.print(line)
    numbered = Console(width=10_000).measure(sweep_table(rows, priced)).maximum > console.width
    console.print(sweep_table(rows, priced, numbered))
    for number, r in enumerate(rows, 1):
        label = f"#{number} " if numbered else ""
        status = f" ({r['status']})" if numbered and r.get("label") else ""
        console.print(Breakable(Text(f"{label}{r['device']} x {r['gpus']}, GBS {r['global_batch']}, seq "
                                     f"{r['seq_len']}{status}: "
                                     + (r.get("label") or r.get("explanation") or r["status"])),
                                indent=len(label) + 2))
    for k in knees(rows):
        console.print(f"knee of expected time to train ({k['device']}, GBS {k['global_batch']}, seq {k['seq_len']}): "
                      f"{k['gpus']:,} GPUs")
    console.print("days, GPU-h and cost: expected, with failures, checkpoints and restarts (docs/goodput.md); "
                  "ideal days: without them")
    legend = text_plan_legend(r.get("label") or "" for r in rows)
    if legend is not None:
        console.print(legend)


class SweepProgress:
    """A progress bar with ETA on stderr (a terminal only; within its width), advanced once per finished point."""

    def __init__(self, enabled: bool, total: int, done: int = 0):
        self.bar = None
        if enabled and sys.stderr.isatty():
            self.bar = Progress(TextColumn("sweep"), BarColumn(bar_width=None), MofNCompleteColumn(),
                                TimeElapsedColumn(),
                                TextColumn("ETA"), TimeRemainingColumn(), console=Console(stderr=True),
                                transient=True)
            self.task = self.bar.add_task("sweep", total=total, completed=done)

    def __enter__(self):
        if self.bar is not None:
            self.bar.start()
        return self

    def advance(self) -> None:
        if self.bar is not None:
            self.bar.advance(self.task)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.stop()
        return False


def plot_sweep(rows: list[dict], path, priced: bool, title: str = "ndcp sweep") -> Path:
    """Left: expected time to train (days) against GPUs, one line per (device, batch, length), the ideal one dashed
    beside it, the knee of the expected one circled. Right: expected cost (or GPU-hours without a price), the ideal
    dashed, the knee circled on the expected curve."""
    path = _check_path(path)
    matplotlib, Figure = _matplotlib()
    groups = series(rows)
    if not groups:
        raise ValueError("nothing to plot: no point of the sweep has a strategy that fits")
    figure = Figure(figsize=(13, 5), layout="constrained")
    left, right = figure.subplots(1, 2)
    figure.suptitle(title)
    knee_at = {(k["device"], k["global_batch"], k["seq_len"]): k["gpus"] for k in knees(rows)}
    spend = "cost" if priced else "gpu_hours"
    for key, points in groups.items():
        label = f"{key[0]}, GBS {key[1]:,}, seq {key[2]:,}"
        gpus = [p["gpus"] for p in points]
        line, = left.plot(gpus, [p["time_to_train_seconds"] / DAY for p in points], marker="o",
                          label=f"{label}, expected")
        right.plot(gpus, [p[spend] for p in points], marker="o", color=line.get_color(), label=f"{label}, expected")
        left.plot(gpus, [p["ideal_time_to_train_seconds"] / DAY for p in points], linestyle="--",
                  color=line.get_color(), label=f"{label}, ideal")
        right.plot(gpus, [p[f"ideal_{spend}"] for p in points], linestyle="--", color=line.get_color(),
                   label=f"{label}, ideal")
        if key in knee_at:
            at = next(p for p in points if p["gpus"] == knee_at[key])
            left.scatter([at["gpus"]], [at["time_to_train_seconds"] / DAY], s=200, facecolors="none",
                         edgecolors="red", linewidths=1.5, zorder=3)
            right.scatter([at["gpus"]], [at[spend]], s=200, facecolors="none", edgecolors="red", linewidths=1.5,
                          zorder=3)
    left.scatter([], [], s=120, facecolors="none", edgecolors="red", label="knee (expected)")
    for axes, ylabel in ((left, "time to train (days): expected, and ideal dashed"),
                         (right, f"{'cost' if priced else 'GPU-hours'}: expected, and ideal dashed")):
        axes.set_xscale("log", base=2)
        axes.set_xlabel("GPUs")
        axes.set_ylabel(ylabel)
        axes.set_ylim(0, 1.15 * max(y for line in axes.get_lines() for y in line.get_ydata()))  # from zero: a few
        # per cent of cost looks like a few per cent
        axes.grid(alpha=0.3)
        axes.legend(fontsize=8, loc="lower left")
    return _save(matplotlib, figure, path, title)


__all__ = ["sweep_table", "print_sweep", "SweepProgress", "plot_sweep"]
