"""The plan notation of the reports, its legend, and text that wraps between the pieces of a plan.

A per-stage recompute plan is written as its layers per option, summed over the stages
(specs/recompute.py RecomputePlan.summary): `3n/0s/18ln+mla/6f` is 3 layers without recompute, none selective, 18
recomputing Megatron's layernorm and mla_up_proj modules, 6 fully recomputed. A plan has no spaces, so a terminal
would cut it anywhere; `Breakable` wraps such text between words and after each `/` only.
"""
from __future__ import annotations

import re
from typing import Iterable

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.text import Text

from ..specs.recompute import CLASSIC_MODES, MODULES, OPTION_BY_NAME, RECOMPUTE_MODES, RecomputePlan

PLAN_SEPARATOR = "/"
# The option a one-letter code names on its own: a module's code reads as that option (core_attn's `s` is selective).
_OPTION_OF_CODE = {OPTION_BY_NAME[name].label: name for name in RECOMPUTE_MODES}


def shown_options(plans: Iterable[RecomputePlan]) -> list[str]:
    """The options the summaries of these per-stage plans write (the classic three always, another where used), in
    RECOMPUTE_MODES order; none when no plan is per-stage (uniform plans are written by their option's name)."""
    staged = [p for p in plans if not p.is_uniform]
    if not staged:
        return []
    used = {m for p in staged for s in p.stages for m in RECOMPUTE_MODES if s.count(m)}
    return [m for m in RECOMPUTE_MODES if m in CLASSIC_MODES or m in used]


def plan_codes(options: Iterable[str]) -> str:
    """`n none, s selective, ln layernorm, ..., f full`: each code the options' labels are made of, once (an option
    of several Megatron recompute modules is written as their codes joined by `+`: listed module by module)."""
    codes: dict[str, str] = {}
    for name in options:
        option = OPTION_BY_NAME[name]
        if option.modules and option.name == "+".join(option.modules):  # Megatron's modules, by their codes
            codes.update((MODULES[m].code, _OPTION_OF_CODE.get(MODULES[m].code, m)) for m in option.modules)
        else:
            codes[option.label] = name
    joined = any("+" in OPTION_BY_NAME[name].code for name in options)
    return (", ".join(f"{code} {name}" if code != name else code for code, name in codes.items())
            + ("; + joins the Megatron recompute modules one option runs" if joined else ""))


def plan_legend(plans: Iterable[RecomputePlan]) -> Text | None:
    """The legend of the plan notation for the per-stage plans among `plans` (None when there are none)."""
    return _legend(shown_options(plans))


# A plan summary in text: two or more `/`-joined pieces `<layers><label>` (`3n/0s/6f`).
SUMMARY_PATTERN = re.compile(r"(?<![\w/])\d+[a-z+]+(?:/\d+[a-z+]+)+(?![\w/])")


def text_plan_legend(texts: Iterable[str]) -> Text | None:
    """plan_legend for plans known only by their text (a sweep's labels): the options of the summaries in `texts`."""
    label_option = {OPTION_BY_NAME[m].label: m for m in RECOMPUTE_MODES}
    labels = {piece.lstrip("0123456789") for text in texts for summary in SUMMARY_PATTERN.findall(text)
              for piece in summary.split(PLAN_SEPARATOR)}
    return _legend([m for label, m in label_option.items() if label in labels])


def _legend(options: list[str]) -> Text | None:
    if not options:
        return None
    return Text("recompute plans: layers per option over all stages (--json has each stage); " + plan_codes(options),
                style="dim")


def break_offsets(text: str, width: int, indent: int = 0) -> list[int]:
    """Where to break `text` so no line is wider than `width` (lines after the first: `width - indent`): between
    words or after a PLAN_SEPARATOR, greedily; a piece wider than its line is left whole."""
    ends = [index + 1 for index, char in enumerate(text) if char in (" ", PLAN_SEPARATOR)] + [len(text)]
    offsets, line_start, last, room = [], 0, 0, width
    for end in ends:
        if len(text[line_start:end].rstrip()) > room and last > line_start:
            offsets.append(last)
            line_start, room = last, width - indent
        last = end
    return offsets


class Breakable:
    """Text that wraps to the console between words and after each `/` (never inside a plan's pieces); following
    lines are indented by `indent`."""

    def __init__(self, text: Text, indent: int = 0):
        self.text, self.indent = text, indent

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        plain = self.text.plain
        longest = max((len(word) for word in plain.replace(PLAN_SEPARATOR, PLAN_SEPARATOR + " ").split()), default=0)
        return Measurement(min(longest + self.indent, len(plain)), len(plain))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        lines = self.text.divide(break_offsets(self.text.plain, width, self.indent))
        for number, line in enumerate(lines):
            line.rstrip()
            if number:
                line = Text(" " * self.indent) + line
            yield line


__all__ = ["plan_legend", "text_plan_legend", "SUMMARY_PATTERN", "plan_codes", "shown_options", "Breakable",
           "break_offsets", "PLAN_SEPARATOR"]
