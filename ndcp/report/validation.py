"""Terminal report of a validation: one row per measured run, the skipped runs with reasons, and a summary panel."""
from __future__ import annotations

from rich import box
from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..validation import ValidationResult


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _signed(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _relative(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:+.0f}%"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _gib(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _basis(run) -> str:
    """The run's MFU basis, and the allocator figure its memory is compared on (reserved or allocated) if any."""
    return run.basis if run.memory_basis is None else f"{run.basis}; memory {run.memory_basis}"


def _runs_table(result: ValidationResult) -> Table:
    table = Table(title=f"Estimated vs measured: {result.source}", header_style="bold")
    for name, justify in (("run", "left"), ("device", "left"), ("GPUs", "right"), ("strategy", "left"),
                          ("basis", "left"), ("MFU meas", "right"), ("MFU est", "right"), ("Δ pts", "right"),
                          ("step meas s", "right"), ("step est s", "right"), ("Δ step", "right"),
                          ("mem meas GiB", "right"), ("mem est GiB", "right")):
        table.add_column(name, justify=justify, overflow="fold")
    for run in result.runs:
        table.add_row(run.id, run.device, str(run.gpus), run.strategy, _basis(run), _pct(run.measured_mfu),
                      _pct(run.estimated_mfu), _signed(run.mfu_error_points, "+.1f"), _seconds(run.measured_step),
                      _seconds(run.estimated_step), _relative(run.step_relative_error),
                      _gib(run.measured_memory_gib), _gib(run.estimated_memory_gib), style=_run_style(run))
    return table


def _run_style(run) -> str | None:
    error = run.mfu_error_points
    return "red" if error is not None and abs(error) > 10 else "yellow" if error is not None and abs(error) > 5 \
        else None


def _compact_runs_table(result: ValidationResult) -> Table:
    """The per-run table for narrow consoles: the run's id with its devices, strategy and MFU basis below it in one
    column (the details wrap between words; the id is never broken), each figure measured over estimated in one
    column, and the differences."""
    table = Table(title=f"Estimated vs measured: {result.source}", title_justify="left", box=box.SIMPLE_HEAD,
                  show_edge=False, pad_edge=False, padding=(0, 0, 0, 1), header_style="bold",
                  caption="each figure: measured, below it estimated; Δ: estimated - measured (MFU in points, step "
                          "relative)", caption_justify="left")
    longest = max((len(run.id) for run in result.runs), default=0)
    table.add_column("run (devices, strategy, basis)", min_width=min(longest, 40), ratio=1, overflow="fold")
    for name in ("MFU %", "Δ pts", "step s", "Δ step", "mem GiB"):
        table.add_column(name, justify="right", no_wrap=True, min_width=max(len(part) for part in name.split()))
    for run in result.runs:
        label = Text(run.id)
        label.append(f"\n{run.gpus} x {run.device}, {run.strategy}; {_basis(run)}", style="dim")
        table.add_row(label, f"{_pct(run.measured_mfu).rstrip('%')}\n{_pct(run.estimated_mfu).rstrip('%')}",
                      _signed(run.mfu_error_points, "+.1f"),
                      f"{_seconds(run.measured_step)}\n{_seconds(run.estimated_step)}",
                      _relative(run.step_relative_error),
                      f"{_gib(run.measured_memory_gib)}\n{_gib(run.estimated_memory_gib)}", style=_run_style(run))
    return table


def _skipped_table(result: ValidationResult) -> Table:
    table = Table(title="Runs not compared (skipped)", header_style="bold")
    table.add_column("run", no_wrap=True)
    table.add_column("reason", overflow="fold")
    for skipped in result.skipped:
        table.add_row(skipped.id, skipped.reason)
    return table


def _searched_table(result: ValidationResult) -> Table:
    table = Table(title="Knobs the sources do not publish, filled by ndcp's pinned search", header_style="bold")
    table.add_column("run", no_wrap=True)
    table.add_column("filled", overflow="fold")
    for run in result.runs:
        if run.searched:
            table.add_row(run.id, run.searched)
    return table


def _summary_panel(result: ValidationResult) -> Panel:
    s = result.summary
    lines = [
        f"runs compared: {s.runs}   skipped: {len(result.skipped)}",
        f"MFU error: mean {_signed(s.mean_abs_mfu_points, '.2f')} points, max {_signed(s.max_abs_mfu_points, '.2f')}",
        f"step time: mean |relative error| {_pct(s.mean_abs_step_relative)}",
        f"MFU correlation: Pearson {_signed(s.mfu_pearson, '.3f')}, Spearman {_signed(s.mfu_spearman, '.3f')}",
        f"step correlation (log): Pearson {_signed(s.step_pearson, '.3f')}, Spearman {_signed(s.step_spearman, '.3f')}",
        f"top-{s.top_k} agreement (by MFU): {_pct(s.top_k_agreement)}" if s.top_k else "top-k agreement (by MFU): -",
        f"memory: mean |relative error| {_pct(s.mean_abs_memory_relative)}",
    ]
    lines += [f"note: {note}" for note in result.notes]
    if not s.runs and result.skipped:
        lines.append("no run was compared: the table above gives each skipped run's reason")
    return Panel("\n".join(lines), title="Summary", expand=False)


def summary_line(result: ValidationResult) -> str:
    """The validation in one line (for --quiet)."""
    s = result.summary
    return (f"{s.runs} runs compared, {len(result.skipped)} skipped: MFU error mean "
            f"{_signed(s.mean_abs_mfu_points, '.2f')} points (max {_signed(s.max_abs_mfu_points, '.2f')}), step time "
            f"mean |relative error| {_pct(s.mean_abs_step_relative)}, memory {_pct(s.mean_abs_memory_relative)}")


def render_validation(result: ValidationResult, console: Console) -> None:
    """Print the per-run table (the compact one when the full one is wider than the console), the skipped runs and
    the summary panel."""
    full = _runs_table(result)
    fits = Console(width=10_000).measure(full).maximum <= console.width
    console.print(full if fits else _compact_runs_table(result))
    if any(run.searched for run in result.runs):
        console.print(_searched_table(result))
    if result.skipped:
        console.print(_skipped_table(result))
    console.print(_summary_panel(result))


__all__ = ["render_validation", "summary_line"]
