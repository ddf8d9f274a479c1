"""Rich terminal reports for `ndcp estimate` (and, through the helpers, the search report).

Reports only format the result objects the estimators return: they group and divide numbers for display but
never re-estimate anything.
"""
from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from rich import box
from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..estimate.attention_kernels import kernel_basis
from ..estimate.host_link import offload_copy_bandwidth
from ..estimate.reserve import FRAGMENTATION_FRACTION
from ..specs.device import PRESETS, ClusterSpec, DeviceSpec
from ..specs.model import ModelSpec
from ..specs.run import RunSpec
from ..specs.pipeline_layout import megatron_layout
from ..specs.strategy import Strategy
from ..specs.strategy_text import strategy_text
from ..estimate.evidence import Evidence, plan_evidence
from .bands import missing_evidence_line, peak_band_text, step_band_text
from .formats import format_bytes, format_count, format_rate, format_seconds, gib, nodes_text
from .notation import Breakable, plan_legend

# Display groups of the memory parts (estimate/memory.py names); anything not listed falls into "other".
MEMORY_GROUPS: dict[str, tuple[str, ...]] = {
    "parameters": ("parameters",),
    # a torchtitan pipeline stage's states not yet (or no longer) held at its peak, negative: mostly the unsharded
    # gradient buffer (estimate/held_states.py)
    "gradients": ("gradients", "unheld_states"),
    "optimizer": ("optimizer_states",),
    "activations": ("activations",),
}
GROUP_COLOURS = {"parameters": "cyan", "gradients": "magenta", "optimizer": "yellow", "activations": "green",
                 "other": "bright_black"}
GROUP_ORDER = ("parameters", "gradients", "optimizer", "activations", "other")
# One glyph per group, so the bars read without colour (piped output, NO_COLOR); free space is FREE_GLYPH.
GROUP_GLYPHS = {"parameters": "█", "gradients": "▓", "optimizer": "▄", "activations": "▚", "other": "▀"}
FREE_GLYPH = "░"
SUMMARY_STAGES = 8  # pipelines with more stages show the first, the last and the peak stage, the rest grouped

TIME_PART_LABELS = {
    "compute_forward": "compute (forward)",
    "compute_backward": "compute (backward)",
    "recompute": "recompute",
    "tp_comm": "TP communication",
    "cp_comm": "CP communication",
    "ep_comm": "EP communication",
    "dp_comm": "DP communication",
    "pp_comm": "PP communication",
    "bubble": "pipeline bubble",
    "optimizer": "optimizer step",
    "step_costs": "per-step costs",
    "grad_passes": "FSDP gradient passes",
}


def group_parts(parts: Mapping[str, int]) -> dict[str, int]:
    """Sum a stage's memory parts into the display groups (parameters/gradients/optimizer/activations/other)."""
    grouped = {g: 0 for g in GROUP_ORDER}
    owner = {part: group for group, names in MEMORY_GROUPS.items() for part in names}
    for name, value in parts.items():
        grouped[owner.get(name, "other")] += int(value)
    return grouped


def other_parts(parts: Mapping[str, int]) -> dict[str, int]:
    """The parts that make up the "other" group, by name."""
    listed = {p for names in MEMORY_GROUPS.values() for p in names}
    return {k: int(v) for k, v in parts.items() if k not in listed}


def memory_bar(groups: Mapping[str, int], capacity: int, scale: int | None = None, width: int = 32) -> Text:
    """One horizontal bar of exactly `width` cells: coloured blocks per group, dim free space up to the capacity,
    and a red marker at the capacity when the groups exceed it. `scale` (bytes for the full width) defaults to
    max(capacity, total); when it exceeds the capacity one cell is kept for the marker."""
    total = sum(groups.values())
    scale = max(scale or 0, capacity, total, 1)
    inner = width - 1 if scale > capacity and width > 1 else width
    blocks = Text()
    cumulative, position = 0, 0
    for group in GROUP_ORDER:
        value = groups.get(group, 0)
        if value <= 0:
            continue
        cumulative += value
        end = min(inner, round(cumulative / scale * inner))
        if end > position:
            blocks.append(GROUP_GLYPHS[group] * (end - position), style=GROUP_COLOURS[group])
            position = end
    cap_column = min(inner, round(capacity / scale * inner))
    if position < cap_column:
        blocks.append(FREE_GLYPH * (cap_column - position), style="dim")
        position = cap_column
    if total > capacity and inner < width:
        left, right = blocks.divide([cap_column]) if cap_column < len(blocks) else (blocks, Text())
        bar = Text()
        bar.append_text(left)
        bar.append("┃", style="bold red")
        bar.append_text(right)
        position += 1
    else:
        bar = blocks
    if position < width:
        bar.append(" " * (width - position))
    return bar


def memory_bars(stage_parts: Sequence[Mapping[str, int]], capacity: int, width: int = 32) -> list[Text]:
    """Bars for several stages (or candidate strategies) on one common scale, so they compare at a glance."""
    grouped = [group_parts(parts) for parts in stage_parts]
    scale = max([capacity] + [sum(g.values()) for g in grouped])
    return [memory_bar(g, capacity, scale, width) for g in grouped]


def legend() -> Text:
    text = Text()
    for i, group in enumerate(GROUP_ORDER):
        if i:
            text.append("  ")
        text.append(f"{GROUP_GLYPHS[group]} ", style=GROUP_COLOURS[group])
        text.append(group)
    text.append("  ")
    text.append(f"{FREE_GLYPH} ", style="dim")
    text.append("free")
    return text


# -- report sections ---------------------------------------------------------------------------------------------
def assumptions_panel(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, capacity_bytes: int | None = None) -> Panel:
    """What the estimate assumes: model, devices, network, memory budget and numerics."""
    d = cluster.device
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    size = format_count(model.parameters) + " parameters"
    if model.active_parameters != model.parameters:
        size += f", {format_count(model.active_parameters)} active"
    shape = f"{model.layers} layers, hidden {model.hidden}, {model.heads} heads / {model.num_kv_heads} KV"
    if model.moe:
        shape += f", {model.moe.experts} experts top-{model.moe.top_k}"
        if model.moe.shared_experts:
            shape += f" + {model.moe.shared_experts} shared"
    table.add_row("model", f"{model.name}: {size}; {shape}")
    for line in model.report_assumptions:
        table.add_row("assumed", Text(line))
    table.add_row("batch", f"global batch {run.global_batch} x sequence {run.seq_len} "
                           f"= {run.global_batch * run.seq_len:,} tokens per step")
    table.add_row("devices", f"{cluster.count} x {d.name} ({nodes_text(cluster)}); {d.peak_flops / 1e12:g} TFLOP/s "
                             f"peak, HBM {d.hbm_bandwidth / 1e12:g} TB/s")
    table.add_row("network", network_line(cluster))
    capacity = capacity_bytes if capacity_bytes is not None else run.capacity(d.memory_bytes)
    cap = f"cap {format_bytes(run.memory_cap_bytes)}" if run.memory_cap_bytes else "no cap"
    if run.headroom_fraction:
        cap += (f", headroom {run.headroom_fraction:.0%} ({format_bytes(run.headroom_bytes(d.memory_bytes))} kept "
                "free)")
    fragmentation = f"allocator fragmentation {FRAGMENTATION_FRACTION:.0%} of activations"
    if run.reserve_bytes is not None:
        reserve = f"reserve {format_bytes(run.reserve_bytes)} (--reserve) + {fragmentation}"
    else:
        reserve = f"reserve per stage: CUDA context, cuBLAS workspaces, NCCL buffers per process group, {fragmentation}"
    table.add_row("memory", f"device {format_bytes(d.memory_bytes)}, {cap} -> capacity {format_bytes(capacity)} "
                            f"per device; {reserve}")
    table.add_row("host", host_assumption(cluster))
    if not d.calibrated:  # the default ceiling, or one a source states (Blackwell: a published GEMM benchmark)
        basis = ("default" if d.compute_efficiency == DeviceSpec.compute_efficiency else "from the device's source")
        table.add_row("calibration", f"{d.name}: compute efficiency not calibrated on measured runs ({basis} "
                                     f"{d.compute_efficiency:g})")
    ceiling = (f"FP8 ceiling {d.fp8_ceiling:g}, fitted" if d.fp8_calibrated
               else f"FP8 ceiling assumed = BF16 {d.fp8_ceiling:g}, no FP8 run fitted")
    numerics = (f"fp8 linear-layer GEMMs ({run.fp8_recipe} scaling; {ceiling}), bf16 parameters/"
                f"activations" if run.fp8 else f"{run.precision} parameters/activations")
    flash = f"on ({kernel_basis(d, run.attention_kernel)})" if run.flash_attention else "off"
    table.add_row("numerics", f"{numerics}, {run.grad_dtype} gradients, "
                              f"{run.optimizer} optimizer ({run.optimizer_state_dtype} moments); flash attention "
                              f"{flash}; "
                              f"{run.trainer} memory behaviour; MFU counts {run.mfu_convention} attention")
    return Panel(table, title="Assumptions", title_align="left", border_style="blue")


def network_line(cluster: ClusterSpec) -> str:
    """The two links (specs/device.py): scale-up inside a domain of the job's consecutive ranks, scale-out across,
    with its taper between pods when the cluster has pods."""
    d = cluster.device
    line = (f"scale-up {format_rate(d.intra_node_bandwidth)} inside a domain of {cluster.domain_ranks} ranks, "
            f"scale-out {format_rate(d.inter_node_bandwidth)} per device, one way")
    if d.pod_size and d.oversubscription > 1:
        line += f"; {d.oversubscription:g}:1 oversubscribed between pods of {cluster.pod_ranks} ranks"
    return line


def host_assumption(cluster: ClusterSpec) -> str:
    """The host memory assumed for offloaded activations and optimizer states, per device and per node, and where
    the figure comes from: the device's `host_memory_bytes` (a preset's, ndcp/specs/device.py, or a device file's);
    and the bandwidth the shared host links leave an offloading device (estimate/host_link.py)."""
    d = cluster.device
    source = (f"the {d.name} preset's host_memory_bytes, ndcp/specs/device.py; a device file sets its own"
              if PRESETS.get(d.name) == d else
              f"host_memory_bytes of device {d.name}, as its file or the overrides give it")
    return (f"{format_bytes(d.host_memory_bytes)} per device x {d.devices_per_node} = "
            f"{format_bytes(d.host_memory_bytes * d.devices_per_node)} per node, for offload ({source}); "
            f"activations offloaded at {offload_copy_bandwidth(cluster) / 1e9:.3g} GB/s per device each way (host "
            f"links shared, docs/formulas.md §5.3)")


def assumed_lines(model: ModelSpec) -> list[Text]:
    """The model's assumptions (ModelSpec.assumptions) as lines, for the reports without an assumptions panel."""
    return [Text.assemble(("assumed: ", "bold yellow"), line) for line in model.report_assumptions]


def strategy_line(strategy: Strategy, layers: int | None = None) -> Text:
    """One line: degrees | batch split | sharding | recompute | schedule (and an explicit partition, or with the
    model's `layers` the accounted default partition's note, if any)."""
    s = strategy
    text = Text()
    text.append("strategy ", style="bold")
    text.append(f"tp={s.tp} pp={s.pp} cp={s.cp} dp={s.dp}", style="bold cyan")
    if s.cp > 1:
        text.append(f" cp_comm={s.cp_comm}", style="bold cyan")
    if s.ep > 1 or s.etp > 1:
        text.append(f" ep={s.ep} etp={s.etp}", style="bold cyan")
    text.append(f" vpp={s.vpp}")
    text.append(f" | mbs={s.mbs} mbn={s.mbn}")
    text.append(f" | zero={s.zero} sp={'on' if s.sp else 'off'}")
    text.append(f" | recompute={s.recompute.summary()}")
    text.append(f" | schedule={s.schedule}")
    if s.layers_per_stage:  # Megatron's notation (specs/pipeline_layout.py); MTP modules shown by the JSON layout
        text.append(f" | layout={megatron_layout(s.layers_per_stage)}")
    elif layers is not None and (note := s.layout_note(layers)):
        text.append(f" | layout={note}")
    return text


GROUP_HEADERS = {"parameters": "params", "gradients": "grads", "optimizer": "optim", "activations": "activ",
                 "other": "other"}


def shown_stages(memory) -> list[tuple[str, object]]:
    """(label, stage) rows for the memory table: every stage of a pipeline of at most SUMMARY_STAGES stages; else
    the first, the last and the peak stage, and each run of the stages between them as one row `a-b` showing the
    heaviest stage of the run (so no stage above a row is hidden)."""
    stages = memory.stages
    if len(stages) <= SUMMARY_STAGES:
        return [(str(s.stage), s) for s in stages]
    keep = {0, len(stages) - 1, memory.peak_stage}
    rows, run = [], []
    for index, stage in enumerate(stages):
        if index in keep:
            if run:
                rows.append(_run_row(run))
                run = []
            rows.append((str(stage.stage), stage))
        else:
            run.append(stage)
    return rows


def _run_row(run) -> tuple[str, object]:
    heaviest = max(run, key=lambda s: s.total_bytes)
    label = str(run[0].stage) if len(run) == 1 else f"{run[0].stage}-{run[-1].stage}"
    return label, heaviest


def memory_table(memory, bar_width: int = 32) -> Table:
    """Per-stage memory by group in GiB, the total, and (bar_width > 0) a bar against the capacity. Narrow headers
    (the legend spells them out) keep it within 80 columns without the bar; long pipelines are summarised
    (shown_stages)."""
    capacity = memory.capacity_bytes
    rows = shown_stages(memory)
    grouped = len(rows) < len(memory.stages)
    table = Table(title=f"Memory per device (GiB), capacity {gib(capacity)} GiB", title_justify="left",
                  box=box.SIMPLE_HEAD, show_edge=False,
                  caption=("a-b: stages a to b, shown by the heaviest of them" if grouped else None),
                  caption_justify="left")
    for name in ("stage", "layers", "in flight"):
        table.add_column(name, justify="right", min_width=len(name), no_wrap=True)
    for group in GROUP_ORDER:
        table.add_column(GROUP_HEADERS[group], justify="right", no_wrap=True, min_width=len(GROUP_HEADERS[group]),
                         style=GROUP_COLOURS[group] if group != "other" else None)
    table.add_column("total", justify="right", style="bold", no_wrap=True, min_width=5)
    if bar_width > 0:
        table.add_column("vs capacity", no_wrap=True)
    bars = memory_bars([stage.parts for _, stage in rows], capacity, max(bar_width, 1))
    for (label, stage), bar in zip(rows, bars):
        groups = group_parts(stage.parts)
        over = stage.total_bytes > capacity
        table.add_row(label, str(stage.layers), f"{stage.in_flight:g}",
                      *(gib(groups[g]) for g in GROUP_ORDER),
                      Text(gib(stage.total_bytes), style="bold red" if over else "bold"),
                      *((bar,) if bar_width > 0 else ()))
    return table


def memory_bar_lines(memory, width: int = 40) -> Table:
    """The per-stage bars on their own lines (for consoles too narrow for the bar column)."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(justify="right")
    grid.add_column(no_wrap=True)
    rows = shown_stages(memory)
    for (label, _), bar in zip(rows, memory_bars([stage.parts for _, stage in rows], memory.capacity_bytes, width)):
        grid.add_row(f"stage {label}", bar)
    return grid


def other_note(memory) -> Text:
    """What "other" holds on the peak stage, part by part."""
    peak = next(s for s in memory.stages if s.stage == memory.peak_stage)
    parts = {k: v for k, v in other_parts(peak.parts).items() if v}
    listing = ", ".join(f"{name.replace('_', ' ')} {gib(value)}" for name, value in parts.items())
    return Text(f"other on stage {peak.stage} (GiB): {listing or 'none'}", style="dim")


def fit_line(memory, evidence: Evidence | None = None) -> Text:
    """"fits" with the headroom (and the peak's upper edge at the evidence's confidence), or "over by X GiB on stage
    N" for the worst stage (or for the host memory, when the device memory fits and the offloaded bytes do not)."""
    capacity, peak = memory.capacity_bytes, memory.peak_bytes
    at = f" at {100 * memory.confidence:g} %" if memory.confidence else ""  # the confidence the verdict is at
    if memory.fits:
        free = "left at the point estimate" if at else "free"
        return Text.assemble(("fits" + at, "bold green"),
                             f": peak {format_bytes(peak)}{peak_band_text(peak, evidence)} on stage "
                             f"{memory.peak_stage}, {format_bytes(capacity - peak)} {free} of {format_bytes(capacity)}")
    if peak <= memory.fit_bytes:
        host_over = memory.host_peak_bytes - memory.host_capacity_bytes
        return Text.assemble(("DOES NOT FIT", "bold red"),
                             f": host memory over by {format_bytes(host_over)} per device (device memory: peak "
                             f"{format_bytes(peak)} of {format_bytes(capacity)})")
    if peak <= capacity:  # the point estimate fits, its upper edge does not
        return Text.assemble(("DOES NOT FIT" + at, "bold red"),
                             f": peak {format_bytes(peak)}{peak_band_text(peak, evidence)} on stage "
                             f"{memory.peak_stage} of {format_bytes(capacity)}: at most "
                             f"{format_bytes(memory.fit_bytes)} fits{at}")
    over = [s.stage for s in memory.stages if s.total_bytes > capacity]
    text = Text.assemble(("DOES NOT FIT", "bold red"),
                         f": over by {format_bytes(peak - capacity)} on stage {memory.peak_stage} "
                         f"(peak {format_bytes(peak)} > capacity {format_bytes(capacity)})")
    if len(over) > 1:
        text.append(f"; stages over capacity: {', '.join(map(str, over))}")
    return text


def host_line(memory, devices_per_node: int) -> Text | None:
    """The host memory a plan's offloaded activations and optimizer states take, or None when it takes none: the
    busiest device (and its stage), a node of `devices_per_node` such devices, against the host memory of a device
    (DeviceSpec.host_memory_bytes) and of a node (that times the devices per node)."""
    used, capacity = memory.host_peak_bytes, memory.host_capacity_bytes
    if not used:
        return None
    stage = max(memory.stages, key=lambda s: s.host_bytes).stage
    over = used > capacity
    verdict = f"over by {format_bytes(used - capacity)}" if over else f"{format_bytes(capacity - used)} free"
    return Text.assemble(("host memory", "bold red" if over else "bold"),
                         f" (offload): peak {format_bytes(used)} per device on stage {stage}, "
                         f"{format_bytes(used * devices_per_node)} per node of {devices_per_node}; {verdict} of "
                         f"{format_bytes(capacity)} per device ({format_bytes(capacity * devices_per_node)} per node)")


def print_fit(console: Console, memory, devices_per_node: int, evidence: Evidence | None = None) -> None:
    """The fit verdict, and the host-memory line when the plan offloads."""
    console.print(fit_line(memory, evidence))
    if (host := host_line(memory, devices_per_node)) is not None:
        console.print(host)


def time_table(time) -> Table:
    """Step-time parts as seconds and share of the step."""
    t = time.as_dict() if hasattr(time, "as_dict") else dict(time)
    step = t["step_seconds"]
    table = Table(title=f"Step time {format_seconds(step)}", title_justify="left", box=box.SIMPLE_HEAD, show_edge=False)
    table.add_column("part")
    table.add_column("time", justify="right")
    table.add_column("% of step", justify="right")
    for name, seconds in t.get("parts", {}).items():
        share = f"{100 * seconds / step:.1f}" if step else "-"
        table.add_row(TIME_PART_LABELS.get(name, name.replace("_", " ")), format_seconds(seconds), share,
                      style="dim" if not seconds else None)
    return table


def throughput_line(time, evidence: Evidence | None = None) -> Text:
    """The step time (with its band at the evidence's confidence), MFU, HFU and throughput."""
    t = time.as_dict() if hasattr(time, "as_dict") else dict(time)
    return Text.assemble(("step ", "bold"), (format_seconds(t["step_seconds"]), "bold"),
                         step_band_text(t["step_seconds"], evidence),
                         f"   MFU {100 * t['mfu']:.1f}%   HFU {100 * t['hfu']:.1f}%   "
                         f"{t['tokens_per_second_per_gpu']:,.0f} tokens/s/GPU")


def print_memory(console: Console, memory) -> None:
    """Per-stage memory table with bars against the capacity, and the legend. The bar column takes the room the
    numbers leave (at most 40); on narrow consoles the bars go below the table."""
    plain = memory_table(memory, bar_width=0)
    room = min(40, console.width - console.measure(plain).maximum - 3)
    if room >= 12:
        console.print(memory_table(memory, bar_width=room))
    else:
        console.print(plain)
        console.print(memory_bar_lines(memory, width=max(10, min(40, console.width - 12))))
    console.print(legend())


def estimate_line(strategy: Strategy, memory, time=None) -> str:
    """The estimate in one line (for --quiet): the verdict, the strategy, step time, MFU and the peak."""
    verdict = "fits" if memory.fits else f"does not fit (stage {memory.peak_stage} over)"
    step = (f"step {format_seconds(time.step_seconds)}, MFU {100 * time.mfu:.1f}%, " if time is not None else "")
    return (f"{verdict}: {strategy_text(strategy, experts_if_used=True)}; {step}peak "
            f"{format_bytes(memory.peak_bytes)} of {format_bytes(memory.capacity_bytes)}")


def render_estimate(console: Console, model: ModelSpec, cluster: ClusterSpec, run: RunSpec, strategy: Strategy,
                    memory, time=None, notes: Iterable[str] = ()) -> None:
    """The full `ndcp estimate` report: assumptions, strategy, memory per stage, fit verdict, step time, their
    bands at the run's confidence and the features without measured evidence."""
    evidence = plan_evidence(model, cluster.device.name, run, strategy, run.confidence)
    console.print(assumptions_panel(model, cluster, run, memory.capacity_bytes))
    console.print(Breakable(strategy_line(strategy, model.layers)))
    console.print()
    print_memory(console, memory)
    console.print(other_note(memory))
    print_fit(console, memory, cluster.device.devices_per_node, evidence)
    console.print()
    if time is not None:
        console.print(time_table(time))
        console.print(throughput_line(time, evidence))
    else:
        console.print(Text("step time: not estimated", style="yellow"))
    if (missing := missing_evidence_line(evidence)) is not None:
        console.print(missing)
    legend_of_plan = plan_legend([strategy.recompute])
    if legend_of_plan is not None:
        console.print(legend_of_plan)
    for note in notes:
        console.print(Text(f"note: {note}", style="yellow"))


__all__ = ["render_estimate", "estimate_line", "format_bytes", "format_count", "format_seconds", "gib", "group_parts",
           "memory_bar", "memory_bars", "memory_bar_lines", "legend", "shown_stages", "GROUP_GLYPHS",
           "assumptions_panel", "host_assumption", "assumed_lines", "strategy_line", "memory_table", "fit_line",
           "host_line", "print_fit", "time_table", "throughput_line", "MEMORY_GROUPS", "GROUP_ORDER"]
