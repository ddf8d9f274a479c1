"""`ndcp recompute` output: the memory-time frontier as a table, a text chart, JSON and CSV."""
from __future__ import annotations

import csv
import io
from itertools import groupby

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..solve.frontier import Frontier, stage_counts
from ..specs.recompute import CLASSIC_MODES, OPTION_BY_NAME, RECOMPUTE_MODES
from ..specs.units import GIB
from .notation import plan_codes
from .output import write_output
from .terminal import assumed_lines, format_seconds

CSV_COLUMNS = ("cap_gib", "caps_gib", "peak_gib", "step_seconds", "proven", "bound_seconds", "zero",
               "layers_per_stage", "none_per_stage", "selective_per_stage", "full_per_stage",
               "marginal_seconds_per_gib_saved")


def _g(n: int) -> str:
    return f"{n / GIB:.2f}"


def _shown_modes(counts) -> list[str]:
    """The modes plan summaries write for these stage counts: none, selective and full always; another mode where
    some stage runs it."""
    return [m for m in RECOMPUTE_MODES if m in CLASSIC_MODES or any(c.get(m) for c in counts)]


def _stages_text(counts) -> str:
    """`8=5n/0s/3f 8=...`: each stage's layers and how many run each recompute mode, labelled as plan summaries
    label them (_shown_modes)."""
    shown = _shown_modes(counts)
    return " ".join(f"{c['layers']}=" + "/".join(f"{c.get(m, 0)}{OPTION_BY_NAME[m].label}" for m in shown)
                    for c in counts)


def frontier_rows(model, result: Frontier) -> list[dict]:
    rows = []
    for point, marginal in zip(result.points, result.marginal()):
        counts = stage_counts(model, point.strategy)
        rows.append({
            "cap_bytes": point.cap_bytes, "caps_bytes": list(point.caps), "peak_bytes": point.peak_bytes,
            "step_seconds": point.step_seconds, "proven": point.proven, "bound_seconds": point.bound_seconds,
            "zero": point.strategy.zero, "layers_per_stage": [c["layers"] for c in counts],
            "stages": [dict(c) for c in counts],  # layers per recompute mode, and the stage's layers
            "marginal_seconds_per_gib_saved": marginal,
            "strategy": point.strategy.as_dict(),
        })
    return rows


def frontier_document(model, result: Frontier) -> dict:
    return {
        "model_assumptions": list(model.report_assumptions),
        "strategy": result.strategy.as_dict(),
        "least_memory_bytes": result.least_bytes,
        "plans": "uniform" if result.uniform else "per-stage",  # uniform: the trainer runs one option per layer
        "frontier": frontier_rows(model, result),
        "infeasible_caps_bytes": list(result.infeasible_caps),
        "complete": result.complete,
        "unsolved_caps_bytes": list(result.unsolved_caps), "stopped": result.stopped,
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


def _totals_text(strategy, counts) -> str:
    """All stages together: the plan's summary (`78n/0s/2f`: layers per recompute mode), and the layers per stage
    when uneven, repeats folded (`7 8x14 7`)."""
    layers = [c["layers"] for c in counts]
    totals = strategy.recompute.summary().removeprefix("per-stage ")
    if len(set(layers)) == 1:
        return totals
    runs = [(n, len(list(group))) for n, group in groupby(layers)]
    return totals + " (layers " + " ".join(f"{n}x{k}" if k > 1 else str(n) for n, k in runs) + ")"


PLAN_LAYOUTS = ("per stage", "totals", "below")  # widest first: _fitting_layout picks the first that fits


def frontier_table(model, result: Frontier, plan: str = "per stage") -> Table:
    """One row per frontier point, numbered; the plan as each stage's counts (`per stage`: `layers=none/sel/full`),
    as the totals over the stages (`totals`), or left out (`below`: plan_lines prints it under the table)."""
    table = Table(box=box.SIMPLE_HEAD, title="Memory-time frontier (fastest plan under each cap, verified)",
                  title_justify="left", show_edge=False, pad_edge=False)
    header = {"per stage": "per stage: layers=counts per mode", "totals": "plan (layers)", "below": None}[plan]
    for name in ("#", "cap GiB", "peak GiB", "step", "slower", "ms/GiB", "zero", *((header,) if header else ())):
        table.add_column(name, justify="left" if name == header else "right", no_wrap=True)
    fastest = min((p.step_seconds for p in result.points), default=0.0)
    for number, (row, point) in enumerate(zip(frontier_rows(model, result), result.points), 1):
        caps = _g(point.caps[0]) + (f" (+{len(point.caps) - 1})" if len(point.caps) > 1 else "")
        marginal = row["marginal_seconds_per_gib_saved"]
        cells = [str(number), caps, _g(point.peak_bytes),
                 format_seconds(point.step_seconds) + ("" if point.proven else " *"),
                 f"+{100 * (point.step_seconds / fastest - 1):.1f} %" if fastest else "-",
                 "-" if marginal is None else f"{1000 * marginal:.1f}", str(point.strategy.zero)]
        if plan == "per stage":
            cells.append(_stages_text(row["stages"]))
        elif plan == "totals":
            cells.append(_totals_text(point.strategy, row["stages"]))
        table.add_row(*cells)
    return table


def plan_lines(model, result: Frontier) -> list[str]:
    """`#1: 0n/0s/8f (8-9-9-6)`: each point's plan totals, for the `below` layout."""
    return [f"#{n}: {_totals_text(p.strategy, row['stages'])}"
            for n, (row, p) in enumerate(zip(frontier_rows(model, result), result.points), 1)]


def _fitting_layout(console, model, result: Frontier) -> str:
    """The widest plan layout whose table keeps every row on one line of the console."""
    for plan in PLAN_LAYOUTS[:-1]:
        if Console(width=10_000).measure(frontier_table(model, result, plan)).maximum <= console.width:
            return plan
    return PLAN_LAYOUTS[-1]


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


def frontier_line(result: Frontier) -> str:
    """The frontier in one line (for --quiet): its ends (peak -> step time) and the least memory any plan needs."""
    if not result.points:
        return "infeasible: no recompute plan of this strategy fits under the caps"
    first, last = result.points[0], result.points[-1]
    text = (f"frontier: {len(result.points)} plans, {_g(first.peak_bytes)} GiB -> "
            f"{format_seconds(first.step_seconds)} ... {_g(last.peak_bytes)} GiB -> "
            f"{format_seconds(last.step_seconds)}; "
            f"least memory {_g(result.least_bytes)} GiB")
    if result.infeasible_caps:
        text += f"; {len(result.infeasible_caps)} cap(s) below it"
    return text


def least_line(result: Frontier, confidence: float) -> str:
    """The least cap any plan fits under, said as what it is: at a confidence above 0 a plan fits when its peak's
    upper edge does (docs/confidence.md §1), so that cap is above the plan's peak, the point estimate the table
    shows."""
    solved = f"{result.solves} plan solves, {result.solve_seconds:.2f} s"
    if confidence <= 0:
        return f"least memory any plan of it needs: {_g(result.least_bytes)} GiB ({solved})"
    return (f"least memory any plan of it needs: {_g(result.least_bytes)} GiB, its peak's upper edge at "
            f"{100 * confidence:g} % (the table's peaks are point estimates, below their cap; --confidence 0 fits "
            f"those; {solved})")


def render_frontier(console, model, result: Frontier, degrees: str, confidence: float = 0.0) -> None:
    for line in assumed_lines(model):
        console.print(line)
    console.print(Text(f"Strategy: {degrees}", style="bold"))
    if result.uniform:
        console.print("uniform plans only: the trainer runs one recompute option on every layer, each priced in full "
                      "(--trainer any solves per-stage plans)")
    if result.least_bytes is not None:
        console.print(least_line(result, confidence))
    if result.points:
        layout = _fitting_layout(console, model, result)
        console.print(frontier_table(model, result, layout))
        for line in plan_lines(model, result) if layout == "below" else ():
            console.print(line, markup=False, highlight=False)
        if not all(p.proven for p in result.points):
            console.print("* the plan model stopped at its time limit: fastest found, not proven")
        codes = plan_codes(_shown_modes([c for row in frontier_rows(model, result) for c in row["stages"]]))
        plan = (f"per stage: its layers = how many run each recompute mode ({codes})" if layout == "per stage" else
                f"plan: layers per recompute mode over all stages, or the one mode of every layer ({codes}; layers "
                "per stage when uneven; --json or --csv has each stage)")
        console.print(f"{plan}. ms/GiB: step time added per GiB of peak saved by moving to the next tighter point. "
                      "cap (+n): n more caps of the sweep gave the same plan.")
        console.print()
        for line in frontier_chart(result):
            console.print(line, markup=False, highlight=False)
    for cap in result.infeasible_caps:
        console.print(Text(f"cap {_g(cap)} GiB: no plan fits", style="red"))
    if result.stopped:
        console.print(Text(f"{result.stopped}: {len(result.unsolved_caps)} cap(s) left unsolved "
                           f"({', '.join(_g(c) for c in result.unsolved_caps)} GiB)", style="yellow"))
    elif not result.complete:
        console.print(Text("a plan solve ran out of time before finding any plan: a cap above may be reported as "
                           "infeasible only because of that (raise --time-limit)", style="yellow"))


__all__ = ["frontier_document", "frontier_line", "least_line", "write_frontier_csv", "render_frontier",
           "frontier_table", "frontier_chart", "plan_lines", "frontier_rows"]
