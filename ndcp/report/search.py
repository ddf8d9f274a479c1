"""The rich terminal report for `ndcp search`: assumptions and search space, the proof status, the top-K ranking,
the best strategy's memory per stage, and the nearest misses refused by memory.

Like the estimate report, it only formats the result objects the search returns (strategies priced by the full
estimators, refusal counts, bounds); it never re-estimates anything.
"""
from __future__ import annotations

from typing import NamedTuple

from rich import box
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..estimate.evidence import Evidence, plan_evidence
from ..rules import RULES
from ..solve.explain import unproven_hint
from ..solve.result import TIE
from ..space import DIMENSIONS, SearchSpace
from ..specs.device import ClusterSpec
from ..specs.model import ModelSpec
from ..specs.run import RunSpec
from ..specs.strategy_text import strategy_text
from ..specs.units import GIB
from ..trainers import trainer_named
from .terminal import (assumptions_panel, format_bytes, format_seconds, gib, other_note, print_fit, print_memory,
                       strategy_line, throughput_line)
from .bands import missing_evidence_line
from .notation import Breakable, plan_legend

# Step-time columns of the ranking: header -> the time parts (estimate/time.py names) it adds up.
TIME_SHARES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("comp", ("compute_forward", "compute_backward")),
    ("recomp", ("recompute",)),
    ("tp", ("tp_comm",)),
    ("cp", ("cp_comm",)),
    ("ep", ("ep_comm",)),
    ("dp", ("dp_comm",)),
    ("pp", ("pp_comm",)),
    ("bubble", ("bubble",)),
)
STATUS_STYLES = {"optimal": "bold green", "feasible": "bold yellow", "unknown": "bold yellow",
                 "heuristic": "bold yellow", "infeasible": "bold red"}


# -- small helpers -----------------------------------------------------------------------------------------------
def _on_off(value: bool) -> str:
    return "on" if value else "off"


def _percent(part: float, whole: float, digits: int = 1) -> str:
    return f"{100 * part / whole:.{digits}f}" if whole else "-"


def degrees_text(strategy) -> str:
    """`tp=4 pp=2 cp=1 dp=1 vpp=1 mbs=1 mbn=32 zero=1 sp=on recompute=selective` (ep and etp when used)."""
    return strategy_text(strategy, experts_if_used=True)


def space_summary(model: ModelSpec, space: SearchSpace, result) -> list[tuple[str, str]]:
    """Rows for the assumptions panel: which dimensions are searched, pinned or bounded, and the space's size."""
    o = space.options
    fixed = dict(o.fix)
    bounds = dict(o.max)
    searched, pinned = [], []
    for name in DIMENSIONS:
        if name in ("dp", "mbn") and name not in fixed:
            continue  # derived: dp takes the rest of the GPUs, mbn the rest of the global batch
        if name in ("ep", "etp") and model.moe is None:
            pinned.append(f"{name}=1 (dense model)")
        elif name == "zero":
            zeros = [z for z in o.zero_stages if space._allowed("zero", z)]
            (pinned if len(zeros) == 1 else searched).append(
                f"zero={zeros[0]}" if len(zeros) == 1 else f"zero {{{','.join(map(str, zeros))}}}")
        elif name in fixed:
            pinned.append(f"{name}={fixed[name]}")
        else:
            searched.append(f"{name}<={bounds[name]}" if name in bounds else name)
    sp_fixed = fixed.get("sp")
    sps = [s for s in o.sp_choices if sp_fixed is None or int(s) == sp_fixed]
    if len(sps) == 1:
        pinned.append(f"sp={_on_off(sps[0])}")
    else:
        searched.append("sp {off,on} (on only with tp>1)")
    modes = list(space.inner_choices(1)[2])  # the options this model and trainer can run (rule recompute_modules)
    if len(modes) == 1:
        pinned.append(f"recompute={modes[0]}")
    else:
        how = ("per stage: how many layers run each mode" if "per-layer" in result.method
               else "greedy per layer" if result.method == "greedy" else "uniform")
        searched.append(f"recompute {{{', '.join(modes)}}} ({how})")  # spaced: a long list wraps, never cut
    derived = [n for n in ("dp", "mbn") if n not in fixed]
    bound = (f"tp x cp <= {o.tp_cp_bound}" if o.tp_cp_bound
             else f"tp <= {space.cluster.domain_ranks} (one scale-up domain)")
    refused = sum(result.refused.values())
    rows = [("searched", ", ".join(searched) + (f"; {' and '.join(derived)} follow" if derived else "")),
            ("pinned", ", ".join(pinned) or "nothing"),
            ("space", ("" if result.space_complete else "at least (the walk stopped at the time limit) ")
                      + f"{result.space_size:,} valid strategies"
                      + (" with uniform recompute (per-stage plans on top)"
                         if result.method == "cp-sat per-layer" else "")
                      + f"; {refused:,} values refused by the rules; {bound}")]
    return rows


def planned_for(trainer: str | None, run: RunSpec) -> str:
    """The assumptions row saying whose plans the search returns (ndcp.api.PlannedSearch.trainer; None: any)."""
    if trainer is None:
        return (f"any trainer (--trainer any): every plan ndcp prices, with {run.trainer}'s behaviour; its best "
                f"{run.trainer} plan is shown beside")
    runs = trainer_named(trainer)
    recompute = "recompute per stage" if runs.recompute == "per-stage" else "one recompute option on every layer"
    return (f"{trainer}: only plans it runs as --emit writes them ({recompute}; schedules "
            f"{', '.join(runs.schedules)}); --trainer any searches every plan")


def assumptions_with_space(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, space: SearchSpace,
                           result, trainer: str | None) -> Panel:
    """The estimate report's Assumptions panel with the search space added, and whose plans it holds."""
    panel = assumptions_panel(model, cluster, run)
    grid = panel.renderable
    grid.add_row("planned for", planned_for(trainer, run))
    for label, text in space_summary(model, space, result):
        grid.add_row(label, text)
    return panel


# An optimal answer's residual (SearchResult.proven_within) is shown from this fraction on: below it, the tie tolerance
# and the plan tolerance (1e-4) it always allows.
WITHIN_SHOWN = 1e-4


def status_text(result) -> Text:
    """The verdict: optimal with its certificate, feasible with gap and bound, or infeasible with why."""
    status = result.status
    text = Text(status, style=STATUS_STYLES.get(status, "bold"))
    best = result.best
    if status == "optimal" and best is not None:
        method = "every candidate priced" if result.method == "exhaustive" else (
            f"certificate: the solver's bound on every unverified strategy is >= the #{len(result.strategies)} "
            "verified step time")
        text.append(f" — proven fastest, step {format_seconds(best.step_seconds)} ({method})")
        if (result.proven_within or 0.0) > WITHIN_SHOWN:
            text.append(f"; within {100 * result.proven_within:.2f} %: the per-layer plan model's time rounding, a "
                        f"plan up to that much faster may exist among those it did not verify (proven bound "
                        f"{format_seconds(result.lower_bound_seconds)})")
    elif status == "heuristic" and best is not None:
        text.append(f" — fastest greedy plan, step {format_seconds(best.step_seconds)}: the reference planner's "
                    "greedy recompute, not proven and with no bound (--recompute per-layer gives the proven optimum)")
    elif status == "feasible" and best is not None:
        stop = "interrupted" if result.interrupted else "time limit"
        text.append(f" — best verified step {format_seconds(best.step_seconds)}, proven bound "
                    f"{format_seconds(result.lower_bound_seconds)}, gap {100 * result.gap:.2f} % ({stop}; "
                    f"{unproven_hint(result)})")
    elif status == "unknown":
        again = "" if result.interrupted else "; raise --time-limit"
        text.append(f" — {result.explanation or 'no strategy verified before the time limit'}: nothing is known to "
                    f"fit, nor proven not to{again}")
    else:
        text.append(f" — {result.explanation or 'no strategy fits'}")
    return text


def refusal_table(result) -> Table | None:
    if not result.refused and not result.over_memory:
        return None
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, title="Refused", title_justify="left")
    table.add_column("rule")
    table.add_column("count", justify="right")
    table.add_column("requires")
    for name, count in sorted(result.refused.items(), key=lambda kv: (-kv[1], kv[0])):
        table.add_row(name, f"{count:,}", RULES.get(name, name))
    if result.over_memory:
        table.add_row("memory", f"{result.over_memory:,}", "priced by the estimators and dropped: peak over capacity")
    return table


def result_panel(result) -> Panel:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    grid.add_row("status", status_text(result))
    grid.add_row("method", "exhaustive (every valid strategy priced)" if result.method == "exhaustive"
                 else "greedy per-stage recompute on every candidate, priced by the full estimators (heuristic)"
                 if result.method == "greedy" else "CP-SAT relaxation + verification with the full estimators")
    grid.add_row("time", f"{result.solve_seconds:.2f} s pricing every strategy" if result.method == "exhaustive"
                 else f"{result.solve_seconds:.2f} s in all, {result.verify_seconds:.2f} s of it verifying")
    calls = f"{result.solver_calls} solver call{'s' if result.solver_calls != 1 else ''}, " \
        if result.method != "exhaustive" else ""
    grid.add_row("work", f"{calls}{result.verified:,} of {result.space_size:,} strategies verified, "
                         f"{result.over_memory:,} dropped for memory")
    parts: list = [grid]
    refusals = refusal_table(result)
    if refusals is not None:
        parts.append(refusals)
    style = {"optimal": "green", "feasible": "yellow"}.get(result.status, "red")
    return Panel(Group(*parts), title="Result", title_align="left", border_style=style)


COMPACT_WIDTH = 100  # at most this many columns: the compact ranking (short headers, degrees in one column)
TIE_MARK = "≡"
TIE_LEGEND = (f"{TIE_MARK}: the same step time as the plan above (equal times rank by least peak memory, then fewest "
              "peers across scale-up domains)")


def tied_with_previous(strategies) -> list[bool]:
    """For each ranked strategy, whether its step time equals the one above it (within TIE): the ranking orders
    equal times by the canonical tie-break (solve/result.py rank_key), so a tied plan only costs more memory or
    more peers across scale-up domains than the one above."""
    return [rank > 0 and abs(e.step_seconds - strategies[rank - 1].step_seconds)
            <= TIE * strategies[rank - 1].step_seconds for rank, e in enumerate(strategies)]


def _tie_cells(strategies) -> list[tuple[str, ...]]:
    """Per row, the tie mark's cell: `("≡",)` or `("",)`, or `()` when no row is tied (no mark column)."""
    ties = tied_with_previous(strategies)
    return [((TIE_MARK if tied else ""),) if any(ties) else () for tied in ties]


def _add_tie_column(table: Table, strategies) -> None:
    if any(tied_with_previous(strategies)):
        table.add_column("", no_wrap=True)


def _caption(strategies, *lines: str) -> str:
    """The ranking's legend: `lines`, and the tie mark's when a row carries it."""
    return "\n".join(lines + ((TIE_LEGEND,) if any(tied_with_previous(strategies)) else ()))


def compact_degrees(strategy, ep: bool = True) -> str:
    """`tp4 pp1 cp1 dp128` (+ `shard8` under HSDP, `ep8 etp1` for MoE models, `vpp4` when interleaved, cp_comm when
    cp > 1 is not p2p)."""
    s = strategy
    words = [f"tp{s.tp}", f"pp{s.pp}", f"cp{s.cp}", f"dp{s.dp}"] + ([f"shard{s.dp_shard}"] if s.dp_shard else [])
    if ep:
        words += [f"ep{s.ep}", f"etp{s.etp}"]
    if s.vpp > 1:
        words.append(f"vpp{s.vpp}")
    if s.cp > 1 and s.cp_comm != "p2p":
        words.append(s.cp_comm)
    return " ".join(words)


def compact_recompute(strategy) -> str:
    """The recompute summary without the `per-stage ` prefix (the n/s/f counts say it is a per-stage plan)."""
    return strategy.recompute.summary().removeprefix("per-stage ")


def _title(result, shares: bool) -> str:
    return (f"Top {len(result.strategies)} strategies, fastest first (memory in GiB"
            + ("; step-time parts in % of the step)" if shares else ")"))


class CompactLayout(NamedTuple):
    """What the compact ranking shows: the recompute plans in their column (else listed under the table) and the
    optional columns (`free`, `tok/s/GPU`)."""

    plans_inline: bool
    extras: tuple[str, ...]


# Widest first: compact_layout picks the first whose table fits the console.
COMPACT_LAYOUTS = tuple(CompactLayout(inline, extras) for inline in (True, False)
                        for extras in (("free", "tok/s/GPU"), ("free",), ()))


def compact_ranking(result, ep: bool = True, layout: CompactLayout = COMPACT_LAYOUTS[0]) -> Table:
    """The ranking for consoles of at most COMPACT_WIDTH columns: degrees in one column (`tp4 pp1 cp1 dp128`),
    short headers, no number ever cut; the columns `layout` names."""
    extras = layout.extras
    t = Table(title=_title(result, False), title_justify="left", box=box.SIMPLE_HEAD, show_edge=False,
              pad_edge=False, padding=(0, 0), caption_justify="left",
              caption=_caption(result.strategies, "mb: micro-batch size x count" + (
                  "" if layout.plans_inline else "; recompute plans under the table")))
    t.add_column("#", justify="right", no_wrap=True)
    _add_tie_column(t, result.strategies)
    t.add_column("degrees", no_wrap=False)  # the one column that may wrap, between its words
    names = ("mb", "z", "sp", *(("recompute",) if layout.plans_inline else ()), "peak", *extras[:1], "step", "MFU%",
             *extras[1:])
    for name in names:
        t.add_column(name, justify="left" if name in ("mb", "sp", "recompute") else "right", no_wrap=True,
                     min_width=len(name))
    for rank, (e, tie) in enumerate(zip(result.strategies, _tie_cells(result.strategies)), 1):
        s, m, tm = e.strategy, e.memory, e.time
        cells = [str(rank), *tie, compact_degrees(s, ep), f"{s.mbs}x{s.mbn}", str(s.zero), _on_off(s.sp),
                 *((compact_recompute(s),) if layout.plans_inline else ()), gib(m.peak_bytes)]
        if extras:
            cells.append(gib(m.capacity_bytes - m.peak_bytes))
        cells += [format_seconds(tm.step_seconds), f"{100 * tm.mfu:.1f}"]
        if len(extras) > 1:
            cells.append(f"{tm.tokens_per_second_per_gpu:,.0f}")
        t.add_row(*cells, style="bold" if rank == 1 else None)
    return t


def compact_layout(result, ep: bool, width: int) -> CompactLayout:
    """The widest of COMPACT_LAYOUTS whose ranking keeps every row on one line of `width` columns (the last
    otherwise: its degrees then wrap between words)."""
    return next((layout for layout in COMPACT_LAYOUTS
                 if _natural_width(compact_ranking(result, ep, layout)) <= width), COMPACT_LAYOUTS[-1])


def _natural_width(renderable) -> int:
    console = Console(width=10_000)
    return console.measure(renderable).maximum


def ranking_table(result, shares: bool = True, main: bool = True, ep: bool = True) -> Table:
    """The verified strategies in rank order, numbered 1..K, tied step times marked: degrees, batch split,
    sharding, memory, step time (`main`) and the step-time parts as % of the step (`shares`). `ep=False` leaves
    out the ep and ep% columns (dense models)."""
    degrees = ("tp", "pp", "cp", "dp", *(("ep", "etp") if ep else ()), "vpp")
    title = _title(result, shares) if main else "Step-time parts (% of step; comp = fwd+bwd)"
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                  collapse_padding=True, caption=_caption(result.strategies) if main else None,
                  caption_justify="left")
    table.add_column("#", justify="right", no_wrap=True)
    if main:
        _add_tie_column(table, result.strategies)
        for name in degrees + ("mbs/mbn", "zero", "sp", "recompute"):
            table.add_column(name, justify="left" if name in ("mbs/mbn", "sp", "recompute") else "right",
                             no_wrap=True)
        for name in ("peak", "free", "step", "MFU%", "tok/s/GPU"):
            table.add_column(name, justify="right", no_wrap=True)
    if shares:
        for name, _ in _shares(ep):
            table.add_column(name, justify="right", no_wrap=True, style="dim" if main else None)
    for rank, (e, tie) in enumerate(zip(result.strategies, _tie_cells(result.strategies)), 1):
        s, m, t = e.strategy, e.memory, e.time
        step = t.step_seconds
        cells = [str(rank)]
        if main:
            cells += [*tie, *(str(getattr(s, d)) for d in degrees), f"{s.mbs}/{s.mbn}", str(s.zero), _on_off(s.sp),
                      s.recompute.summary(), gib(m.peak_bytes), gib(m.capacity_bytes - m.peak_bytes),
                      format_seconds(step), f"{100 * t.mfu:.1f}", f"{t.tokens_per_second_per_gpu:,.0f}"]
        if shares:
            cells += [_percent(sum(t.parts.get(p, 0.0) for p in names), step) for _, names in _shares(ep)]
        table.add_row(*cells, style="bold" if rank == 1 and main else None)
    return table


def _shares(ep: bool):
    return [(name, parts) for name, parts in TIME_SHARES if ep or name != "ep"]


def _print_compact(console: Console, result, ep: bool) -> bool:
    """The compact ranking that fits the console; whether its recompute plans are left for under the tables."""
    layout = compact_layout(result, ep, console.width)
    console.print(compact_ranking(result, ep, layout))
    return not layout.plans_inline


def print_ranking(console: Console, result, ep: bool = True) -> None:
    """At most COMPACT_WIDTH columns: the compact ranking and the step-time shares below it; wider: one table when
    it fits, else the main table and the shares below. Then the recompute plans the ranking had no room for, one
    line each (wrapped after a `/`), and the plan notation's legend when a plan is per stage."""
    shares = ranking_table(result, main=False, ep=ep)
    full = ranking_table(result, ep=ep)
    main = ranking_table(result, shares=False, ep=ep)
    plans_below = False
    if console.width > COMPACT_WIDTH and _natural_width(full) <= console.width:
        console.print(full)
    else:
        if console.width > COMPACT_WIDTH and _natural_width(main) <= console.width:
            console.print(main)
        else:
            plans_below = _print_compact(console, result, ep)
        console.print(shares)
    if plans_below:
        console.print(Text("Recompute plans", style="bold"))
        for rank, e in enumerate(result.strategies, 1):
            label = f"#{rank} "
            console.print(Breakable(Text(label + compact_recompute(e.strategy)), indent=len(label)))
    legend = plan_legend(e.strategy.recompute for e in result.strategies)
    if legend is not None:
        console.print(legend)


def best_detail(console: Console, result, devices_per_node: int, layers: int | None = None,
                evidence: Evidence | None = None) -> None:
    """The best strategy: its memory per stage, fit verdict and step time (with their bands: `evidence`)."""
    best = result.best
    console.print(Text("Best strategy", style="bold underline"))
    console.print(Breakable(strategy_line(best.strategy, layers)))
    print_memory(console, best.memory)
    console.print(other_note(best.memory))
    print_fit(console, best.memory, devices_per_node, evidence)
    console.print(throughput_line(best.time, evidence))
    if (missing := missing_evidence_line(evidence)) is not None:
        console.print(missing)


def miss_line(miss, best) -> Text:
    """`tp=4 pp=8 ... would be 11 % faster; stage 0 needs 86.3 GiB of 80.0` (at a confidence, also the most that
    fits at it: `(73.4 at 90 %)`)."""
    m = miss.memory
    text = Text(degrees_text(miss.strategy), style="cyan")
    if best is not None and best.step_seconds:
        faster = 100 * (best.step_seconds - miss.step_seconds) / best.step_seconds
        text.append(f" would be {faster:.0f} % faster ({format_seconds(miss.step_seconds)})")
    else:
        text.append(f" would take {format_seconds(miss.step_seconds)}")
    digits = 1 if m.capacity_bytes >= 10 * GIB else 2
    text.append(f"; stage {m.peak_stage} needs {m.peak_bytes / GIB:.{digits}f} GiB of "
                f"{m.capacity_bytes / GIB:.{digits}f}", style="red")
    if m.margin_bytes:
        text.append(f" ({m.fit_bytes / GIB:.{digits}f} at {100 * m.confidence:g} %)", style="red")
    return text


def render_search(console: Console, model: ModelSpec, cluster: ClusterSpec, run: RunSpec, space: SearchSpace,
                  result, trainer: str | None) -> None:
    """The full `ndcp search` report; `trainer`: whose plans it holds (None: any trainer's); the best strategy's
    bands at the run's confidence."""
    console.print(assumptions_with_space(model, cluster, run, space, result, trainer))
    console.print(result_panel(result))
    if result.strategies:
        print_ranking(console, result, ep=model.moe is not None)
        console.print()
        best_detail(console, result, cluster.device.devices_per_node, model.layers,
                    plan_evidence(model, cluster.device.name, run, result.best.strategy, run.confidence))
    if result.nearest_misses:
        console.print()
        title = "Nearest misses (faster, but over the memory capacity)" if result.best is not None else \
            "Nearest misses (the fastest strategies, all over the memory capacity)"
        console.print(Text(title, style="bold underline"))
        for miss in result.nearest_misses:
            console.print(Breakable(miss_line(miss, result.best)))


def one_line(result) -> str:
    """The result in one line (for --quiet)."""
    best = result.best
    if best is None:
        return f"{result.status}: {result.explanation or 'no strategy found'}"
    t, m = best.time, best.memory
    within = result.proven_within or 0.0
    proof = ("proven optimal" + (f" within {100 * within:.2f} %" if within > WITHIN_SHOWN else "")
             ) if result.status == "optimal" else "heuristic, not proven" if result.status == "heuristic" else (
        f"gap {100 * result.gap:.2f} % to bound {format_seconds(result.lower_bound_seconds)}")
    hint = f" ({unproven_hint(result)})" if result.status == "feasible" else ""
    return (f"{result.status}: {degrees_text(best.strategy)}; step {format_seconds(t.step_seconds)}, "
            f"MFU {100 * t.mfu:.1f}%, peak {format_bytes(m.peak_bytes)} of {format_bytes(m.capacity_bytes)}; "
            f"{proof} in {result.solve_seconds:.2f} s{hint}")


__all__ = ["render_search", "ranking_table", "print_ranking", "result_panel", "assumptions_with_space", "miss_line",
           "one_line", "degrees_text", "TIME_SHARES", "compact_ranking", "compact_layout", "tied_with_previous",
           "compact_degrees", "COMPACT_WIDTH", "COMPACT_LAYOUTS", "CompactLayout", "TIE_MARK"]
