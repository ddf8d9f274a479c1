"""The rich terminal report for `ndcp search`: assumptions and search space, the proof status, the top-K ranking,
the best strategy's memory per stage, and the nearest misses refused by memory.

Like the estimate report, it only formats the result objects the search returns (strategies priced by the full
estimators, refusal counts, bounds); it never re-estimates anything.
"""
from __future__ import annotations

from rich import box
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..rules import RULES
from ..solve.explain import unproven_hint
from ..solve.result import TIE
from ..space import DIMENSIONS, SearchSpace
from ..specs.device import ClusterSpec
from ..specs.model import ModelSpec
from ..specs.run import RunSpec
from ..specs.strategy_text import strategy_text
from ..specs.units import GIB
from .terminal import (assumptions_panel, format_bytes, format_seconds, gib, print_fit, print_memory, strategy_line,
                       throughput_line)

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
    modes = list(o.recompute_modes)
    if len(modes) == 1:
        pinned.append(f"recompute={modes[0]}")
    else:
        how = ("per stage: how many layers run each mode" if "per-layer" in result.method
               else "greedy per layer" if result.method == "greedy" else "uniform")
        searched.append(f"recompute {{{', '.join(modes)}}} ({how})")  # spaced: a long list wraps, never cut
    derived = [n for n in ("dp", "mbn") if n not in fixed]
    bound = (f"tp x cp <= {o.tp_cp_bound}" if o.tp_cp_bound
             else f"tp <= {space.cluster.device.devices_per_node} (one node)")
    refused = sum(result.refused.values())
    rows = [("searched", ", ".join(searched) + (f"; {' and '.join(derived)} follow" if derived else "")),
            ("pinned", ", ".join(pinned) or "nothing"),
            ("space", ("" if result.space_complete else "at least (the walk stopped at the time limit) ")
                      + f"{result.space_size:,} valid strategies"
                      + (" with uniform recompute (per-stage plans on top)" if result.method == "cp-sat per-layer" else "")
                      + f"; {refused:,} values refused by the rules; {bound}")]
    return rows


def assumptions_with_space(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, space: SearchSpace,
                           result) -> Panel:
    """The estimate report's Assumptions panel with the search space added."""
    panel = assumptions_panel(model, cluster, run)
    grid = panel.renderable
    for label, text in space_summary(model, space, result):
        grid.add_row(label, text)
    return panel


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


def equivalent_groups(strategies) -> list[tuple[int, object, list]]:
    """(rank of the first, the first, the rest) for each run of strategies at the same step time (within TIE): the
    ranking orders equal times by the canonical tie-break (solve/result.py rank_key), so the first is the one to
    show and the rest are equivalent plans that only cost more memory or more peers across nodes."""
    groups: list[tuple[int, object, list]] = []
    for rank, e in enumerate(strategies, 1):
        if groups and abs(e.step_seconds - groups[-1][1].step_seconds) <= TIE * groups[-1][1].step_seconds:
            groups[-1][2].append(e)
        else:
            groups.append((rank, e, []))
    return groups


def compact_degrees(strategy, ep: bool = True) -> str:
    """`tp4 pp1 cp1 dp128` (+ `ep8 etp1` for MoE models, `vpp4` when interleaved, cp_comm when cp > 1 is not p2p)."""
    s = strategy
    words = [f"tp{s.tp}", f"pp{s.pp}", f"cp{s.cp}", f"dp{s.dp}"]
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


def _same_cell(others: list) -> str:
    return f"+{len(others)}" if others else ""


def compact_ranking(result, ep: bool = True, width: int = 80) -> Table:
    """The ranking for consoles of at most COMPACT_WIDTH columns: degrees in one column (`tp4 pp1 cp1 dp128`),
    short headers, no number ever cut; `free` and `tok/s/GPU` only when they fit in `width`."""
    groups = equivalent_groups(result.strategies)

    def table(extra: tuple[str, ...]) -> Table:
        t = Table(title=_title(result, False), title_justify="left", box=box.SIMPLE_HEAD, show_edge=False,
                  pad_edge=False, padding=(0, 0),
                  caption="mb: micro-batch size x count; ≡ +n: n more plans at this step time", caption_justify="left")
        t.add_column("#", justify="right", no_wrap=True)
        t.add_column("degrees", no_wrap=False)  # the one column that may wrap, between its words
        for name in ("mb", "z", "sp", "recompute", "peak", *extra[:1], "step", "MFU%", *extra[1:], "≡"):
            t.add_column(name, justify="left" if name in ("mb", "sp", "recompute", "≡") else "right", no_wrap=True)
        for rank, e, others in groups:
            s, m, tm = e.strategy, e.memory, e.time
            cells = [str(rank), compact_degrees(s, ep), f"{s.mbs}x{s.mbn}", str(s.zero), _on_off(s.sp),
                     compact_recompute(s), gib(m.peak_bytes)]
            if extra:
                cells.append(gib(m.capacity_bytes - m.peak_bytes))
            cells += [format_seconds(tm.step_seconds), f"{100 * tm.mfu:.1f}"]
            if len(extra) > 1:
                cells.append(f"{tm.tokens_per_second_per_gpu:,.0f}")
            t.add_row(*cells, _same_cell(others), style="bold" if rank == 1 else None)
        return t

    for extra in (("free", "tok/s/GPU"), ("free",)):
        candidate = table(extra)
        if _natural_width(candidate) <= width:
            return candidate
    return table(())


def _natural_width(renderable) -> int:
    console = Console(width=10_000)
    return console.measure(renderable).maximum


def ranking_table(result, shares: bool = True, main: bool = True, ep: bool = True) -> Table:
    """The verified strategies in rank order, one row per step time (equivalent plans counted under ≡): degrees,
    batch split, sharding, memory, step time (`main`) and the step-time parts as % of the step (`shares`).
    `ep=False` leaves out the ep and ep% columns (dense models)."""
    degrees = ("tp", "pp", "cp", "dp", *(("ep", "etp") if ep else ()), "vpp")
    title = _title(result, shares) if main else "Step-time parts (% of step; comp = fwd+bwd)"
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                  collapse_padding=True)
    table.add_column("#", justify="right", no_wrap=True)
    if main:
        for name in degrees + ("mbs/mbn", "zero", "sp", "recompute"):
            table.add_column(name, justify="left" if name in ("mbs/mbn", "sp", "recompute") else "right",
                             no_wrap=True)
        for name in ("peak", "free", "step", "MFU%", "tok/s/GPU", "≡"):
            table.add_column(name, justify="left" if name == "≡" else "right", no_wrap=True)
    if shares:
        for name, _ in _shares(ep):
            table.add_column(name, justify="right", no_wrap=True, style="dim" if main else None)
    for rank, e, others in equivalent_groups(result.strategies):
        s, m, t = e.strategy, e.memory, e.time
        step = t.step_seconds
        cells = [str(rank)]
        if main:
            cells += [*(str(getattr(s, d)) for d in degrees), f"{s.mbs}/{s.mbn}", str(s.zero), _on_off(s.sp),
                      s.recompute.summary(), gib(m.peak_bytes), gib(m.capacity_bytes - m.peak_bytes),
                      format_seconds(step), f"{100 * t.mfu:.1f}", f"{t.tokens_per_second_per_gpu:,.0f}",
                      _same_cell(others)]
        if shares:
            cells += [_percent(sum(t.parts.get(p, 0.0) for p in names), step) for _, names in _shares(ep)]
        table.add_row(*cells, style="bold" if rank == 1 and main else None)
    return table


def _shares(ep: bool):
    return [(name, parts) for name, parts in TIME_SHARES if ep or name != "ep"]


def equivalent_lines(result, ep: bool = True) -> list[Text]:
    """One line per plan grouped under another row (same step time, more memory or more peers across nodes): its
    degrees and micro-batches, and its ZeRO, SP and recompute where they differ from the row's."""
    lines = []
    for rank, first, others in equivalent_groups(result.strategies):
        lead = first.strategy
        for e in others:
            s = e.strategy
            words = [compact_degrees(s, ep), f"mb {s.mbs}x{s.mbn}"]
            words += [f"z{s.zero}"] if s.zero != lead.zero else []
            words += [f"sp {_on_off(s.sp)}"] if s.sp != lead.sp else []
            words += [compact_recompute(s)] if s.recompute != lead.recompute else []
            lines.append(Text(f"≡ #{rank}: {' '.join(words)}, peak {gib(e.memory.peak_bytes)} GiB", style="dim"))
    return lines


def print_ranking(console: Console, result, ep: bool = True) -> None:
    """At most COMPACT_WIDTH columns: the compact ranking and the step-time shares below it; wider: one table when
    it fits, else the main table and the shares below. Then the equivalent plans, one line each."""
    shares = ranking_table(result, main=False, ep=ep)
    if console.width <= COMPACT_WIDTH:
        console.print(compact_ranking(result, ep, console.width))
        console.print(shares)
    else:
        full = ranking_table(result, ep=ep)
        if _natural_width(full) <= console.width:
            console.print(full)
        else:
            main = ranking_table(result, shares=False, ep=ep)
            console.print(main if _natural_width(main) <= console.width
                          else compact_ranking(result, ep, console.width))
            console.print(shares)
    for line in equivalent_lines(result, ep):
        console.print(line)


def best_detail(console: Console, result, devices_per_node: int, layers: int | None = None) -> None:
    best = result.best
    console.print(Text("Best strategy", style="bold underline"))
    console.print(strategy_line(best.strategy, layers))
    print_memory(console, best.memory)
    print_fit(console, best.memory, devices_per_node)
    console.print(throughput_line(best.time))


def miss_line(miss, best) -> Text:
    """`tp=4 pp=8 ... would be 11 % faster; stage 0 needs 86.3 GiB of 80.0`."""
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
    return text


def render_search(console: Console, model: ModelSpec, cluster: ClusterSpec, run: RunSpec, space: SearchSpace,
                  result) -> None:
    """The full `ndcp search` report."""
    console.print(assumptions_with_space(model, cluster, run, space, result))
    console.print(result_panel(result))
    if result.strategies:
        print_ranking(console, result, ep=model.moe is not None)
        console.print()
        best_detail(console, result, cluster.device.devices_per_node, model.layers)
    if result.nearest_misses:
        console.print()
        title = "Nearest misses (faster, but over the memory capacity)" if result.best is not None else \
            "Nearest misses (the fastest strategies, all over the memory capacity)"
        console.print(Text(title, style="bold underline"))
        for miss in result.nearest_misses:
            console.print(miss_line(miss, result.best))


def one_line(result) -> str:
    """The result in one line (for --quiet)."""
    best = result.best
    if best is None:
        return f"{result.status}: {result.explanation or 'no strategy found'}"
    t, m = best.time, best.memory
    proof = "proven optimal" if result.status == "optimal" else "heuristic, not proven" \
        if result.status == "heuristic" else (
        f"gap {100 * result.gap:.2f} % to bound {format_seconds(result.lower_bound_seconds)}")
    hint = f" ({unproven_hint(result)})" if result.status == "feasible" else ""
    return (f"{result.status}: {degrees_text(best.strategy)}; step {format_seconds(t.step_seconds)}, "
            f"MFU {100 * t.mfu:.1f}%, peak {format_bytes(m.peak_bytes)} of {format_bytes(m.capacity_bytes)}; "
            f"{proof} in {result.solve_seconds:.2f} s{hint}")


__all__ = ["render_search", "ranking_table", "print_ranking", "result_panel", "assumptions_with_space", "miss_line",
           "one_line", "degrees_text", "TIME_SHARES", "compact_ranking", "equivalent_groups", "compact_degrees",
           "COMPACT_WIDTH"]
