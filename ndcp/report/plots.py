"""Optional plots (PNG or SVG, by the path's suffix) of a search result and of a memory-cap frontier.

matplotlib is an optional extra (`pip install 'ndcp[plot]'`): it is imported inside the functions, and nothing here
touches pyplot's global state (figures are built directly, so this works headless and in threads). Like the
terminal reports, the plots only draw numbers the estimators already returned.
"""
from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Sequence

from ..specs.strategy_text import PLOT_FIELDS, strategy_text
from ..specs.units import GIB
from .output import write_output
from .terminal import GROUP_ORDER, TIME_PART_LABELS, group_parts

FORMATS = (".png", ".svg")
MISSING = "plotting needs matplotlib: pip install 'ndcp[plot]'"

TIME_COLOURS = {
    "compute_forward": "#4c72b0", "compute_backward": "#55a868", "recompute": "#8172b3", "tp_comm": "#c44e52",
    "cp_comm": "#dd8452", "ep_comm": "#da8bc3", "dp_comm": "#937860", "pp_comm": "#8c8c8c", "bubble": "#ccb974",
    "optimizer": "#64b5cd", "step_costs": "#a6a6a6", "grad_passes": "#b07aa1",
}
MEMORY_COLOURS = {"parameters": "#17becf", "gradients": "#e377c2", "optimizer": "#bcbd22", "activations": "#2ca02c",
                  "other": "#7f7f7f"}


def _matplotlib():
    # Imported here, not at the top: matplotlib is an optional extra, and importing it takes ~1 s (measured).
    try:
        from matplotlib.figure import Figure
    except ImportError as error:  # pragma: no cover - exercised only without the extra
        raise RuntimeError(MISSING) from error
    import matplotlib
    return matplotlib, Figure


def _check_path(path) -> Path:
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise ValueError(f"cannot plot to {str(path)!r}: the file name must end in .png or .svg")
    return path


def _save(matplotlib, figure, path: Path, title: str) -> Path:
    """Write by suffix; SVG keeps text as text (searchable, and the title stays in the file)."""
    fmt = path.suffix.lower().lstrip(".")
    metadata = {"Title": title}
    image = io.BytesIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "ndcp"}):
        figure.savefig(image, format=fmt, bbox_inches="tight", dpi=120, metadata=metadata)
    write_output(image.getvalue(), path, "--plot")
    return path


def strategy_label(strategy) -> str:
    """A short label: `tp8 pp4 cp1 dp16 vpp5 mbs1 z1 sp selective`."""
    return strategy_text(strategy, PLOT_FIELDS, compact=True, experts_if_used=True, above_one=("vpp",))


def plot_search(result, path, top: int = 10, title: str | None = None) -> Path:
    """Left: the top-`top` strategies' step time, stacked by part (horizontal bars, fastest on top).
    Right: the best strategy's memory per pipeline stage, stacked by part group, with the capacity line.
    With nothing that fits, the nearest misses are drawn instead (and the title says so)."""
    path = _check_path(path)
    matplotlib, Figure = _matplotlib()
    ranked = list(result.strategies[:top])
    fits = bool(ranked)
    if not ranked:
        ranked = list(result.nearest_misses[:top])
    if not ranked:
        raise ValueError("nothing to plot: the search has no verified strategies and no near misses")
    title = title or (f"ndcp search: top {len(ranked)} strategies ({result.status})" if fits
                      else "ndcp search: nothing fits; nearest misses")

    figure = Figure(figsize=(14, max(4.0, 0.45 * len(ranked) + 2.0)), layout="constrained")
    left, right = figure.subplots(1, 2, width_ratios=(3, 2))
    figure.suptitle(title)
    _step_time_panel(left, ranked, result.lower_bound_seconds)
    _memory_panel(right, ranked[0])
    return _save(matplotlib, figure, path, title)


def _step_time_panel(left, ranked: list, lower_bound_seconds: float) -> None:
    """The ranked strategies' step time, stacked by part (horizontal bars, rank 1 on top), with the proven bound."""
    parts = [p for p in TIME_PART_LABELS if any(e.time.parts.get(p, 0) > 0 for e in ranked)]
    parts += sorted({p for e in ranked for p, v in e.time.parts.items() if v > 0} - set(parts))
    rows = list(range(len(ranked)))[::-1]  # rank 1 at the top
    left_edge = [0.0] * len(ranked)
    for part in parts:
        widths = [max(0.0, float(e.time.parts.get(part, 0.0))) for e in ranked]
        left.barh(rows, widths, left=left_edge, color=TIME_COLOURS.get(part), label=TIME_PART_LABELS.get(part, part),
                  edgecolor="white", linewidth=0.4)
        left_edge = [a + b for a, b in zip(left_edge, widths)]
    for row, e in zip(rows, ranked):
        left.text(e.step_seconds, row, f" {e.step_seconds:.3f} s", va="center", fontsize=8)
    left.set_yticks(rows, [f"#{i + 1} {strategy_label(e.strategy)}" for i, e in enumerate(ranked)], fontsize=8)
    left.set_xlabel("step time (s)")
    left.set_title("step time by part")
    if math.isfinite(lower_bound_seconds) and lower_bound_seconds > 0:
        left.axvline(lower_bound_seconds, color="black", linestyle=":", linewidth=1, label="proven lower bound")
    left.set_xlim(0, max(e.step_seconds for e in ranked) * 1.18)
    left.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=4, frameon=False)


def _memory_panel(right, best) -> None:
    """The best strategy's memory per pipeline stage, stacked by part group, with the capacity line."""
    stages = best.memory.stages
    grouped = [group_parts(s.parts) for s in stages]
    bottom = [0.0] * len(stages)
    xs = [s.stage for s in stages]
    for group in GROUP_ORDER:
        heights = [g.get(group, 0) / GIB for g in grouped]
        if not any(heights):
            continue
        right.bar(xs, heights, bottom=bottom, color=MEMORY_COLOURS[group], label=group, edgecolor="white",
                  linewidth=0.4)
        bottom = [a + b for a, b in zip(bottom, heights)]
    capacity = best.memory.capacity_bytes / GIB
    right.axhline(capacity, color="red", linestyle="--", linewidth=1.2, label=f"capacity {capacity:.1f} GiB")
    right.set_xlabel("pipeline stage")
    right.set_ylabel("GiB")
    right.set_title(f"memory per stage, #1 (peak {best.memory.peak_bytes / GIB:.1f} GiB on stage "
                    f"{best.memory.peak_stage})")
    if len(xs) <= 32:
        right.set_xticks(xs)
    right.set_ylim(0, max(capacity, max(bottom)) * 1.1)
    right.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=3, frameon=False)


def plot_frontier(points: Sequence[tuple[int, int, float]], path, title: str = "ndcp: step time vs memory cap"
                  ) -> Path:
    """Step time against the memory cap: points are (cap_bytes, peak_bytes, step_seconds), one per cap (a step of
    None or inf means nothing fits under that cap). The frontier is drawn as a monotone step line (a larger cap
    never makes the best step slower), with each point's actual peak marked."""
    path = _check_path(path)
    matplotlib, Figure = _matplotlib()
    rows = sorted((int(c), int(p) if p is not None else None, s) for c, p, s in points)
    feasible = [(c, p, float(s)) for c, p, s in rows if s is not None and math.isfinite(s)]
    if not feasible:
        raise ValueError("nothing to plot: no memory cap in the frontier has a strategy that fits")

    # monotone frontier: the best step time at or below each cap
    xs, ys, best = [], [], math.inf
    for cap, _, step in feasible:
        best = min(best, step)
        xs.append(cap / GIB)
        ys.append(best)

    figure = Figure(figsize=(8, 5), layout="constrained")
    axes = figure.subplots()
    axes.set_title(title)
    axes.step(xs, ys, where="post", color="#4c72b0", linewidth=2, label="fastest step that fits")
    axes.scatter([c / GIB for c, _, _ in feasible], [s for _, _, s in feasible], color="#4c72b0", zorder=3,
                 s=20, label="cap (search result)")
    peaks = [(p / GIB, s) for _, p, s in feasible if p]
    if peaks:
        axes.scatter([p for p, _ in peaks], [s for _, s in peaks], marker="x", color="#c44e52", zorder=3,
                     label="actual peak of that strategy")
    infeasible = [c / GIB for c, _, s in rows if s is None or not math.isfinite(s)]
    for cap in infeasible:
        axes.axvline(cap, color="#8c8c8c", linestyle=":", linewidth=1)
    if infeasible:
        axes.plot([], [], color="#8c8c8c", linestyle=":", label="nothing fits")
    axes.set_xlabel("memory cap per device (GiB)")
    axes.set_ylabel("step time (s)")
    axes.set_ylim(0, max(s for _, _, s in feasible) * 1.1)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    return _save(matplotlib, figure, path, title)


__all__ = ["plot_search", "plot_frontier", "strategy_label", "MISSING"]
