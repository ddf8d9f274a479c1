"""Pipeline layouts as people write them: Megatron-LM's `--pipeline-model-parallel-layout` notation, first/last stage
layer counts, and the layers of each device stage split over its interleaved chunks.

Megatron's notation (Megatron-LM docs/api-guide/pipeline_parallel_layout.md, core_r0.13+; docs/formulas.md §4):
virtual stages in model order separated by `|`; in each, `E` the embedding, `t` a decoder layer, `m` an MTP module,
`L` the loss (final norm, output layer, loss); `X*N` repeats a symbol and `(...)*N` a group; commas are cosmetic.
Virtual stage v runs on device stage v % pp as its chunk v // pp. "Et*3|(tt|)*29,m|L" is DeepSeek-V3 on pp 16 x
vpp 2. ndcp places the embedding on the first virtual stage and the loss and MTP modules on the last device stage
(its estimators price them there), so a layout must too.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .fields import SpecError, show

SYMBOLS = {"E": "the embedding", "t": "a decoder layer", "m": "an MTP module", "L": "the loss"}
_MAX_EXPANDED = 1 << 16  # no real layout has more symbols; a hostile `(t*9999)*9999` is refused, not expanded
_TOKEN = re.compile(r"\s*(?:(?P<open>\()|(?P<close>\))|(?P<times>\*\s*(?P<n>[0-9]+))|(?P<sym>[EtmL|,]))")


@dataclass(frozen=True)
class Layout:
    """A pipeline layout: the symbols of each virtual stage, in model order."""

    stages: tuple[str, ...]

    def layers_per_stage(self) -> tuple[int, ...]:
        return tuple(stage.count("t") for stage in self.stages)


def _expand(text: str) -> str:
    """The notation with every repetition written out (commas dropped)."""
    stack: list[list[str]] = [[]]  # open groups; each a list of pieces (a piece: one symbol or one closed group)
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if not match or match.end() == pos:
            rest = text[pos:].strip()
            if not rest:
                break
            raise SpecError(f"layout={show(text)} is not valid: unexpected {rest[0]!r} at position {pos + 1}; "
                            f"symbols: {', '.join(f'{k} {v}' for k, v in SYMBOLS.items())}, '|' between stages, "
                            "X*N or (...)*N to repeat")
        pos = match.end()
        pieces = stack[-1]
        if match.group("open"):
            stack.append([])
        elif match.group("close"):
            if len(stack) == 1:
                raise SpecError(f"layout={show(text)} is not valid: ')' without '('")
            group = "".join(stack.pop())
            stack[-1].append(group)
        elif match.group("times"):
            if not pieces:
                raise SpecError(f"layout={show(text)} is not valid: '*' repeats nothing")
            count = int(match.group("n"))
            if len(pieces[-1]) * count > _MAX_EXPANDED:
                raise SpecError(f"layout={show(text)} is not valid: too long when expanded")
            pieces[-1] = pieces[-1] * count
        elif match.group("sym") != ",":
            pieces.append(match.group("sym"))
    if len(stack) != 1:
        raise SpecError(f"layout={show(text)} is not valid: '(' without ')'")
    expanded = "".join(stack[0])
    if len(expanded) > _MAX_EXPANDED:
        raise SpecError(f"layout={show(text)} is not valid: too long when expanded")
    return expanded


def parse_layout(text: str) -> Layout:
    """A Layout from Megatron's notation (syntax only: check_layout checks it against a model and pp)."""
    if not isinstance(text, str) or not text.strip():
        raise SpecError(f"layout={show(text)} is not valid; expected Megatron's notation, e.g. Et*3|(tt|)*29,m|L")
    return Layout(tuple(_expand(text).split("|")))


def check_layout(layout: Layout, layers: int, mtp_depth: int, pp: int) -> tuple[int, ...]:
    """The layers per virtual stage of a layout for this model and pp; SpecError naming what is wrong."""
    stages, virtual = layout.stages, len(layout.stages)
    text = "|".join(stages)
    if virtual % pp:
        raise SpecError(f"layout has {virtual} stages: expected a multiple of pp = {pp} (pp x vpp stages)")
    counts = layout.layers_per_stage()
    if sum(counts) != layers:
        raise SpecError(f"layout holds {sum(counts)} decoder layers (t); the model has {layers}")
    if text.count("E") != 1 or "E" not in stages[0]:
        raise SpecError("layout: the embedding (E) must appear once, in the first stage")
    if text.count("L") != 1 or "L" not in stages[-1]:
        raise SpecError("layout: the loss (L) must appear once, in the last stage")
    if text.count("m") != mtp_depth:
        raise SpecError(f"layout holds {text.count('m')} MTP modules (m); the model has {mtp_depth}")
    last_device = [v for v in range(virtual) if v % pp == pp - 1]
    if any("m" in stages[v] for v in range(virtual) if v not in last_device):
        raise SpecError(f"layout: ndcp prices the MTP modules on the last device stage (pp rank {pp - 1}); place "
                        "each m in one of its stages")
    for s in range(pp):
        if not any(counts[v] for v in range(s, virtual, pp)):
            raise SpecError(f"layout: device stage {s} holds no decoder layer")
    return counts


def megatron_layout(counts: tuple[int, ...], mtp_depth: int = 0) -> str:
    """Megatron's notation for layers per virtual stage (model order), the embedding first and the MTP modules and
    the loss last; runs of equal stages written as (S|)*N."""
    stages = []
    for v, n in enumerate(counts):
        body = ("t*%d" % n if n > 2 else "t" * n)
        head = "E" if v == 0 else ""
        tail = ("m" * mtp_depth + "L") if v == len(counts) - 1 else ""
        stages.append(head + body + tail)
    out, v = [], 0
    while v < len(stages):
        run = 1
        while v + run < len(stages) - 1 and stages[v + run] == stages[v]:
            run += 1
        last = v + run == len(stages)
        if run > 1:
            out.append(f"({stages[v]}|)*{run}" + ("" if last else ","))
        else:
            out.append(stages[v] + ("" if last else "|"))
        v += run
    return "".join(out)


def split_device_stages(device_layers: tuple[int, ...] | list[int], vpp: int) -> tuple[int, ...]:
    """Layers per virtual stage (model order, v = chunk x pp + stage) from each device stage's total, each split as
    evenly as its chunks allow, the extra layers on its later chunks. vpp = 1: the totals themselves."""
    pp = len(device_layers)
    counts = [0] * (pp * vpp)
    for s, total in enumerate(device_layers):
        base, extra = divmod(total, vpp)
        for c in range(vpp):
            counts[c * pp + s] = base + (1 if c >= vpp - extra else 0)
    return tuple(counts)


def first_last_partition(layers: int, pp: int, vpp: int, first: int | None, last: int | None) -> tuple[int, ...]:
    """Megatron's --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers: the first (last) device
    stage holds `first` (`last`) layers, the others split the rest evenly; with vpp, every device stage's layers split
    evenly over its chunks (Megatron-LM arguments.py requires each divisible by vpp)."""
    middle_stages = pp - (first is not None) - (last is not None)
    rest = layers - (first or 0) - (last or 0)
    if middle_stages < 0 or (middle_stages == 0 and rest) or (middle_stages and (rest <= 0 or rest % middle_stages)):
        given = ", ".join(f"{k}={v}" for k, v in (("first_stage_layers", first), ("last_stage_layers", last))
                          if v is not None)
        raise SpecError(f"{given} is not valid: the other {middle_stages} stage(s) must split the remaining "
                        f"{rest} of {layers} layers evenly")
    per = rest // middle_stages if middle_stages else 0
    totals = [per] * pp
    if first is not None:
        totals[0] = first
    if last is not None:
        totals[-1] = last
    for s, n in enumerate(totals):
        if n < vpp or n % vpp:
            raise SpecError(f"first/last stage layers: device stage {s} would hold {n} layers; with vpp = {vpp} each "
                            f"stage needs a multiple of {vpp} (or give an explicit layout=)")
    return split_device_stages(totals, vpp)


__all__ = ["Layout", "parse_layout", "check_layout", "megatron_layout", "split_device_stages", "first_last_partition",
           "SYMBOLS"]
