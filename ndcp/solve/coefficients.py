"""Per-choice coefficients for the CP-SAT model, taken from the full estimators' own stage functions.

A candidate is (batch item i = layout + mbs + mbn, inner choice j = (sp, recompute), ZeRO stage z). Its step time
splits exactly into pipeline(i, j) + data_parallel(i, j, z) and its memory on stage s into static_s(i, z) +
dynamic_s(i, j) (estimate.time / estimate.memory).

Levels of coefficients, all never above the full estimators (so the model is a proven relaxation; a property test
checks the bounds against the estimators), each costlier and tighter than the one before:
- `item_lower_bounds`: one number per batch item, valid for every j and z and every per-layer plan (docs/solver.md
  §3.3, approach C): no recompute (recompute only adds time), stages balanced (or, with the partition fixed, each at
  least its own layers and extra work), no DP exposure, memory ignored.
- `item_data_parallel_floor`: what the DP sync and optimizer step cost at least, added to that bound.
- `item_plan_lower_bound`: memory-aware (the recompute the first, second and last stage must do to fit, as a
  fractional knapsack), exact stage times for a fixed partition, and the DP floor; None when no plan can fit.
  `item_memory_lower_bound`: the least memory of an item (to explain infeasibility).
- `expand_item`: exact step time for each (j, z) of one item, and memory exact on the stages the model constrains
  (first, second, last).
The certificate loop expands items in order of their bounds, so most items never need exact coefficients.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..estimate.activations import recompute_workspace_bytes
from ..estimate.layout import kind_counts, stage_chunks, stage_layouts
from ..estimate.memory import parts_total, resident_layer_bytes, stage_dynamic_bytes, stage_static_bytes
from ..estimate.data_parallel import Windows, data_parallel_seconds, data_parallel_terms
from ..estimate.time import (layer_time, overlap_windows, p2p_crosses_node, p2p_per_microbatch, pipeline_p2p_seconds, pipeline_seconds,
                             stage_extra_time, stage_role, stage_times)
from ..rules import sp_allowed
from ..space import Layout, SearchSpace
from ..specs.recompute import HEAVIEST, HEAVIEST_FIRST, NO_RECOMPUTE, RECOMPUTE_MODES, RECOMPUTING

Item = tuple[Layout, int, int]  # (layout, mbs, mbn)


@dataclass(frozen=True)
class ItemTable:
    """Exact coefficients of one batch item over inner choices j and ZeRO stages z (roles = constrained stages)."""

    allowed: tuple[bool, ...]  # [j]: SP needs tp > 1
    time: tuple[tuple[float, ...], ...]  # [j][z] seconds: pipeline + data-parallel exposure + optimizer
    dynamic: tuple[tuple[float, ...], ...]  # [j][role] bytes
    static: tuple[tuple[float, ...], ...]  # [z][role] bytes


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
    fastest_layer: float  # the fastest body layer kind
    first: float  # extra work of the first stage (embedding), of the last (output head, loss, MTP), of a lone one
    last: float
    only: float


def _no_recompute(space: SearchSpace, layout: Layout, mbs: int, sp: bool, memo: dict) -> _NoRecompute:
    key = (layout.tp, layout.cp, layout.ep, layout.etp, mbs, sp)
    found = memo.get((key, layout.cp_comm))
    if found is None:
        model, cluster, run = space.model, space.cluster, space.run
        per_kind = {kind: layer_time(model, cluster, run, kind, NO_RECOMPUTE, *key, layout.cp_comm).total
                    for kind, n in (("dense", model.dense_layers), ("moe", model.moe_layers)) if n}
        extra = {role: stage_extra_time(model, cluster, run, role, layout.tp, layout.cp, mbs, sp, ep=layout.ep,
                                        etp=layout.etp, cp_comm=layout.cp_comm).total
                 for role in ("first", "last", "only")}
        found = _NoRecompute(model.dense_layers * per_kind.get("dense", 0.0) + model.moe_layers * per_kind.get(
            "moe", 0.0), min(per_kind.values()), extra["first"], extra["last"], extra["only"])
        memo[(key, layout.cp_comm)] = found
    return found


@lru_cache(maxsize=4096)
def _layers_first_middle_last(model, pp: int, vpp: int) -> tuple[int, int, int]:
    """Body layers on the first device stage, the fullest middle one (0 if none) and the last, default partition."""
    per_stage = [sum(n for _, n in chunks) for chunks in stage_chunks(model, pp, vpp)]
    return per_stage[0], max(per_stage[1:-1], default=0), per_stage[-1]


def _pipeline_no_recompute(space: SearchSpace, layout: Layout, mbs: int, sp: bool, fixed: bool,
                           memo: dict) -> tuple[float, float]:
    """(sum over device stages, a lower bound of the slowest stage) of one micro-batch's stage times with no
    recompute. The sum is exact; the slowest is the balanced share, or with the partition `fixed`, also each
    stage's layers at the fastest layer kind plus its extra work."""
    model, cluster = space.model, space.cluster
    t = _no_recompute(space, layout, mbs, sp, memo)
    if layout.pp == 1:
        return t.body + t.only, t.body + t.only
    crosses = p2p_crosses_node(cluster, layout.tp, layout.cp, layout.dp)
    p2p = pipeline_p2p_seconds(model, cluster, space.run, layout.pp, layout.vpp, layout.tp, layout.cp, mbs, sp,
                               crosses)
    total = t.body + t.first + t.last + layout.pp * p2p
    slowest = total / layout.pp
    if fixed:
        first, middle, last = _layers_first_middle_last(model, layout.pp, layout.vpp)
        slowest = max(slowest, first * t.fastest_layer + t.first + p2p, last * t.fastest_layer + t.last + p2p,
                      middle * t.fastest_layer + p2p)
    return total, slowest


def item_lower_bounds(space: SearchSpace, items, check=None, fixed_partition: bool = False) -> list[float]:
    """Seconds no strategy of each item can beat: no recompute, the best SP, no DP exposure or optimizer time, and
    stages balanced unless the partition is fixed (space.partition_offset, or `fixed_partition`: the bound of the
    default partition's plans only) (docs/solver.md §3.3). Cheap: the per-layer terms are shared across items.
    `check()` is called every 256 items (the caller's deadline or interrupt)."""
    inner, _ = inner_choices(space)
    sps = sorted({sp for sp, _ in inner})
    memo: dict = {}
    bounds = []
    for n, (layout, mbs, mbn) in enumerate(items):
        if check is not None and n % 256 == 0:
            check()
        fixed = fixed_partition or not space.partition_offset(layout)
        bounds.append(min(pipeline_seconds(layout.schedule,
                                           *_pipeline_no_recompute(space, layout, mbs, sp, fixed, memo), mbn,
                                           layout.vpp) for sp in sps if sp_allowed(sp, layout.tp)))
    return bounds


def item_lower_bound(space: SearchSpace, item: Item) -> float:
    """item_lower_bounds for one item, its partition fixed at the default (whatever space.partition_offset allows)."""
    return item_lower_bounds(space, [item], fixed_partition=True)[0]


def item_data_parallel_floor(space: SearchSpace, item: Item) -> float:
    """Seconds of DP/ZeRO exposure plus optimizer step that every strategy of this item pays, cheaply: on the first
    and last stages (a lower bound of the worst stage), with overlap windows no shorter than any plan's: every layer
    at its heaviest recompute and best-hiding SP setting, plus the extra work's (exposure shrinks as a window
    grows). Needs the partition fixed; with offsets allowed it is 0."""
    model, cluster, run = space.model, space.cluster, space.run
    layout, mbs, mbn = item
    if space.partition_offset(layout):
        return 0.0
    inner, zeros = inner_choices(space)
    kinds = [k for k, n in (("dense", model.dense_layers), ("moe", model.moe_layers)) if n]
    sps = {sp for sp, _ in inner if sp_allowed(sp, layout.tp)}
    heaviest = [layer_time(model, cluster, run, k, HEAVIEST, layout.tp, layout.cp, layout.ep, layout.etp, mbs, sp,
                           layout.cp_comm)
                for k in kinds for sp in sps]
    per_layer = Windows(max(t.forward_window for t in heaviest), max(t.backward_window for t in heaviest))
    chunks = stage_chunks(model, layout.pp, layout.vpp)
    ends = sorted({0, layout.pp - 1})
    windows = {}
    for s in ends:
        layers = sum(n for _, n in chunks[s])
        extra = [stage_extra_time(model, cluster, run, stage_role(s, layout.pp), layout.tp, layout.cp, mbs, sp,
                                  ep=layout.ep, etp=layout.etp, cp_comm=layout.cp_comm)
                 for sp in (False, layout.tp > 1)]
        windows[s] = Windows(layers * per_layer.forward + max(t.forward_window for t in extra),
                             layers * per_layer.backward + max(t.backward_window for t in extra))
    best = float("inf")
    for z in zeros:
        terms = data_parallel_terms(model, cluster, run, layout.strategy(mbs, mbn, z, False, NO_RECOMPUTE))
        best = min(best, max(terms[s].exposed(windows[s], mbn) for s in ends) + max(terms[s].optimizer for s in ends))
    return best


@lru_cache(maxsize=65536)
def _static_bytes(space: SearchSpace, layout: Layout, stage: int, zero: int | None = None) -> int:
    """A stage's static bytes (model states, ZeRO-3 buffers) under one ZeRO stage, or None: its lightest one. They
    depend only on the layout, so items sharing it share this."""
    _, zeros = inner_choices(space)
    strategies = [layout.strategy(1, 1, z, False, NO_RECOMPUTE) for z in (zeros if zero is None else (zero,))]
    at = stage_layouts(space.model, strategies[0])[stage]
    return min(parts_total(stage_static_bytes(space.model, space.run, s, at)) for s in strategies)


def item_memory_lower_bound(space: SearchSpace, item: Item) -> float:
    """Bytes every strategy of this item needs at least: on each constrained stage, the smallest static part over
    ZeRO stages plus the smallest dynamic part (full recompute, best SP)."""
    model, run = space.model, space.run
    layout, mbs, mbn = item
    inner, zeros = inner_choices(space)
    reference = layout.strategy(mbs, mbn, zeros[0], False, inner[0][1])
    layouts = stage_layouts(model, reference)
    modes = {mode for _, mode in inner}
    lightest = next(m for m in HEAVIEST_FIRST if m in modes)  # the least memory of the modes searched
    sps = sorted({sp for sp, _ in inner if sp_allowed(sp, layout.tp)})
    worst = 0.0
    for stage in sorted(set(role_stages(layout.pp))):
        static = _static_bytes(space, layout, stage)
        dynamic = min(parts_total(stage_dynamic_bytes(model, run, layout.strategy(mbs, mbn, zeros[0], sp, lightest),
                                              layouts[stage])) for sp in sps)
        worst = max(worst, static + dynamic)
    return worst


def expand_item(space: SearchSpace, item: Item) -> ItemTable:
    """Exact per-(j, z) coefficients of one item from the full estimators' stage functions: step time exactly,
    memory exactly on the constrained stages."""
    model, cluster, run = space.model, space.cluster, space.run
    layout, mbs, mbn = item
    inner, zeros = inner_choices(space)
    reference = layout.strategy(mbs, mbn, zeros[0], False, inner[0][1])
    layouts = stage_layouts(model, reference)
    roles = [layouts[s] for s in role_stages(layout.pp)]
    allowed, times, dynamic = [], [], []
    for sp, mode in inner:
        ok = sp_allowed(sp, layout.tp)
        allowed.append(ok)
        if not ok:
            times.append((0.0,) * len(zeros))
            dynamic.append((0.0,) * len(roles))
            continue
        strategy = layout.strategy(mbs, mbn, zeros[0], sp, mode)
        stages = stage_times(model, cluster, run, strategy)
        p2p = p2p_per_microbatch(model, cluster, run, strategy)
        totals = [t.total + p2p for t in stages]
        pipeline = pipeline_seconds(layout.schedule, sum(totals), max(totals), mbn, layout.vpp)
        windows = overlap_windows(stages)
        times.append(tuple(pipeline + sum(data_parallel_seconds(model, cluster, run, strategy.with_zero(z), windows))
                           for z in zeros))
        dynamic.append(tuple(parts_total(stage_dynamic_bytes(model, run, strategy, r)) for r in roles))
    static = [tuple(parts_total(stage_static_bytes(model, run, reference.with_zero(z), r)) for r in roles)
              for z in zeros]
    return ItemTable(tuple(allowed), tuple(times), tuple(dynamic), tuple(static))


def _data_parallel_floors(space: SearchSpace, item: Item, sp: bool, zeros) -> list[float]:
    """Per ZeRO stage: seconds of DP/ZeRO exposure plus optimizer step no plan of this layout can avoid (partition
    fixed): each stage's overlap window is at most its backward plus a full-recompute forward of every layer, and
    exposure only shrinks as the window grows."""
    model, cluster, run = space.model, space.cluster, space.run
    layout, mbs, mbn = item
    full = layout.strategy(mbs, mbn, zeros[0], sp, HEAVIEST)
    widest = overlap_windows(stage_times(model, cluster, run, full))
    return [sum(data_parallel_seconds(model, cluster, run, full.with_zero(z), widest)) for z in zeros]


def _bytes_to_shed(space: SearchSpace, layout: Layout, base, offsets: int, zeros) -> dict:
    """Per ZeRO stage of `zeros` (None: the lightest) whose memory can fit at all, per constrained stage: (bytes
    recompute must save, body layers per kind, resident bytes per (kind, mode)); a ZeRO stage is left out when even
    full recompute of every layer cannot fit. Memory with no recompute is counted in whole bytes as reported, plus
    the smallest recompute workspace once anything recomputes; with offsets (single-kind models) the stage may hold
    as few as default - offset layers."""
    model, run = space.model, space.run
    capacity = run.capacity(space.cluster.device.memory_bytes)
    theta = (base.tp, base.cp, base.ep, base.etp, base.mbs, base.sp)
    layouts = stage_layouts(model, base)
    out = {z: {} for z in zeros}
    for s in sorted(set(role_stages(base.pp))):
        stage = layouts[s]
        counts = {k: n for k, n in kind_counts(model, stage).items() if n}
        if offsets:
            counts = {k: max(1, n - offsets) for k, n in counts.items()}
        per_layer = {(k, m): resident_layer_bytes(model, run, base, stage, k, m) for k in counts
                     for m in RECOMPUTE_MODES}
        fixed = parts_total(stage_dynamic_bytes(model, run, base, stage, counts={}))
        plain = fixed + int(sum(n * per_layer[(k, NO_RECOMPUTE)] for k, n in counts.items())) - capacity
        most = sum(n * (per_layer[(k, NO_RECOMPUTE)] - per_layer[(k, HEAVIEST)]) for k, n in counts.items())
        for z in [z for z in out if out[z] is not None]:
            excess = _static_bytes(space, layout, s, z) + plain
            if excess > 0:  # some layer must recompute, and its backward rematerialises at least this much
                excess += min(recompute_workspace_bytes(model, run, k, m, *theta) for k in counts
                              for m in RECOMPUTING)
            out[z] = None if excess > most else {**out[z], s: (excess, counts, per_layer)}
    return {z: shed for z, shed in out.items() if shed is not None}


def item_plan_lower_bound(space: SearchSpace, item: Item) -> float | None:
    """A tighter bound for per-layer plans (uniform ones included), or None when no plan of the item can fit.

    Pipeline: with the partition fixed (space.partition_offset 0) every stage's time with no recompute is
    exact and recompute only adds to it; otherwise stages are taken as balanced. Memory: the first, second and last
    stages must shed `_bytes_to_shed` bytes by recompute, which costs at least that many bytes times the cheapest
    seconds-per-byte any recompute mode offers (a fractional knapsack); the stage then takes at least that much
    longer, which lifts both the slowest stage and the stage sum. Data parallel: with the partition fixed, per ZeRO
    stage (its memory decides the recompute, its sync the exposure), `_data_parallel_floors`; else nothing, and the
    lightest ZeRO stage's memory."""
    model, cluster, run = space.model, space.cluster, space.run
    layout, mbs, mbn = item
    inner, zeros = inner_choices(space)
    offsets = space.partition_offset(layout)
    best = None
    for sp in sorted({sp for sp, _ in inner if sp_allowed(sp, layout.tp)}):
        base = layout.strategy(mbs, mbn, zeros[0], sp, NO_RECOMPUTE)
        # memory first: most items that fail, fail here
        sheds = _bytes_to_shed(space, layout, base, offsets, [None] if offsets else zeros)
        if not sheds:
            continue
        theta = (layout.tp, layout.cp, layout.ep, layout.etp, mbs, sp)
        p2p = p2p_per_microbatch(model, cluster, run, base)
        plain = [t.total + p2p for t in stage_times(model, cluster, run, base)]
        stage_sum = sum(plain)
        floors = dict(zip(zeros, _data_parallel_floors(space, item, sp, zeros))) if not offsets else {}
        for zero, shed in sheds.items():
            slowest, extra_sum = (stage_sum / layout.pp if offsets else max(plain)), 0.0
            for s, (excess, counts, per_layer) in shed.items():
                times = {(k, m): layer_time(model, cluster, run, k, m, *theta, layout.cp_comm).total for k in counts
                         for m in RECOMPUTE_MODES}
                ratios = [(times[(k, m)] - times[(k, NO_RECOMPUTE)])
                          / (per_layer[(k, NO_RECOMPUTE)] - per_layer[(k, m)])
                          for k in counts for m in RECOMPUTING if per_layer[(k, NO_RECOMPUTE)] > per_layer[(k, m)]]
                extra = max(0.0, excess) * min(ratios, default=0.0)
                if offsets:
                    plain_time = (sum(n * times[(k, NO_RECOMPUTE)] for k, n in counts.items()) + p2p
                                  + stage_extra_time(model, cluster, run, stage_role(s, layout.pp), layout.tp,
                                                     layout.cp, mbs, sp, ep=layout.ep, etp=layout.etp,
                                                     cp_comm=layout.cp_comm).total)
                else:
                    plain_time = plain[s]
                slowest = max(slowest, plain_time + extra)
                extra_sum += extra
            total = stage_sum + extra_sum
            bound = (pipeline_seconds(layout.schedule, total, max(slowest, total / layout.pp), mbn, layout.vpp)
                     + floors.get(zero, 0.0))
            best = bound if best is None else min(best, bound)
    return best
