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

from ..estimate.activations import offloaded_layer_bytes, recompute_workspace_bytes
from ..estimate.layout import kind_counts, stage_chunks, stage_layouts
from ..estimate.memory import (host_offload_bytes, host_optimizer_bytes, model_state_bytes, parts_total,
                               resident_layer_bytes, stage_dynamic_bytes, stage_static_bytes)
from ..estimate.parameters import StageParameters
from ..estimate.data_parallel import Windows, data_parallel_seconds, data_parallel_terms
from ..estimate.overlap import hidden_comms
from ..estimate.time import (layer_time, overlap_windows, p2p_crosses_node, p2p_per_microbatch, pipeline_p2p_seconds,
                             pipeline_seconds, stage_extra, stage_extra_time, stage_fill, stage_times)
from ..schedules import schedule_named
from ..rules import sp_allowed
from ..space import Layout, SearchSpace
from ..specs.recompute import HEAVIEST, KEEPS_LAYER_INPUT, NO_RECOMPUTE, recompute_option

Item = tuple[Layout, int, int]  # (layout, mbs, mbn)


@dataclass(frozen=True)
class ItemTable:
    """Exact coefficients of one batch item over inner choices j and ZeRO stages z (roles = constrained stages)."""

    allowed: tuple[bool, ...]  # [j]: SP needs tp > 1
    time: tuple[tuple[float, ...], ...]  # [j][z] seconds: pipeline + data-parallel exposure + optimizer
    dynamic: tuple[tuple[float, ...], ...]  # [j][role] bytes
    static: tuple[tuple[float, ...], ...]  # [z][role] bytes
    zero_allowed: tuple[bool, ...]  # [z]: the layout runs it (space.zero_stages), its host optimizer states fit


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


def _overlaps(space: SearchSpace, layout: Layout, sp: bool) -> frozenset:
    """The communication the layout's strategies overlap with compute (estimate/overlap.py)."""
    return hidden_comms(space.run, layout.schedule, layout.pp, layout.vpp, layout.tp, sp, layout.ep)


def _no_recompute(space: SearchSpace, layout: Layout, mbs: int, sp: bool, hidden: frozenset, memo: dict
                  ) -> _NoRecompute:
    key = (layout.tp, layout.cp, layout.ep, layout.etp, mbs, sp)
    found = memo.get((key, layout.cp_comm, hidden))
    if found is None:
        model, cluster, run = space.model, space.cluster, space.run
        per_kind = {kind: layer_time(model, cluster, run, kind, NO_RECOMPUTE, *key, layout.cp_comm, hidden).total
                    for kind, n in (("dense", model.dense_layers), ("moe", model.moe_layers)) if n}
        extra = {role: stage_extra_time(model, cluster, run, role, layout.tp, layout.cp, mbs, sp, ep=layout.ep,
                                        etp=layout.etp, cp_comm=layout.cp_comm, hidden=hidden).total
                 for role in ("first", "last", "only")}
        found = _NoRecompute(model.dense_layers * per_kind.get("dense", 0.0) + model.moe_layers * per_kind.get(
            "moe", 0.0), min(per_kind.values()), extra["first"], extra["last"], extra["only"])
        memo[(key, layout.cp_comm, hidden)] = found
    return found


def _extra_share(t: _NoRecompute, schedule: str, stage: int, pp: int) -> float:
    """The extra work the schedule gives device stage `stage` (Schedule.extra_roles) from the per-role times."""
    return sum(share * getattr(t, role) for role, share in _extra_roles(schedule, stage, pp))


@lru_cache(maxsize=4096)
def _extra_roles(schedule: str, stage: int, pp: int) -> tuple[tuple[str, float], ...]:
    return schedule_named(schedule).extra_roles(stage, pp)


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
    hidden = _overlaps(space, layout, sp)
    t = _no_recompute(space, layout, mbs, sp, hidden, memo)
    if layout.pp == 1:
        return t.body + t.only, t.body + t.only
    crosses = p2p_crosses_node(cluster, layout.tp, layout.cp, layout.dp)
    p2p = 0.0 if "p2p" in hidden else pipeline_p2p_seconds(
        model, cluster, space.run, layout.pp, layout.vpp, layout.tp, layout.cp, mbs, sp, crosses)
    total = t.body + t.first + t.last + layout.pp * p2p  # every schedule places one embedding and one head
    slowest = total / layout.pp
    if fixed:  # the ends hold the extra work under every schedule; a middle stage none
        pp = layout.pp
        first, middle, last = _layers_first_middle_last(model, pp, layout.vpp)
        slowest = max(slowest, first * t.fastest_layer + _extra_share(t, layout.schedule, 0, pp) + p2p,
                      last * t.fastest_layer + _extra_share(t, layout.schedule, pp - 1, pp) + p2p,
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
        fixed = fixed_partition or not space.options.max_offset or not space.partition_offset(layout)
        bounds.append(min(_pipeline_bound(layout, *_pipeline_no_recompute(space, layout, mbs, sp, fixed, memo), mbn)
                          for sp in sps if sp_allowed(sp, layout.tp)))
    return bounds


def _pipeline_bound(layout: Layout, total: float, slowest: float, mbn: int) -> float:
    """The schedule's pipeline from a lower bound of the stage sum and of the slowest stage: each stage's fill at
    least Schedule.fill_floor of its time."""
    schedule = schedule_named(layout.schedule)
    return pipeline_seconds(layout.schedule, schedule.fill_floor(total), slowest, mbn, layout.vpp, layout.pp)


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
    heaviest = [layer_time(model, cluster, run, k, m, layout.tp, layout.cp, layout.ep, layout.etp, mbs, sp,
                           layout.cp_comm, _overlaps(space, layout, sp))
                for k in kinds for sp in sps for m in _widest(space, layout)]
    per_layer = Windows(max(t.forward_window for t in heaviest), max(t.backward_window for t in heaviest))
    chunks = stage_chunks(model, layout.pp, layout.vpp)
    ends = sorted({0, layout.pp - 1})
    windows = {}
    for s in ends:
        layers = sum(n for _, n in chunks[s])
        extra = [stage_extra(model, cluster, run, layout.schedule, s, layout.pp, layout.tp, layout.cp, mbs, sp,
                             ep=layout.ep, etp=layout.etp, cp_comm=layout.cp_comm, hidden=_overlaps(space, layout, sp))
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


@lru_cache(maxsize=65536)
def layer_static_bytes(space: SearchSpace, layout: Layout, zero: int) -> float:
    """Model-state bytes one body layer adds to a stage under a ZeRO stage (the static memory's slope in the
    stage's layer count; single-kind models, where uneven partitions are searched)."""
    model = space.model
    layer = model.moe_layer or model.dense_layer if model.dense_layers == 0 else model.dense_layer
    experts = layer.experts / (layout.ep * layout.etp)
    one_layer = StageParameters((layer.attention + layer.mlp) / layout.tp + layer.norms, experts, 1,
                                (layer.attention + layer.mlp) / layout.tp + experts)
    return sum(model_state_bytes(space.run, layout.strategy(1, 1, zero, False, NO_RECOMPUTE), one_layer).values())


def _fewest_layers(model, stage, offsets: int) -> tuple[dict[str, int], int]:
    """(body layers per kind, layers fewer than the default) of a stage holding as few layers as partition offsets
    allow: at least one per kind (single-kind models, where uneven partitions are searched)."""
    counts = {k: n for k, n in kind_counts(model, stage).items() if n}
    least = {k: max(1, n - offsets) for k, n in counts.items()}
    return least, sum(counts.values()) - sum(least.values())


def _least_static_bytes(space: SearchSpace, layout: Layout, stage: int, zero: int | None, fewer: int) -> float:
    """_static_bytes of a stage holding `fewer` layers less than its default (an uneven partition's lightest)."""
    _, zeros = inner_choices(space)
    return min(_static_bytes(space, layout, stage, z) - fewer * layer_static_bytes(space, layout, z)
               for z in (zeros if zero is None else (zero,)))


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
        least, fewer = _fewest_layers(model, layouts[stage], offsets)
        static = _least_static_bytes(space, layout, stage, None, fewer)
        dynamic = min(parts_total(stage_dynamic_bytes(model, run, layout.strategy(mbs, mbn, zeros[0], sp, mode),
                                                      layouts[stage], {(k, mode): n for k, n in least.items()}))
                      for sp in sps for mode in lightest)
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
        times.append(tuple(pipeline + sum(data_parallel_seconds(model, cluster, run, strategy.with_zero(z), windows))
                           for z in zeros))
        dynamic.append(tuple(parts_total(stage_dynamic_bytes(model, run, strategy, r)) for r in roles))
    static = [tuple(parts_total(stage_static_bytes(model, run, reference.with_zero(z), r)) for r in roles)
              for z in zeros]
    # an offloaded optimizer must fit the host memory on every stage (the offloaded activations beside it are left
    # to verification: the model stays a relaxation)
    runs = space.zero_stages(layout)
    zero_allowed = tuple(z in runs and all(host_optimizer_bytes(model, run, reference.with_zero(z), r)
                                           <= cluster.device.host_memory_bytes for r in layouts) for z in zeros)
    return ItemTable(tuple(allowed), tuple(times), tuple(dynamic), tuple(static), zero_allowed)


def _data_parallel_floors(space: SearchSpace, item: Item, sp: bool, zeros) -> list[float]:
    """Per ZeRO stage: seconds of DP/ZeRO exposure plus optimizer step no plan of this layout can avoid (partition
    fixed): each stage's overlap window is at most its backward plus a full-recompute forward of every layer, and
    exposure only shrinks as the window grows."""
    model, cluster, run = space.model, space.cluster, space.run
    layout, mbs, mbn = item
    heavy = [layout.strategy(mbs, mbn, zeros[0], sp, m) for m in _widest(space, layout)]
    times = [stage_times(model, cluster, run, h) for h in heavy]
    widest = [Windows(max(t.forward_window for t in ts), max(t.backward_window for t in ts)) for ts in zip(*times)]
    return [sum(data_parallel_seconds(model, cluster, run, heavy[0].with_zero(z), widest)) for z in zeros]


def _widest(space: SearchSpace, layout: Layout) -> tuple[str, ...]:
    """Options whose layer time windows can be the widest: full (re-runs the whole forward, more than any module)
    and activation offload (host copies, which can outlast it)."""
    return tuple(m for m in space.inner_choices(layout.tp)[2]
                 if recompute_option(m).keeps == KEEPS_LAYER_INPUT) or (HEAVIEST,)


def host_bytes_per_layer(space: SearchSpace, base, stage, kind: str, mode: str) -> float:
    """Host memory one body layer of (kind, mode) takes on a stage: what it offloads per micro-batch times the
    micro-batches in flight (0 unless the option offloads)."""
    theta = (base.tp, base.cp, base.ep, base.etp, base.mbs, base.sp)
    return offloaded_layer_bytes(space.model, space.run, kind, mode, *theta) * stage.in_flight_chunks / base.vpp


def host_room(space: SearchSpace, base, stage, zeros) -> float:
    """Host memory left for offloaded activations on a stage: the host memory less an offloaded optimizer's states
    at the lightest of `zeros` (none given: no states, as with uneven partitions, where a stage may hold fewer layers:
    the room is never underestimated)."""
    states = min((host_optimizer_bytes(space.model, space.run, base.with_zero(z), stage) for z in zeros), default=0.0)
    return space.cluster.device.host_memory_bytes - states


@dataclass(frozen=True)
class _Shed:
    """What one constrained stage must shed under one ZeRO stage (see _bytes_to_shed)."""

    excess: float  # bytes recompute must save
    counts: dict  # body layers per kind
    per_layer: dict  # resident bytes per (kind, mode)
    offloading: tuple[str, ...]  # the modes that put activations on the host
    offload_layers: int  # the most layers the host memory holds offloaded


def _bytes_to_shed(space: SearchSpace, layout: Layout, base, offsets: int, zeros) -> dict:
    """Per ZeRO stage of `zeros` (None: the lightest) whose memory can fit at all, per constrained stage: a _Shed; a
    ZeRO stage is left out when even the heaviest recompute of every layer (offload only on as many layers as the
    host memory holds) cannot fit. Memory with no recompute is counted in whole bytes as reported, plus the smallest
    recompute workspace once anything recomputes; with offsets (single-kind models) the stage may hold as few as
    default - offset layers."""
    model, run = space.model, space.run
    capacity = run.capacity(space.cluster.device.memory_bytes)
    theta = (base.tp, base.cp, base.ep, base.etp, base.mbs, base.sp)
    layouts = stage_layouts(model, base)
    modes = tuple(space.inner_choices(base.tp)[2])
    out = {z: {} for z in zeros}
    for s in sorted(set(role_stages(base.pp))):
        stage = layouts[s]
        counts, fewer = _fewest_layers(model, stage, offsets)
        per_layer = {(k, m): resident_layer_bytes(model, run, base, stage, k, m) for k in counts
                     for m in modes + (NO_RECOMPUTE,)}
        host = {(k, m): host_bytes_per_layer(space, base, stage, k, m) for k in counts for m in modes}
        offloading = tuple(m for m in modes if any(host[(k, m)] > 0 for k in counts))
        fixed = parts_total(stage_dynamic_bytes(model, run, base, stage, counts={}))
        plain = fixed + int(sum(n * per_layer[(k, NO_RECOMPUTE)] for k, n in counts.items())) - capacity
        saves = {key: per_layer[(key[0], NO_RECOMPUTE)] - b for key, b in per_layer.items()}
        rest = {k: max(saves[(k, m)] for m in modes if m not in offloading) for k in counts}
        gain = max((saves[(k, m)] - rest[k] for k in counts for m in offloading), default=0.0)
        least_host = min((host[(k, m)] for k in counts for m in offloading), default=0.0)
        for z in [z for z in out if out[z] is not None]:
            room = host_room(space, base, stage, () if z is None else (z,))
            held = int(min(sum(counts.values()), max(0.0, room) // least_host)) if least_host > 0 else 0
            excess = _least_static_bytes(space, layout, s, z, fewer) + plain
            if excess > 0:  # some layer must recompute, and its backward rematerialises at least this much
                excess += min((recompute_workspace_bytes(model, run, k, m, *theta) for k in counts
                               for m in modes if m != NO_RECOMPUTE), default=0.0)
            # the most recompute can save: each layer its best option, offload on at most `held` layers
            most = sum(n * rest[k] for k, n in counts.items()) + held * max(0.0, gain)
            out[z] = None if excess > most else {**out[z], s: _Shed(excess, counts, per_layer, offloading, held)}
    return {z: shed for z, shed in out.items() if shed is not None}


def recompute_cost_floor(shed: float, layers: int, points: list[tuple[float, float]],
                         capped: tuple[float, float, float] | None = None) -> float:
    """The least seconds `layers` layers can add to save `shed` bytes, each layer taking one option of `points`
    (bytes saved, seconds added; any kind): layers x env(shed / layers), env the lower convex envelope of the points
    and (0, 0) -- a lower bound, as sum_l cost_l >= sum_l env(save_l) >= layers x env(mean save) (env is convex and,
    with costs >= 0, non-decreasing); the LP relaxation of the multiple-choice knapsack.

    `capped` = (bytes saved, seconds added, most layers): one more option that at most that many layers may take
    (activation offload, bounded by the host memory). With t layers taking it, the others are the problem above for
    layers - t layers and shed - t x saved bytes: a function of t that is convex (the perspective of a convex function
    on an affine path) and linear between the t at which the mean save the others need crosses a vertex of env
    (where it reaches 0 or env's last vertex, the t that can shed enough end). Its least value over the t that can
    shed enough lies at one of those t or at an end, and all of them are tried: the exact LP bound."""
    if shed <= 0 or layers <= 0:
        return 0.0
    hull = _envelope(points)
    if capped is None or capped[2] <= 0 or capped[0] <= 0:
        return _floor_on(hull, shed, layers)
    saved, cost, most = capped
    top = min(float(layers), float(most))
    trials = {0.0, top}
    for x, _ in hull:  # (shed - t saved) / (layers - t) = x
        if saved != x:
            t = (shed - x * layers) / (saved - x)
            if 0.0 < t < top:
                trials.add(t)
    reach = hull[-1][0]  # the most any other option saves per layer

    def others(t: float) -> float | None:
        left, rest = shed - t * saved, layers - t
        if left <= 0:
            return 0.0
        if rest <= 0 or left > reach * rest * (1 + 1e-12):
            return None  # the other layers cannot shed what is left
        return _floor_on(hull, left, rest)

    costs = [t * max(0.0, cost) + rest for t in sorted(trials) if (rest := others(t)) is not None]
    # no t sheds enough: the memory test refuses the item; the floor without the cap is never above the others
    return min(costs) if costs else _floor_on(_envelope(points + [(saved, cost)]), shed, layers)


def _envelope(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The lower convex envelope of (0, 0) and the points that save bytes (costs floored at 0), left to right."""
    hull = [(0.0, 0.0)]
    cheapest: dict[float, float] = {}
    for x, y in points:
        if x > 0:
            cheapest[x] = min(cheapest.get(x, y), max(0.0, y))
    for x, y in sorted(cheapest.items()):
        while len(hull) >= 2 and ((hull[-1][0] - hull[-2][0]) * (y - hull[-2][1])
                                  <= (hull[-1][1] - hull[-2][1]) * (x - hull[-2][0])):
            hull.pop()  # hull[-1] lies on or above the segment from hull[-2] to (x, y)
        hull.append((x, y))
    return hull


def _floor_on(hull: list[tuple[float, float]], shed: float, layers: float) -> float:
    """layers x env(shed / layers) on an envelope; past its last vertex (more than any option saves: the memory test
    refuses it) its last cost, never below."""
    if shed <= 0:
        return 0.0
    need = shed / layers
    for (x0, y0), (x1, y1) in zip(hull, hull[1:]):
        if need <= x1:
            return layers * (y0 + (y1 - y0) * (need - x0) / (x1 - x0))
    return layers * hull[-1][1]


def item_plan_lower_bound(space: SearchSpace, item: Item) -> float | None:
    """item_plan_lower_bounds' least bound over SP settings, or None when no plan of the item can fit."""
    return min(item_plan_lower_bounds(space, item).values(), default=None)


def item_plan_lower_bounds(space: SearchSpace, item: Item) -> dict[bool, float]:
    """A tighter bound for per-layer plans (uniform ones included), per SP setting; a setting is left out when no
    plan of the item with it can fit.

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
    modes = tuple(space.inner_choices(layout.tp)[2])
    offsets = space.partition_offset(layout)
    best = {}
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
        hidden = _overlaps(space, layout, sp)
        kinds = [k for k, n in (("dense", model.dense_layers), ("moe", model.moe_layers)) if n]
        times = {(k, m): layer_time(model, cluster, run, k, m, *theta, layout.cp_comm, hidden).total
                 for k in kinds for m in modes + (NO_RECOMPUTE,)}
        for zero, shed in sheds.items():
            slowest, extra_sum = (stage_sum / layout.pp if offsets else max(plain)), 0.0
            for s, stage in shed.items():
                counts, per_layer = stage.counts, stage.per_layer
                point = {(k, m): (per_layer[(k, NO_RECOMPUTE)] - per_layer[(k, m)],
                                  times[(k, m)] - times[(k, NO_RECOMPUTE)]) for k in counts for m in modes}
                # offload within the host memory: on at most offload_layers layers, with the best saving and the
                # least time of any offloading (kind, mode) (a relaxation of each layer's own)
                offload = [p for (_, m), p in point.items() if m in stage.offloading]
                capped = (max(x for x, _ in offload), min(y for _, y in offload),
                          stage.offload_layers) if offload else None
                extra = recompute_cost_floor(max(0.0, stage.excess), sum(counts.values()),
                                             [p for (_, m), p in point.items() if m not in stage.offloading], capped)
                if offsets:
                    plain_time = (sum(n * times[(k, NO_RECOMPUTE)] for k, n in counts.items()) + p2p
                                  + stage_extra(model, cluster, run, layout.schedule, s, layout.pp, layout.tp,
                                                layout.cp, mbs, sp, ep=layout.ep, etp=layout.etp,
                                                cp_comm=layout.cp_comm, hidden=hidden).total)
                else:
                    plain_time = plain[s]
                slowest = max(slowest, plain_time + extra)
                extra_sum += extra
            total = stage_sum + extra_sum
            bound = _pipeline_bound(layout, total, max(slowest, total / layout.pp), mbn) + floors.get(zero, 0.0)
            best[sp] = min(best.get(sp, bound), bound)
    return best
