"""Per-choice coefficients for the CP-SAT model, taken from the full estimators' own stage functions.

A candidate is (batch item i = layout + mbs + mbn, inner choice j = (sp, recompute), ZeRO stage z). Its step time
splits exactly into pipeline(i, j) + data_parallel(i, j, z) and its memory on stage s into static_s(i, z) +
dynamic_s(i, j) (estimate.time / estimate.memory).

Levels of coefficients, all never above the full estimators (so the model is a proven relaxation; a property test
checks the bounds against the estimators), each costlier and tighter than the one before:
- `item_work_bounds`: one number per batch item from its work alone (the micro-batches times a device stage's mean
  share of one, no recompute, no bubble); items with the same layer shape share it, so every item gets one cheaply.
- `item_lower_bounds`: one number per batch item, valid for every j and z and every per-layer plan (docs/solver.md
  §3.3, approach C): no recompute (recompute only adds time), stages balanced (or, with the partition fixed, each at
  least its own layers and extra work), the schedule's bubble, no DP exposure, memory ignored.
- `item_data_parallel_floor`: what the DP sync and optimizer step cost at least, added to that bound.
- level 3, memory-aware, is plan_bounds.py (`item_plan_lower_bounds`), built on the pieces here.
  `item_memory_lower_bound`: the least memory of an item (to explain infeasibility).
- `expand_item`: exact step time for each (j, z) of one item, and memory exact on the stages the model constrains
  (first, second, last).
The certificate loop expands items in order of their bounds, so most items never need exact coefficients.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple
from functools import lru_cache

from ..estimate.layout import chunks_kind_counts, stage_chunks, stage_kind_counts, stage_layouts
from ..estimate.memory import (host_offload_bytes, host_optimizer_bytes, model_state_bytes, parts_total,
                               stage_dynamic_bytes, stage_static_bytes, unheld_state_bound)
from ..estimate.compute import fp8_weight_elements
from ..estimate.parameters import StageParameters
from ..estimate.data_parallel import Windows, data_parallel_terms, data_parallel_time
from ..estimate.overlap import LAYER_OVERLAPS, hidden_comms
from ..estimate.keys import Degrees, LayerKey, StageKey
from ..estimate.layer_time import layer_time
from ..estimate.time import (overlap_windows, p2p_per_microbatch, pipeline_link, pipeline_p2p_seconds,
                             pipeline_seconds, stage_extra, stage_extra_time, stage_fill, stage_times)
from ..schedules import schedule_named
from ..rules import sp_allowed
from ..space import Layout, SearchSpace
from ..specs.recompute import HEAVIEST, KEEPS_LAYER_INPUT, NO_RECOMPUTE, recompute_option
from .margins import layout_point_margin

Item = tuple[Layout, int, int]  # (layout, mbs, mbn)


@dataclass(frozen=True)
class ItemTable:
    """Exact coefficients of one batch item over inner choices j and ZeRO stages z (roles = constrained stages)."""

    allowed: tuple[bool, ...]  # [j]: SP needs tp > 1
    time: tuple[tuple[float, ...], ...]  # [j][z] seconds: pipeline + data-parallel exposure + optimizer
    dynamic: tuple[tuple[float, ...], ...]  # [j][role] bytes
    static: tuple[tuple[float, ...], ...]  # [z][role] bytes
    zero_allowed: tuple[bool, ...]  # [z]: the layout runs it (space.zero_stages), its host optimizer states fit
    margin: tuple[tuple[int, ...], ...] = ()  # [j][z] bytes kept free at the run's confidence (margins.py; () at 0)


def role_stages(pp: int) -> tuple[int, int, int]:
    """The stages whose memory the model constrains: first, second, last (the usual peaks)."""
    return 0, min(1, pp - 1), pp - 1


@lru_cache(maxsize=256)
def inner_choices(space: SearchSpace) -> tuple[tuple[tuple[bool, str], ...], tuple[int, ...]]:
    """All (sp, recompute) pairs and ZeRO stages the space searches (SP pairs are masked per item by tp)."""
    zeros, sps, modes = space.inner_choices(2)
    return tuple((sp, mode) for sp in sps for mode in modes), tuple(zeros)


@dataclass(frozen=True)
class _NoRecompute:
    """One micro-batch with no recompute under one (tp, cp, ep, etp, mbs, sp): body and extra work, seconds."""

    body: float  # every body layer of the model
    dense: float  # one dense body layer (0 if the model has none), one MoE body layer
    moe: float
    first: float  # extra work of the first stage (embedding), of the last (output head, loss, MTP), of a lone one
    last: float
    only: float

    def work(self, pp: int) -> float:
        """The micro-batch's work summed over `pp` device stages, pipeline sends left out: the body, one embedding
        and one output head (every schedule places one of each; a lone stage holds both)."""
        return self.body + self.only if pp == 1 else self.body + self.first + self.last

    def stage(self, shape: "_StageShape") -> float:
        """One device stage's micro-batch, pipeline sends left out."""
        return (shape.dense * self.dense + shape.moe * self.moe + shape.first * self.first + shape.last * self.last
                + shape.only * self.only)


class _StageShape(NamedTuple):
    """A device stage's body layers per kind and the shares of the extra roles the schedule gives it
    (Schedule.extra_roles), default partition."""

    dense: int
    moe: int
    first: float
    last: float
    only: float


@dataclass
class BoundMemo:
    """The per-layer and per-stage terms the bound levels share between the items of one space (ItemBounds keeps
    one per search): items with the same layer shape, or the same layout, compute them once."""

    no_recompute: dict = field(default_factory=dict)
    """StageKey (the layer overlaps only) -> _NoRecompute: a micro-batch's times with no recompute."""
    widest_layer: dict = field(default_factory=dict)
    """(Degrees, cp_comm, the SP settings and their overlaps) -> Windows: a layer's widest DP overlap windows."""
    widest_extra: dict = field(default_factory=dict)
    """(Degrees, cp_comm, the SP settings and their overlaps, schedule, stage, pp) -> Windows: the same of a stage's
    extra work."""
    end_stage_terms: dict = field(default_factory=dict)
    """Layout -> per ZeRO stage (the end stages' DataParallelTerms, the largest optimizer step): the same for every
    micro-batch size of the layout."""


def overlaps(space: SearchSpace, layout: Layout, sp: bool) -> frozenset:
    """The communication the layout's strategies overlap with compute (estimate/overlap.py)."""
    return hidden_comms(space.run, layout.schedule, layout.pp, layout.vpp, layout.tp, sp, layout.ep)


def _no_recompute(space: SearchSpace, layout: Layout, mbs: int, sp: bool, hidden: frozenset, memo: BoundMemo
                  ) -> _NoRecompute:
    """A micro-batch's times with no recompute (`memo`: the caller's for one space). Only the overlaps inside
    the layers shape them (estimate/overlap.py layer_overlaps), so items differing in the others share them."""
    key = StageKey(Degrees.of(layout, mbs, sp), layout.cp_comm, hidden & LAYER_OVERLAPS)
    found = memo.no_recompute.get(key)
    if found is None:
        model, cluster, run = space.model, space.cluster, space.run
        per_kind = {kind: layer_time(model, cluster, run, key.layer(kind, NO_RECOMPUTE)).total
                    for kind, n in (("dense", model.dense_layers), ("moe", model.moe_layers)) if n}
        first, last = (stage_extra_time(model, cluster, run, role, key) for role in ("first", "last"))
        dense, moe = per_kind.get("dense", 0.0), per_kind.get("moe", 0.0)
        # a lone stage's extra work is both (stage_extra_time's "only" role adds the same two)
        found = _NoRecompute(model.dense_layers * dense + model.moe_layers * moe, dense, moe, first.total,
                             last.total, (first + last).total)
        memo.no_recompute[key] = found
    return found


@lru_cache(maxsize=4096)
def _stage_shapes(model, schedule: str, pp: int, vpp: int) -> tuple[_StageShape, ...]:
    """The distinct shapes of the device stages, default partition."""
    shapes = set()
    for s, kinds in enumerate(stage_kind_counts(model, pp, vpp)):
        roles = {"first": 0.0, "last": 0.0, "only": 0.0, **dict(schedule_named(schedule).extra_roles(s, pp))}
        shapes.add(_StageShape(kinds["dense"], kinds["moe"], **roles))
    return tuple(sorted(shapes))


def _pipeline_no_recompute(space: SearchSpace, layout: Layout, mbs: int, sp: bool, fixed: bool,
                           memo: BoundMemo) -> tuple[float, float]:
    """(sum over device stages, a lower bound of the slowest stage) of one micro-batch's stage times with no
    recompute. The sum is exact; the slowest is the balanced share, or with the partition `fixed`, exact: each
    stage's own layers (per kind) plus its extra work."""
    model, cluster = space.model, space.cluster
    hidden = overlaps(space, layout, sp)
    t = _no_recompute(space, layout, mbs, sp, hidden, memo)
    if layout.pp == 1:
        return t.work(1), t.work(1)
    pp_link = pipeline_link(cluster, layout.tp, layout.cp, layout.dp)
    p2p = 0.0 if "p2p" in hidden else pipeline_p2p_seconds(
        model, cluster, space.run, layout.pp, layout.vpp, Degrees.of(layout, mbs, sp), pp_link)
    total = t.work(layout.pp) + layout.pp * p2p
    slowest = total / layout.pp
    if fixed:  # each stage's own layers and extra work: the slowest stage exactly
        shapes = _stage_shapes(model, layout.schedule, layout.pp, layout.vpp)
        slowest = max(slowest, max(t.stage(shape) for shape in shapes) + p2p)
    return total, slowest


def item_work_bounds(space: SearchSpace, items, check=None, memo: BoundMemo | None = None) -> list[float]:
    """Seconds no strategy of each item can beat, from its work alone: the micro-batches times the mean over device
    stages of one micro-batch's time with no recompute (its body layers, embedding and output head, at the best SP
    setting), with no bubble, pipeline sends, DP exposure or optimizer time. Every schedule's pipeline is at least
    the micro-batches times its slowest stage (Schedule.pipeline_seconds), and the slowest at least the mean, so
    this is never above item_lower_bounds. Items with the same layer shape share the per-micro-batch work, so it
    costs a few lookups per item: item_lower_bounds is then computed only for the items that reach the front.
    `check(n)` is called every 256 items, n = items bounded so far (the caller's deadline, interrupt or progress);
    `memo` keeps the per-layer terms for the later levels (ItemBounds.memo)."""
    inner, _ = inner_choices(space)
    sps = sorted({sp for sp, _ in inner})
    memo = BoundMemo() if memo is None else memo
    hidden: dict = {}  # per (schedule, pp, vpp, tp, ep): what each SP setting overlaps inside the layers
    works: dict = {}  # per layer shape and those overlaps: the least work of one micro-batch
    bounds = []
    for n, (layout, mbs, mbn) in enumerate(items):
        if check is not None and n % 256 == 0:
            check(n)
        overlap_key = (layout.schedule, layout.pp, layout.vpp, layout.tp, layout.ep)
        hides = hidden.get(overlap_key)
        if hides is None:
            # only these shape a micro-batch's work (estimate/overlap.py): items differing in the others share it
            hides = hidden[overlap_key] = tuple((sp, overlaps(space, layout, sp) & LAYER_OVERLAPS) for sp in sps
                                                if sp_allowed(sp, layout.tp))
        key = (layout.tp, layout.cp, layout.ep, layout.etp, mbs, layout.cp_comm, layout.pp == 1, hides)
        work = works.get(key)
        if work is None:
            times = [_no_recompute(space, layout, mbs, sp, comms, memo) for sp, comms in hides]
            work = works[key] = min(t.work(layout.pp) for t in times)
        bounds.append(work * mbn / layout.pp)
    return bounds


def item_lower_bounds(space: SearchSpace, items, check=None, fixed_partition: bool = False,
                      memo: BoundMemo | None = None) -> list[float]:
    """Seconds no strategy of each item can beat: no recompute, the best SP, no DP exposure or optimizer time, and
    stages balanced unless the partition is fixed (space.partition_offset, or `fixed_partition`: the bound of the
    default partition's plans only) (docs/solver.md §3.3). Cheap: the per-layer terms are shared across items (and
    across calls given the same `memo`, the BoundMemo the caller keeps for one space). `check(n)` is called every 256
    items, n = items bounded so far (the caller's deadline, interrupt or progress)."""
    inner, _ = inner_choices(space)
    sps = sorted({sp for sp, _ in inner})
    memo = BoundMemo() if memo is None else memo
    bounds = []
    for n, (layout, mbs, mbn) in enumerate(items):
        if check is not None and n % 256 == 0:
            check(n)
        fixed = fixed_partition or not space.options.max_offset or not space.partition_offset(layout)
        bounds.append(min(pipeline_bound(layout, *_pipeline_no_recompute(space, layout, mbs, sp, fixed, memo), mbn)
                          for sp in sps if sp_allowed(sp, layout.tp)))
    return bounds


def pipeline_bound(layout: Layout, total: float, slowest: float, mbn: int) -> float:
    """The schedule's pipeline from a lower bound of the stage sum and of the slowest stage: each stage's fill at
    least Schedule.fill_floor of its time."""
    schedule = schedule_named(layout.schedule)
    return pipeline_seconds(layout.schedule, schedule.fill_floor(total), slowest, mbn, layout.vpp, layout.pp)


def item_lower_bound(space: SearchSpace, item: Item) -> float:
    """item_lower_bounds for one item, its partition fixed at the default (whatever space.partition_offset allows)."""
    return item_lower_bounds(space, [item], fixed_partition=True)[0]


def item_data_parallel_floor(space: SearchSpace, item: Item, memo: BoundMemo | None = None) -> float:
    """Seconds of DP/ZeRO exposure plus optimizer step that every strategy of this item pays, cheaply: on the first
    and last stages (a lower bound of the worst stage), with overlap windows no shorter than any plan's: every layer
    at its heaviest recompute and best-hiding SP setting, plus the extra work's (exposure shrinks as a window
    grows). Needs the partition fixed; with offsets allowed it is 0. `memo`: the BoundMemo the caller keeps for one
    space, where items share the windows of a layer and of a stage's extra work."""
    model, cluster, run = space.model, space.cluster, space.run
    layout, mbs, mbn = item
    if space.partition_offset(layout):
        return 0.0
    memo = BoundMemo() if memo is None else memo
    inner, zeros = inner_choices(space)
    hides = tuple((sp, overlaps(space, layout, sp)) for sp in sorted({sp for sp, _ in inner})
                  if sp_allowed(sp, layout.tp))
    degrees = Degrees.of(layout, mbs, False)  # at each SP setting of `hides` below
    key = (degrees, layout.cp_comm, hides)
    per_layer = memo.widest_layer.get(key)
    if per_layer is None:
        kinds = [k for k, n in (("dense", model.dense_layers), ("moe", model.moe_layers)) if n]
        heaviest = [layer_time(model, cluster, run, LayerKey(k, m, degrees._replace(sp=sp), layout.cp_comm, hidden))
                    for k in kinds for sp, hidden in hides for m in widest_options(space, layout)]
        per_layer = memo.widest_layer[key] = Windows(max(t.forward_window for t in heaviest),
                                        max(t.backward_window for t in heaviest))
    chunks = stage_chunks(model, layout.pp, layout.vpp)
    ends = sorted({0, layout.pp - 1})
    windows = {}
    extra_hides = tuple((sp, overlaps(space, layout, sp)) for sp in {False, layout.tp > 1})
    for s in ends:
        layers = sum(n for _, n in chunks[s])
        key = (degrees, layout.cp_comm, extra_hides, layout.schedule, s, layout.pp)
        extra = memo.widest_extra.get(key)
        if extra is None:
            extras = [stage_extra(model, cluster, run, layout.schedule, s, layout.pp,
                                  StageKey(degrees._replace(sp=sp), layout.cp_comm, hidden))
                      for sp, hidden in extra_hides]
            extra = memo.widest_extra[key] = Windows(max(t.forward_window for t in extras),
                                                     max(t.backward_window for t in extras))
        windows[s] = Windows(layers * per_layer.forward + extra.forward, layers * per_layer.backward + extra.backward)
    per_zero = memo.end_stage_terms.get(layout)
    if per_zero is None:
        per_zero = memo.end_stage_terms[layout] = [
            data_parallel_terms(model, cluster, run, layout.strategy(1, 1, z, False, NO_RECOMPUTE), tuple(ends))
            for z in zeros]
    return min(max(t.exposed(windows[s], mbn) for s, t in zip(ends, terms)) + max(t.per_step(mbn) for t in terms)
               for terms in per_zero)


@lru_cache(maxsize=16384)
def role_static_bytes(space: SearchSpace, layout: Layout) -> dict[int, dict[int, int]]:
    """Static bytes (model states, ZeRO-3 buffers) of each constrained stage (role_stages) per ZeRO stage the space
    searches. They depend only on the layout, so items sharing it share these."""
    _, zeros = inner_choices(space)
    strategies = {z: layout.strategy(1, 1, z, False, NO_RECOMPUTE) for z in zeros}
    stages = stage_layouts(space.model, strategies[zeros[0]])
    return {s: {z: parts_total(stage_static_bytes(space.model, space.run, strategy, stages[s]))
                for z, strategy in strategies.items()} for s in set(role_stages(layout.pp))}


@lru_cache(maxsize=65536)
def layer_static_bytes(space: SearchSpace, layout: Layout, zero: int) -> float:
    """Model-state bytes one body layer adds to a stage under a ZeRO stage (the static memory's slope in the
    stage's layer count; single-kind models, where uneven partitions are searched)."""
    model = space.model
    kind = "moe" if model.dense_layers == 0 and model.moe_layer else "dense"
    layer = model.moe_layer if kind == "moe" else model.dense_layer
    experts = layer.experts / (layout.ep * layout.etp)
    one_layer = StageParameters(layer.per_tp_rank(layout.tp) + layer.norms, experts, 1,
                                fp8_weight_elements(model, kind, layout.tp, layout.ep, layout.etp))
    return sum(model_state_bytes(space.run, layout.strategy(1, 1, zero, False, NO_RECOMPUTE), one_layer).values())


def fewest_layers(model, stage, offsets: int) -> tuple[dict[str, int], int]:
    """(body layers per kind, layers fewer than the default) of a stage holding as few layers as partition offsets
    allow: at least one per kind (single-kind models, where uneven partitions are searched). Cached per chunk
    placement: callers must not change the dict."""
    return _fewest_layers(model, stage.chunks, offsets)


@lru_cache(maxsize=16384)
def _fewest_layers(model, chunks: tuple, offsets: int) -> tuple[dict[str, int], int]:
    counts = {k: n for k, n in chunks_kind_counts(model, chunks).items() if n}
    least = {k: max(1, n - offsets) for k, n in counts.items()}
    return least, sum(counts.values()) - sum(least.values())


def least_static_bytes(space: SearchSpace, layout: Layout, stage: int, zero: int | None, fewer: int,
                       roles: dict | None = None) -> float:
    """The static bytes of a constrained stage (one of role_stages) under ZeRO stage `zero` (None: its lightest),
    holding `fewer` layers less than its default (an uneven partition's lightest). `roles`: the layout's
    role_static_bytes, when the caller has them."""
    statics = (role_static_bytes(space, layout) if roles is None else roles)[stage]
    zeros = statics if zero is None else (zero,)
    if not fewer:
        return float(min(statics[z] for z in zeros))
    return min(statics[z] - fewer * layer_static_bytes(space, layout, z) for z in zeros)


def item_memory_lower_bound(space: SearchSpace, item: Item) -> float:
    """Bytes every strategy of this item needs at least: on each constrained stage, the smallest static part over
    ZeRO stages plus the smallest dynamic part (full recompute, best SP)."""
    model, run = space.model, space.run
    layout, mbs, mbn = item
    inner, zeros = inner_choices(space)
    reference = layout.strategy(mbs, mbn, zeros[0], False, inner[0][1])
    layouts = stage_layouts(model, reference)
    modes = {mode for _, mode in inner}
    # the least memory of the modes searched: full keeps only the layer input, less than any other option; without
    # it, each searched option is tried
    lightest = [HEAVIEST] if HEAVIEST in modes else sorted(modes)
    sps = sorted({sp for sp, _ in inner if sp_allowed(sp, layout.tp)})
    offsets = space.partition_offset(layout)
    worst = 0.0
    for stage in sorted(set(role_stages(layout.pp))):
        least, fewer = fewest_layers(model, layouts[stage], offsets)
        static = least_static_bytes(space, layout, stage, None, fewer)
        dynamic = min(parts_total(stage_dynamic_bytes(model, run, layout.strategy(mbs, mbn, zeros[0], sp, mode),
                                                      layouts[stage], {(k, mode): n for k, n in least.items()}))
                      for sp in sps for mode in lightest)
        # states a torchtitan pipeline stage releases part of the step, at most (estimate/held_states.py)
        unheld = max((unheld_state_bound(model, run, layout.strategy(mbs, mbn, zeros[0], sp, NO_RECOMPUTE),
                                         layouts[stage]) for sp in sps), default=0.0)
        worst = max(worst, static + dynamic - unheld)
    return worst


def expand_item(space: SearchSpace, item: Item) -> ItemTable:
    """Exact per-(j, z) coefficients of one item from the full estimators' stage functions: step time exactly,
    memory exactly on the constrained stages (less memory.unheld_state_bound where a torchtitan pipeline stage
    releases states part of the step: a relaxation there), and each point's confidence margin (margins.point_margin,
    once per layout)."""
    model, cluster, run = space.model, space.cluster, space.run
    layout, mbs, mbn = item
    inner, zeros = inner_choices(space)
    reference = layout.strategy(mbs, mbn, zeros[0], False, inner[0][1])
    layouts = stage_layouts(model, reference)
    roles = [layouts[s] for s in role_stages(layout.pp)]
    zeroed = [reference.with_zero(z) for z in zeros]
    # per ZeRO stage: the DP terms of every SP setting and recompute option (they depend on where parameters sit)
    per_zero = [data_parallel_terms(model, cluster, run, strategy) for strategy in zeroed]
    allowed, times, dynamic = [], [], []
    for sp, mode in inner:
        strategy = layout.strategy(mbs, mbn, zeros[0], sp, mode)
        # offloaded activations must fit the host memory on every stage (not only the constrained ones)
        ok = sp_allowed(sp, layout.tp) and all(
            host_offload_bytes(model, run, strategy, r) <= cluster.device.host_memory_bytes
            for r in (stage_layouts(model, strategy) if recompute_option(mode).keeps == KEEPS_LAYER_INPUT else ()))
        allowed.append(ok)
        if not ok:
            times.append((0.0,) * len(zeros))
            dynamic.append((0.0,) * len(roles))
            continue
        stages = stage_times(model, cluster, run, strategy)
        p2p = p2p_per_microbatch(model, cluster, run, strategy)
        totals = [t.total + p2p for t in stages]
        pipeline = pipeline_seconds(layout.schedule, sum(stage_fill(layout.schedule, t, p2p) for t in stages),
                                    max(totals), mbn, layout.vpp, layout.pp)
        windows = overlap_windows(stages)
        times.append(tuple(pipeline + sum(data_parallel_time(terms, windows, mbn)) for terms in per_zero))
        # less the most a torchtitan pipeline stage's states released part of the step can save: a relaxation there
        dynamic.append(tuple(parts_total(stage_dynamic_bytes(model, run, strategy, r))
                             - unheld_state_bound(model, run, strategy, r) for r in roles))
    static = [tuple(parts_total(stage_static_bytes(model, run, strategy, r)) for r in roles) for strategy in zeroed]
    # an offloaded optimizer must fit the host memory on every stage (the offloaded activations beside it are left
    # to verification: the model stays a relaxation)
    runs = space.zero_stages(layout)
    zero_allowed = tuple(z in runs and all(host_optimizer_bytes(model, run, strategy, r)
                                           <= cluster.device.host_memory_bytes for r in layouts)
                         for z, strategy in zip(zeros, zeroed))
    margin = tuple(tuple(layout_point_margin(space, layout, z, sp, mode) if ok else 0 for z in zeros)
                   for (sp, mode), ok in zip(inner, allowed)) if run.confidence else ()
    return ItemTable(tuple(allowed), tuple(times), tuple(dynamic), tuple(static), zero_allowed, margin)


def widest_options(space: SearchSpace, layout: Layout) -> tuple[str, ...]:
    """Options whose layer time windows can be the widest: full (re-runs the whole forward, more than any module)
    and activation offload (host copies, which can outlast it)."""
    return tuple(m for m in space.inner_choices(layout.tp)[2]
                 if recompute_option(m).keeps == KEEPS_LAYER_INPUT) or (HEAVIEST,)
