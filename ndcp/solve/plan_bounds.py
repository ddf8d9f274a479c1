"""Level 3 of the item bounds (docs/solver.md §4): memory-aware lower bounds for per-layer plans (uniform ones
included), per batch item and SP setting. The constrained stages must shed the bytes above the capacity by recompute
or offload (`_bytes_to_shed`), which costs at least the multiple-choice knapsack's LP value (`recompute_cost_floor`,
offload within the host memory); with the partition fixed, each ZeRO stage's data-parallel exposure is bounded
together with the recompute that widens its overlap windows. Never above the full estimators (tests/solve/
test_bounds.py checks them against the estimators and the oracle)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from ..estimate.activations import recompute_workspace_bytes
from ..estimate.data_parallel import data_parallel_terms
from ..estimate.layout import stage_layouts
from ..estimate.keys import Degrees, StageKey
from ..estimate.layer_time import layer_time
from ..estimate.time import p2p_per_microbatch, stage_extra, stage_times
from ..rules import sp_allowed
from ..space import Layout, SearchSpace
from ..specs.recompute import HOST_OFFLOAD, NO_RECOMPUTE, recompute_option
from .coefficients import (Item, fewest_layers, inner_choices, least_static_bytes, overlaps, pipeline_bound,
                           role_stages, role_static_bytes)
from .margins import layout_margins
from .plan_form import host_room, stage_memory


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
    host memory holds) cannot fit within the capacity less the least confidence margin of its plans. Memory with no recompute is counted in whole bytes as reported, plus the smallest
    recompute workspace once anything recomputes; with offsets (single-kind models) the stage may hold as few as
    default - offset layers."""
    model, run = space.model, space.run
    capacity = run.capacity(space.cluster.device.memory_bytes)
    degrees = Degrees.of_strategy(base)
    layouts = stage_layouts(model, base)
    modes = tuple(space.inner_choices(base.tp)[2])
    offloads = tuple(m for m in modes if HOST_OFFLOAD in recompute_option(m).reruns)  # the others take no host memory
    out = {z: {} for z in zeros}
    # per ZeRO stage: the least confidence margin of its plans (margins.py), the same on every stage
    margins = layout_margins(space, layout, base.sp, base.zero, modes, tuple(zeros))
    statics = role_static_bytes(space, layout)
    # the last stage first: with the output head's logits (and MTP) it is where most items that cannot fit fail
    # (DeepSeek-V3 on 2,048 H800 under 40 GiB: 2,491 of the 2,497 item and SP pairs at level 3 that cannot fit, 1,226
    # there alone; GPT-3 175B on 64 A100: 376 of 406, every one on the first stage too)
    first, second, last = role_stages(base.pp)
    for s in dict.fromkeys((last, first, second)):
        if all(shed is None for shed in out.values()):
            break  # no ZeRO stage fits on a stage already checked: the item cannot fit whatever the others hold
        stage = layouts[s]
        counts, fewer = fewest_layers(model, stage, offsets)
        per_layer, host, fixed, _ = stage_memory(space, base, stage,
                                              tuple((k, m) for k in counts for m in modes + (NO_RECOMPUTE,)),
                                              tuple((k, m) for k in counts for m in offloads), hidden=False)
        offloading = tuple(m for m in offloads if any(host[(k, m)] > 0 for k in counts))
        plain = fixed + int(sum(n * per_layer[(k, NO_RECOMPUTE)] for k, n in counts.items())) - capacity
        saves = {key: per_layer[(key[0], NO_RECOMPUTE)] - b for key, b in per_layer.items()}
        # a layer off the host saves what its best other option saves: nothing when offload is all that is searched
        rest = {k: max((saves[(k, m)] for m in modes if m not in offloading), default=0.0) for k in counts}
        gain = max((saves[(k, m)] - rest[k] for k in counts for m in offloading), default=0.0)
        least_host = min((host[(k, m)] for k in counts for m in offloading), default=0.0)
        workspace = _least_workspace(model, run, tuple(counts), modes, degrees)
        for z in [z for z in out if out[z] is not None]:
            room = host_room(space, base, stage, () if z is None else (z,))
            held = int(min(sum(counts.values()), max(0.0, room) // least_host)) if least_host > 0 else 0
            # the least confidence margin of any plan under z (margins.py): what fits is that much less
            excess = least_static_bytes(space, layout, s, z, fewer, statics) + plain + margins[z]
            if excess > 0:  # some layer must recompute
                excess += workspace
            # the most recompute can save: each layer its best option, offload on at most `held` layers
            most = sum(n * rest[k] for k, n in counts.items()) + held * max(0.0, gain)
            out[z] = None if excess > most else {**out[z], s: _Shed(excess, counts, per_layer, offloading, held)}
    return {z: dict(sorted(shed.items())) for z, shed in out.items() if shed is not None}  # stages in model order


@lru_cache(maxsize=16384)
def _least_workspace(model, run, kinds: tuple[str, ...], modes: tuple[str, ...], degrees: Degrees) -> float:
    """Once any layer recomputes, its backward rematerialises at least this much (the least recompute workspace of
    any kind and recomputing mode)."""
    return min((recompute_workspace_bytes(model, run, k, m, degrees) for k in kinds for m in modes
                if m != NO_RECOMPUTE), default=0.0)


@dataclass(frozen=True)
class _StageOptions:
    """One constrained stage's recompute options as (bytes saved, seconds added) per layer, whatever the ZeRO stage:
    the points of the options that keep activations on the device and their envelope, and the best saving and least
    time of any offloading (kind, mode), or None."""

    points: list
    hull: list
    offload: tuple[float, float] | None

    @staticmethod
    def of(stage: _Shed, times: dict, modes: tuple[str, ...]) -> "_StageOptions":
        per_layer, offloading, points, offload = stage.per_layer, stage.offloading, [], []
        for k in stage.counts:
            kept, took = per_layer[(k, NO_RECOMPUTE)], times[(k, NO_RECOMPUTE)]
            for m in modes:
                (offload if m in offloading else points).append((kept - per_layer[(k, m)], times[(k, m)] - took))
        best = (max(x for x, _ in offload), min(y for _, y in offload)) if offload else None
        return _StageOptions(points, _envelope(points), best)


def recompute_cost_floor(shed: float, layers: int, points: list[tuple[float, float]],
                         capped: tuple[float, float, float] | None = None, hull: list | None = None) -> float:
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
    hull = hull or _envelope(points)  # `hull`: the envelope of `points`, when the caller has it
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
    cheapest: dict[float, float] = {}
    for x, y in points:
        if x > 0:
            cheapest[x] = min(cheapest.get(x, y), max(0.0, y))
    return lower_hull([(0.0, 0.0)] + sorted(cheapest.items()))


def lower_hull(points: list) -> list:
    """The vertices of the lower convex hull of `points`, given with x rising (distinct x)."""
    hull: list = []
    for x, y in points:
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
    stage (its memory decides the recompute, its sync the exposure), the pipeline and the exposure bounded together
    through each constrained stage (_Stretch); else nothing, and the lightest ZeRO stage's memory. The least over
    ZeRO stages: one whose bound passes the least found so far is not tightened further."""
    layout = item[0]
    inner, _ = inner_choices(space)
    best = {}
    for sp in sorted({sp for sp, _ in inner if sp_allowed(sp, layout.tp)}):
        per_zero = zero_plan_lower_bounds(space, item, sp, least_only=True)
        if per_zero:
            best[sp] = min(per_zero.values())
    return best


def zero_plan_lower_bounds(space: SearchSpace, item: Item, sp: bool, least_only: bool = False
                           ) -> dict[int | None, float]:
    """item_plan_lower_bounds of one SP setting per ZeRO stage (None: every ZeRO stage at once, with uneven
    partitions); a ZeRO stage is left out when no plan with it can fit. `least_only`: only the least over ZeRO
    stages matters, so a ZeRO stage's bound stops rising once it passes the least found so far."""
    model, cluster, run = space.model, space.cluster, space.run
    layout, mbs, mbn = item
    _, zeros = inner_choices(space)
    modes = tuple(space.inner_choices(layout.tp)[2])
    offsets = space.partition_offset(layout)
    base = layout.strategy(mbs, mbn, zeros[0], sp, NO_RECOMPUTE)
    # memory first: most items that fail, fail here
    sheds = _bytes_to_shed(space, layout, base, offsets, [None] if offsets else zeros)
    if not sheds:
        return {}
    p2p = p2p_per_microbatch(model, cluster, run, base)
    plain_times = stage_times(model, cluster, run, base)
    plain = [t.total + p2p for t in plain_times]
    stage_sum = sum(plain)
    key = StageKey(Degrees.of(layout, mbs, sp), layout.cp_comm, overlaps(space, layout, sp))
    times = _layer_totals(model, cluster, run, modes, key)
    # every ZeRO stage that can fit sheds on the same constrained stages, with the same layers
    constrained = next(iter(sheds.values()))
    options = {s: _StageOptions.of(stage, times, modes) for s, stage in constrained.items()}
    growth = {}  # per constrained stage, once a stretch needs it
    out = {}
    for zero, shed in sheds.items():
        slowest, extra_sum, extras = (stage_sum / layout.pp if offsets else max(plain)), 0.0, {}
        for s, stage in shed.items():
            counts, option = stage.counts, options[s]
            # offload within the host memory: on at most offload_layers layers, with the best saving and the
            # least time of any offloading (kind, mode) (a relaxation of each layer's own)
            capped = (*option.offload, stage.offload_layers) if option.offload else None
            extra = recompute_cost_floor(max(0.0, stage.excess), sum(counts.values()), option.points, capped,
                                         option.hull)
            if offsets:
                plain_time = (sum(n * times[(k, NO_RECOMPUTE)] for k, n in counts.items()) + p2p
                              + stage_extra(model, cluster, run, layout.schedule, s, layout.pp, key).total)
            else:
                plain_time = plain[s]
            slowest = max(slowest, plain_time + extra)
            extra_sum += extra
            extras[s] = extra
        total = stage_sum + extra_sum
        bound = pipeline_bound(layout, total, max(slowest, total / layout.pp), mbn)
        # the least over ZeRO stages so far: when only it matters, a bound above it changes nothing
        found = min(out.values(), default=math.inf) if least_only else math.inf
        if not offsets and bound < found:
            terms = data_parallel_terms(model, cluster, run, base.with_zero(zero))
            stretch = _Stretch(layout, mbn, plain, [plain[s] + extras.get(s, 0.0) for s in range(layout.pp)],
                               terms, max(t.per_step(mbn) for t in terms))
            for s in shed:
                if s not in growth:
                    growth[s] = _growth(model, cluster, run, modes, key, tuple(constrained[s].counts.items()))
                bound = stretch.bound(s, extras[s], plain_times[s], growth[s], bound)
                if bound >= found:
                    break
        out[zero] = bound
    return out


@lru_cache(maxsize=16384)
def _layer_times(model, cluster, run, modes: tuple[str, ...], key: StageKey) -> dict:
    """LayerTime per (kind, mode) of the model's body layer kinds, the no-recompute mode among them, run as `key`
    says (a cached dict: callers must not change it)."""
    kinds = [k for k, n in (("dense", model.dense_layers), ("moe", model.moe_layers)) if n]
    return {(k, m): layer_time(model, cluster, run, key.layer(k, m)) for k in kinds for m in modes + (NO_RECOMPUTE,)}


@lru_cache(maxsize=16384)
def _layer_totals(model, cluster, run, modes: tuple[str, ...], key: StageKey) -> dict:
    """_layer_times' total seconds per (kind, mode) (a cached dict: callers must not change it)."""
    return {layer: t.total for layer, t in _layer_times(model, cluster, run, modes, key).items()}


@lru_cache(maxsize=16384)
def _growth(model, cluster, run, modes: tuple[str, ...], key: StageKey, counts: tuple[tuple[str, int], ...]
            ) -> "_Growth":
    """_Growth of a stage holding `counts` layers per kind, shared by the items with the same layer times."""
    return _Growth.of(dict(counts), _kind_reach(model, cluster, run, modes, key))


@lru_cache(maxsize=16384)
def _kind_reach(model, cluster, run, modes: tuple[str, ...], key: StageKey) -> dict:
    """_Growth.reach of the layer times (shared by the stages with other layer counts; callers must not change it)."""
    return _Growth.reach(_layer_times(model, cluster, run, modes, key))


# Where _Stretch evaluates a stage's added time, as fractions of its range above the least: fine near the least
# (where the optimum usually lies), coarser above.
STRETCH_STEPS = (0.0,) + tuple(2.0 ** -i for i in range(9, -1, -1))


@dataclass(frozen=True)
class _Growth:
    """How far recompute can stretch one stage (per micro-batch, seconds): the most time all its layers can add,
    and per overlap window (forward, backward) the most it can grow and what the other window can shrink."""

    top: float
    widest: tuple[float, float]
    slack: tuple[float, float]

    @staticmethod
    def reach(layer: dict) -> dict:
        """Per layer kind of `layer` (LayerTime per (kind, mode)): (the most any mode adds to its time, forward and
        backward window; the most any shrinks its forward and backward window)."""
        out = {}
        for k in dict.fromkeys(kind for kind, _ in layer):
            none = layer[(k, NO_RECOMPUTE)]
            deltas = [(t.total - none.total, t.forward_window - none.forward_window,
                       t.backward_window - none.backward_window) for (kind, _), t in layer.items() if kind == k]
            out[k] = ([max(0.0, *(d[i] for d in deltas)) for i in range(3)],
                      [max(0.0, *(-d[i] for d in deltas)) for i in (1, 2)])
        return out

    @staticmethod
    def of(counts: dict, reach: dict) -> "_Growth":
        """The _Growth of a stage holding `counts` layers per kind, each kind reaching as _Growth.reach says."""
        most, shrink = {k: reach[k][0] for k in counts}, {k: reach[k][1] for k in counts}
        total = lambda values, i: sum(n * values[k][i] for k, n in counts.items())  # noqa: E731
        # forward window: at most T plus what the backward windows can shrink; backward the same the other way
        return _Growth(total(most, 0), (total(most, 1), total(most, 2)), (total(shrink, 1), total(shrink, 0)))

    def exposure(self, exposure, forward: float, backward: float, added: float) -> float:
        """The stage's exposed sync (`exposure`: its DataParallelTerms.exposure) with its windows (`forward`,
        `backward` with no recompute) as wide as `added` seconds of recompute can make them."""
        return exposure.at(forward + min(self.widest[0], added + self.slack[0]),
                           backward + min(self.widest[1], added + self.slack[1]))


@dataclass(frozen=True)
class _Stretch:
    """Pipeline and data-parallel exposure bounded together, through one constrained stage s (partition fixed, one
    ZeRO stage): recompute that adds T seconds to s's micro-batch also widens its overlap windows, so it hides more
    of its data-parallel sync, yet by no more than T (a layer's time is its forward plus backward window, so what one
    window gains beyond T the other loses) plus what the other window can shrink, and never beyond every layer at its
    widest (_Growth). With T in [a, b] the step is at least pipeline(a) + exposure(windows at b) + optimizer: the
    pipeline only grows with T and the exposure only shrinks, so the least over a partition of T's range is a lower
    bound of every plan (the other stages at their own least added time, the worst stage's exposure at least s's)."""

    layout: Layout
    mbn: int
    plain: list  # per stage: a micro-batch's seconds with no recompute
    least: list  # per stage: plain plus the least recompute time its memory needs
    terms: tuple  # per stage: DataParallelTerms of the ZeRO stage
    optimizer: float  # the dearest stage's DataParallelTerms.per_step: optimizer step and FSDP's gradient passes

    def bound(self, s: int, extra: float, plain_time, growth: _Growth, known: float) -> float:
        """The larger of `known` (a bound found otherwise) and this one through stage s; stops as soon as this one
        cannot be the larger."""
        others = [t for i, t in enumerate(self.least) if i != s]
        rest, slowest = sum(others), max(others, default=0.0)
        pp, exposure = self.layout.pp, self.terms[s].exposure(self.mbn)  # the same for every window tried

        def pipeline(added: float) -> float:
            total = rest + self.plain[s] + added
            return pipeline_bound(self.layout, total, max(slowest, self.plain[s] + added, total / pp), self.mbn)

        forward, backward = plain_time.forward_window, plain_time.backward_window
        start = pipeline(extra)
        best = start + growth.exposure(exposure, forward, backward, extra)
        if best + self.optimizer <= known:
            return known
        top = max(extra, growth.top)
        least = growth.exposure(exposure, forward, backward, top)
        if best > start + least:  # recompute can hide some of the sync: try wider windows
            steps = [extra + (top - extra) * f for f in STRETCH_STEPS]
            for a, b in zip(steps, steps[1:]):
                floor = start if a == extra else pipeline(a)
                if floor + least >= best:  # the pipeline only grows from here
                    break
                best = min(best, floor + growth.exposure(exposure, forward, backward, b))
                if best + self.optimizer <= known:  # the known bound is the larger whatever comes next
                    break
        return max(best + self.optimizer, known)
