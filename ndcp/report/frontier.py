"""`ndcp recompute` output: the memory-time frontier as a table, a text chart, JSON and CSV."""
from __future__ import annotations

import csv
import io

from rich import box
from rich.table import Table
from rich.text import Text

from ..solve.frontier import Frontier, stage_counts
from ..specs.units import GIB
from .output import write_output
from .terminal import format_seconds

CSV_COLUMNS = ("cap_gib", "caps_gib", "peak_gib", "step_seconds", "proven", "bound_seconds", "zero",
               "layers_per_stage", "none_per_stage", "selective_per_stage", "full_per_stage",
               "marginal_seconds_per_gib_saved")


def _g(n: int) -> str:
    return f"{n / GIB:.2f}"


def _stages_text(counts) -> str:
    return " ".join(f"{c['layers']}={c['none']}/{c['selective']}/{c['full']}" for c in counts)


def frontier_rows(model, result: Frontier) -> list[dict]:
    rows = []
    for point, marginal in zip(result.points, result.marginal()):
        counts = stage_counts(model, point.strategy)
        rows.append({
            "cap_bytes": point.cap_bytes, "caps_bytes": list(point.caps), "peak_bytes": point.peak_bytes,
            "step_seconds": point.step_seconds, "proven": point.proven, "bound_seconds": point.bound_seconds,
            "zero": point.strategy.zero, "layers_per_stage": [c["layers"] for c in counts],
            "stages": [{"none": c["none"], "selective": c["selective"], "full": c["full"], "layers": c["layers"]}
                       for c in counts],
            "marginal_seconds_per_gib_saved": marginal,
            "strategy": point.strategy.as_dict(),
        })
    return rows


def frontier_document(model, result: Frontier) -> dict:
    return {
        "strategy": result.strategy.as_dict(),
        "least_memory_bytes": result.least_bytes,
        "frontier": frontier_rows(model, result),
        "infeasible_caps_bytes": list(result.infeasible_caps),
        "complete": result.complete,
        "solves": result.solves, "timing": {"solve_seconds": result.solve_seconds},
    }


def write_frontier_csv(model, result: Frontier, path: str) -> None:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in frontier_rows(model, result):
        per = lambda key: " ".join(str(s[key]) for s in row["stages"])  # noqa: E731
        writer.writerow([_g(row["cap_bytes"]), " ".join(_g(c) for c in row["caps_bytes"]), _g(row["peak_bytes"]),
                         f"{row['step_seconds']:.6f}", row["proven"], f"{row['bound_seconds']:.6f}", row["zero"],
                         per("layers"), per("none"), per("selective"), per("full"),
                         "" if row["marginal_seconds_per_gib_saved"] is None
                         else f"{row['marginal_seconds_per_gib_saved']:.6f}"])
    write_output(buffer.getvalue(), path, "--csv")


def frontier_table(model, result: Frontier) -> Table:
    table = Table(box=box.SIMPLE_HEAD, title="Memory-time frontier (fastest plan under each cap, verified)",
                  title_justify="left")
    for name, justify in (("cap GiB", "right"), ("peak GiB", "right"), ("step", "right"), ("slower", "right"),
                          ("ms/GiB saved", "right"), ("zero", "right"),
                          ("per stage: layers=none/sel/full", "left")):
        table.add_column(name, justify=justify, no_wrap=not name.startswith("per stage"))
    fastest = min((p.step_seconds for p in result.points), default=0.0)
    for row, point in zip(frontier_rows(model, result), result.points):
        caps = _g(point.caps[0]) + (f" (+{len(point.caps) - 1})" if len(point.caps) > 1 else "")
        marginal = row["marginal_seconds_per_gib_saved"]
        table.add_row(caps, _g(point.peak_bytes), format_seconds(point.step_seconds) + ("" if point.proven else " *"),
                      f"+{100 * (point.step_seconds / fastest - 1):.1f} %" if fastest else "-",
                      "-" if marginal is None else f"{1000 * marginal:.1f}",
                      str(point.strategy.zero), _stages_text(row["stages"]))
    return table


def frontier_chart(result: Frontier, width: int = 40) -> list[str]:
    """Step time against the verified peak, one bar per frontier point (longer = slower)."""
    if not result.points:
        return []
    slowest = max(p.step_seconds for p in result.points)
    lines = ["step time vs peak memory (bar length = step time)"]
    for point in result.points:
        filled = max(1, round(width * point.step_seconds / slowest))
        lines.append(f"  {_g(point.peak_bytes):>7} GiB |{'#' * filled}{' ' * (width - filled)}| "
                     f"{format_seconds(point.step_seconds)}")
    return lines


def render_frontier(console, model, result: Frontier, degrees: str) -> None:
    console.print(Text(f"Strategy: {degrees}", style="bold"))
    if result.least_bytes is not None:
        console.print(f"least memory any plan of it needs: {_g(result.least_bytes)} GiB "
                      f"({result.solves} plan solves, {result.solve_seconds:.2f} s)")
    if result.points:
        console.print(frontier_table(model, result))
        if not all(p.proven for p in result.points):
            console.print("* the plan model stopped at its time limit: fastest found, not proven")
        console.print("per stage: its layers = how many keep activations / recompute selectively / fully. "
                      "ms/GiB saved: step time added per GiB of peak saved by moving to the next tighter point. "
                      "cap (+n): n more caps of the sweep gave the same plan.")
        console.print()
        for line in frontier_chart(result):
            console.print(line, markup=False, highlight=False)
    for cap in result.infeasible_caps:
        console.print(Text(f"cap {_g(cap)} GiB: no plan fits", style="red"))
    if not result.complete:
        console.print(Text("a plan solve ran out of time before finding any plan: a cap above may be reported as "
                           "infeasible only because of that (raise --time-limit)", style="yellow"))


__all__ = ["frontier_document", "write_frontier_csv", "render_frontier", "frontier_table", "frontier_chart",
           "frontier_rows"]
