"""`ndcp replan`'s report (ndcp.replanning.Replanned): the file's plan and the new one, the step-time and cost change,
a table of what changes, a table of what that means for the checkpoint, and the price of --keep."""
from __future__ import annotations

from itertools import groupby

from rich import box
from rich.console import Console
from rich.table import Table

from ..specs.strategy_text import strategy_text
from .search import one_line
from .terminal import format_seconds


def signed_seconds(seconds: float) -> str:
    return ("-" if seconds < 0 else "+") + format_seconds(abs(seconds))


def compact(value) -> str:
    """A setting as the table shows it: a list of layer counts run-length written (`5x16`, `1,2x32,1x15`)."""
    if isinstance(value, (list, tuple)):
        runs = [(item, len(list(group))) for item, group in groupby(value)]
        return ",".join(f"{item}x{count}" if count > 1 else str(item) for item, count in runs)
    if isinstance(value, bool):
        return "on" if value else "off"
    return "-" if value is None else str(value)


def summary_lines(replanned) -> list[str]:
    """The file's plan, the new plan (with its proof), and the change in step time and in GPU-seconds per token."""
    s = replanned.source
    lines = [f"from  {s.cluster.count} GPUs ({s.run.trainer}, {replanned.path}): {strategy_text(s.strategy)}; step "
             f"{format_seconds(s.time.step_seconds)}",
             f"to    {replanned.used} GPUs: {one_line(replanned.answer.result)}"]
    if replanned.used != replanned.gpus:
        kept = f" keeping {','.join(replanned.keep)}" if replanned.keep and not replanned.keep_refused else ""
        lines.append(f"note: no plan{kept} uses all {replanned.gpus} GPUs (no degrees multiply to it with the global "
                     f"batch {replanned.answer.planned.run.global_batch}); the fastest plan on fewer whole nodes "
                     f"runs on {replanned.used} (no plan on fewer GPUs can beat it: the model FLOPs at peak outlast it)")
    step = replanned.step_change()
    if step is not None:
        lines.append(f"step {signed_seconds(step[0])} ({100 * step[1]:+.1f} %); GPU-seconds per token "
                     f"{100 * replanned.cost_change():+.1f} %")
    return lines


def changes_table(replanned) -> Table:
    table = Table(title="What changes", title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for column in ("setting", "from", "to"):
        table.add_column(column, overflow="fold")
    for change in replanned.changes():
        table.add_row(change.what, compact(change.before), compact(change.after))
    return table


def checkpoint_table(replanned) -> Table:
    trainer = replanned.source.run.trainer
    table = Table(title=f"Checkpoint ({trainer}'s format; sources: docs/trainers.md §6)", title_justify="left",
                  box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("reshards")
    table.add_column("loads as saved")
    table.add_column("how", overflow="fold")
    for item in replanned.checkpoint():
        table.add_row(item.dimension, "yes" if item.loads else "no", item.how)
    return table


def keep_lines(replanned) -> list[str]:
    """--keep: refused with why, or honoured with its price over the best plan without it."""
    if not replanned.keep:
        return []
    kept = ",".join(replanned.keep)
    if replanned.keep_refused:
        return [f"--keep {kept}: refused: {replanned.keep_refused}; the plan above is the best without it"]
    free = replanned.free.result.best
    price = replanned.best.step_seconds - free.step_seconds
    fewer = (f" on {replanned.used} GPUs" if replanned.used != replanned.free.planned.cluster.count else "")
    return [f"--keep {kept}: honoured{fewer}; the best plan without it: {replanned.free.planned.cluster.count} GPUs, "
            f"{strategy_text(free.strategy)}, step {format_seconds(free.step_seconds)}; keeping changes the step by "
            f"{signed_seconds(price)} ({100 * price / free.step_seconds:+.1f} %)"]


def render_replan(console: Console, replanned) -> None:
    """The whole report on the console."""
    for line in summary_lines(replanned):
        console.print(line)
    for line in keep_lines(replanned):
        console.print(line)
    if replanned.best is None:
        return
    console.print()
    if not replanned.changes():
        console.print("nothing changes: the file's plan is the new plan")
        return
    console.print(changes_table(replanned))
    if replanned.checkpoint():
        console.print()
        console.print(checkpoint_table(replanned))
    else:
        console.print("the checkpoint loads as it is: no dimension reshards")


__all__ = ["render_replan", "summary_lines", "changes_table", "checkpoint_table", "keep_lines", "compact"]
