"""The linear form of one plan sub-model: everything the per-stage recompute model of one batch item and SP setting
reads from the full estimators, with names, in seconds and bytes (docs/solver.md §4).

A device stage s holding L[s] layers, n[s,k,m] of kind k with recompute option m, under ZeRO stage z:
    memory[s] = static[s,z] + layer_static[z] x (L[s] - default[s]) + fixed[s] + workspace + sum resident[s,k,m] n
                + margin(z, the recompute families in use)  (the confidence margin, margins.py; 0 at confidence 0)
    host[s]   = sum host[s,k,m] n <= host_room[s];   host optimizer[s,z] affine in L[s]
    time[s]   = sum layer_time[k,m] n + extra_time[s];   fill[s] = sum layer_fill[k,m] n + extra_fill[s]
    window[s, pass] = sum window[pass,k,m] n + extra_window[s, pass]       (the DP overlap windows)
    data_parallel[s,z]: each collective's seconds affine in L[s] (at the fewest layers and a slope), exposed beyond
                        its window (estimate.data_parallel.DataParallelTerms)
With the partition fixed (`partition_fixed`), L[s] = default[s] and every slope is 0. The model's integer
coefficients are derived from this form alone (plan_coefficients.py), so a cost term added here reaches the model.
The level-3 bounds (plan_bounds.py) take a stage's memory terms and host room from here too (`stage_memory`,
`host_room`); the uniform items' exact tables (coefficients.expand_item) price whole uniform strategies with the
estimators' stage functions instead, and do not decompose by layer.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from ..estimate.activations import layer_workspace_bytes
from ..estimate.data_parallel import data_parallel_terms
from ..estimate.keys import Degrees, StageKey
from ..estimate.layer_time import layer_time
from ..estimate.layout import stage_layouts, stage_mode_counts
from ..estimate.memory import (host_offload_table, host_optimizer_bytes, parts_total, resident_layer_table,
                               stage_dynamic_bytes, stage_layer_workspace, stage_static_bytes, unheld_state_bound)
from ..estimate.overlap import hidden_comms
from ..estimate.time import p2p_per_microbatch, stage_extra, stage_fill
from ..schedules import schedule_named
from ..schedules.base import LinearPipeline
from ..space import Layout, SearchSpace
from ..specs.pipeline_layout import split_device_stages
from ..specs.recompute import NO_RECOMPUTE
from ..specs.strategy import Strategy
from .coefficients import item_lower_bound, layer_static_bytes
from .margins import PlanMargins, plan_margins

# How far below the item's step-time lower bound, as a fraction of it, flooring the model's time coefficients may put
# its objective at most (recompute.PlanModel._solution's rounding; time_unit shares it out over the coefficients)
RESOLUTION = 1e-5
PASSES = ("forward", "backward")  # the data-parallel overlap windows (DataParallelTerms.windows)
KindOption = tuple[str, str]  # (layer kind, recompute option)


@dataclass(frozen=True)
class DataParallelForm:
    """One stage's data-parallel terms under one ZeRO stage, affine in its layers between its fewest and most."""

    windows: tuple[tuple[float, int, str], ...]  # (seconds at the fewest layers, count, pass): DataParallelTerms
    unhidden: float  # the share of a window's collective that never hides (DataParallelTerms.unhidden), at the
    # most layers
    optimizer: float  # the optimizer step's seconds at the fewest layers, FSDP's gradient passes with it
    # (DataParallelTerms.per_step)
    window_slopes: tuple[float, ...]  # each window's seconds per layer above the fewest
    optimizer_slope: float  # the optimizer step's (and gradient passes') seconds per layer above the fewest


@dataclass(frozen=True)
class StageForm:
    """One device stage's terms (bytes and seconds)."""

    default_layers: int  # layers at the default partition
    fewest: int  # the fewest layers it may hold (a layer per chunk at least)
    most: int  # the most layers it may hold
    kinds: dict[str, int]  # layers per kind at the default partition
    static: tuple[float, ...]  # model-state bytes per ZeRO stage of PlanForm.zeros, at the default partition
    fixed: float  # activation bytes that no recompute option changes (stage_dynamic_bytes with no layers)
    resident: dict[KindOption, float]  # bytes a layer of (kind, option) keeps on the device
    host: dict[KindOption, float]  # host bytes a layer of (kind, option) puts there (its in-flight micro-batches)
    workspace_hidden: dict[KindOption, float]  # bytes of PlanForm.workspace that `fixed` (the logits) already pays
    host_room: float  # host bytes left for offloaded activations
    host_optimizer: tuple[tuple[float, float], ...]  # per ZeRO stage: an offloaded optimizer's host bytes at the
    # fewest layers, and per layer above
    extra_time: float  # the stage's work beyond its layers (embedding, head, loss, MTP) plus its pipeline sends
    extra_fill: float  # what that work adds to the schedule's bubble (Schedule.fill)
    extra_window: dict[str, float]  # per pass: that work's share of the DP overlap windows
    data_parallel: tuple[DataParallelForm, ...]  # per ZeRO stage


@dataclass(frozen=True)
class PlanForm:
    """The sub-model of one (item, SP) and its ZeRO stages, in seconds and bytes."""

    base: Strategy  # the item's strategy with no recompute, at the first of `zeros`
    modes: tuple[str, ...]  # the recompute options searched
    zeros: tuple[int, ...]  # the ZeRO stages decided between
    linear: LinearPipeline  # the schedule's pipeline as a linear form
    unit: float  # the model's time unit (seconds): time_unit
    partition_fixed: bool  # whether every stage holds its default layers (no uneven partition searched)
    offset: int  # how far a stage's layers may move from the default (0 when fixed)
    total_layers: int  # the model's layers (their sum over the stages, when the partition is free)
    host_capacity: float  # host memory per device
    layer_time: dict[KindOption, float]  # seconds of one layer's forward and backward per micro-batch
    layer_fill: dict[KindOption, float]  # its share of the schedule's bubble (Schedule.fill)
    window: dict[str, dict[KindOption, float]]  # per pass: its share of the DP overlap windows
    workspace: dict[KindOption, float]  # bytes its backward adds at once: what its recompute rematerialises and
    # the backward's temporaries (activations.layer_workspace_bytes)
    static_per_layer: tuple[float, ...]  # per ZeRO stage: model-state bytes one more layer adds to a stage
    stages: tuple[StageForm, ...]
    margins: PlanMargins  # the bytes a plan's peak upper edge keeps free at the run's confidence (margins.py)

    @property
    def fill_is_total(self) -> bool:
        """Whether every fill equals its time (1F1B and interleaving): the model then reuses the stage times."""
        return (self.layer_fill == self.layer_time
                and all(st.extra_fill == st.extra_time for st in self.stages))


def plan_form(space: SearchSpace, layout: Layout, mbs: int, mbn: int, sp: bool, modes: tuple[str, ...],
              zeros: tuple[int, ...]) -> PlanForm:
    """The form of the item (layout, mbs, mbn) under SP setting `sp`, deciding between `modes` and `zeros`."""
    model, cluster, run = space.model, space.cluster, space.run
    base = layout.strategy(mbs, mbn, zeros[0], sp, NO_RECOMPUTE)
    schedule = schedule_named(layout.schedule)
    present = [k for k, n in (("dense", model.dense_layers), ("moe", model.moe_layers)) if n]
    keys = tuple((k, m) for k in present for m in modes)
    hidden = hidden_comms(run, layout.schedule, layout.pp, layout.vpp, layout.tp, sp, layout.ep)
    stage_key = StageKey(Degrees.of(layout, mbs, sp), layout.cp_comm, hidden)
    times = {key: layer_time(model, cluster, run, stage_key.layer(*key)) for key in keys}
    offset = space.partition_offset(layout)
    linear = schedule.linear_pipeline(mbn, layout.vpp, layout.pp)
    return PlanForm(
        base=base, modes=modes, zeros=tuple(zeros), linear=linear,
        unit=time_unit(item_lower_bound(space, (layout, mbs, mbn)), linear, layout.pp,
                       math.ceil(model.layers / layout.pp) + offset),
        partition_fixed=not offset, offset=offset, total_layers=model.layers,
        host_capacity=cluster.device.host_memory_bytes,
        layer_time={key: t.total for key, t in times.items()},
        layer_fill={key: schedule.fill(t.total, t.full_backward, t.wgrad) for key, t in times.items()},
        window={"forward": {key: t.forward_window for key, t in times.items()},
                "backward": {key: t.backward_window for key, t in times.items()}},
        workspace={key: layer_workspace_bytes(model, run, *key, stage_key.degrees) for key in keys},
        static_per_layer=tuple(layer_static_bytes(space, layout, z) for z in zeros),
        stages=_stage_forms(space, layout, base, keys, tuple(zeros), stage_key, offset),
        margins=plan_margins(space, base, modes, tuple(zeros)))


def weighed_coefficients(linear: LinearPipeline, pp: int, most_layers: int) -> float:
    """The floored time coefficients the objective counts, in units of the form's seconds (over the divisor): about
    one per layer and extra term of a stage (most_layers + 1), weighed slowest_weight times through the slowest stage
    and sum_weight times per stage. Flooring each to the unit costs at most this many units (the data-parallel terms
    apart: recompute.PlanModel._data_parallel_rounding)."""
    return (linear.slowest_weight + linear.sum_weight * pp) * (most_layers + 1) / linear.divisor


def time_unit(bound_seconds: float, linear: LinearPipeline, pp: int, most_layers: int) -> float:
    """The model's time unit (seconds): RESOLUTION of the item's step-time bound shared out over the weighed
    coefficients (weighed_coefficients). Flooring them then costs at most RESOLUTION of the step, however many
    micro-batches weigh a layer, and the data-parallel terms' own rounding about as much again at most: a fraction
    of plans.PLAN_TOLERANCE (docs/solver.md §4)."""
    return max(1e-12, bound_seconds * RESOLUTION / max(1.0, weighed_coefficients(linear, pp, most_layers)))


def _stage_forms(space: SearchSpace, layout: Layout, base: Strategy, keys: tuple[KindOption, ...],
                 zeros: tuple[int, ...], stage_key: StageKey, offset: int) -> tuple[StageForm, ...]:
    """Each device stage's terms."""
    model, cluster, run = space.model, space.cluster, space.run
    pp = layout.pp
    layouts = stage_layouts(model, base)
    kinds = [{k: n for (k, _), n in counts if n} for counts in stage_mode_counts(model, base)]
    default = tuple(st.layers for st in layouts)
    low = tuple(max(layout.vpp, d - offset) for d in default)  # a layer per chunk
    high = tuple(d + offset for d in default)
    extras = [stage_extra(model, cluster, run, layout.schedule, s, pp, stage_key) for s in range(pp)]
    p2p = p2p_per_microbatch(model, cluster, run, base)
    bounds = _StageBounds(base, layout.vpp, low, high, offset)
    data_parallel = _data_parallel_forms(space, bounds, zeros)
    optimizer = _host_optimizer_forms(space, bounds, zeros, layouts)
    static = [[parts_total(stage_static_bytes(model, run, base.with_zero(z), layouts[s])) for s in range(pp)]
              for z in zeros]
    memory = [stage_memory(space, base, stage, keys, keys, offset) for stage in layouts]
    return tuple(StageForm(
        default_layers=default[s], fewest=low[s], most=high[s], kinds=kinds[s],
        static=tuple(static[k][s] for k in range(len(zeros))),
        fixed=memory[s].fixed, resident=memory[s].resident, host=memory[s].host,
        workspace_hidden=memory[s].workspace_hidden,
        # the host memory less an offloaded optimizer's states at its lightest ZeRO stage; with uneven partitions
        # none, as a stage may hold fewer layers: the model stays a relaxation
        host_room=host_room(space, base, layouts[s], () if offset else zeros),
        host_optimizer=tuple(per_zero[s] for per_zero in optimizer),
        extra_time=extras[s].total + p2p, extra_fill=stage_fill(layout.schedule, extras[s], p2p),
        extra_window={"forward": extras[s].forward_window, "backward": extras[s].backward_window},
        data_parallel=tuple(per_zero[s] for per_zero in data_parallel)) for s in range(pp))


@dataclass(frozen=True)
class _StageBounds:
    """The base strategy and each stage's fewest and most layers (equal to the default when fixed)."""

    base: Strategy
    vpp: int
    low: tuple[int, ...]
    high: tuple[int, ...]
    offset: int

    def at_fewest_and_most(self, zero: int) -> tuple[Strategy, Strategy]:
        """The base strategy under ZeRO stage `zero` with every stage at its fewest layers, and at its most (the
        default partition both times when it is fixed)."""
        if not self.offset:
            return self.base.with_zero(zero), self.base.with_zero(zero)
        return tuple(self.base.with_(zero=zero, layers_per_stage=split_device_stages(counts, self.vpp))
                     for counts in (self.low, self.high))


def _data_parallel_forms(space: SearchSpace, bounds: _StageBounds, zeros: tuple[int, ...]
                         ) -> list[list[DataParallelForm]]:
    """Per ZeRO stage and device stage: the collectives and optimizer step at its fewest layers and the slope to its
    most; the last bucket's share at the most layers."""
    model, cluster, run = space.model, space.cluster, space.run
    mbn = bounds.base.mbn
    out = []
    for z in zeros:
        fewest, most = (data_parallel_terms(model, cluster, run, strategy)
                        for strategy in bounds.at_fewest_and_most(z))
        out.append([_data_parallel_form(t, m, lo, hi, mbn)
                    for t, m, lo, hi in zip(fewest, most, bounds.low, bounds.high)])
    return out


def _data_parallel_form(fewest, most, lo: int, hi: int, mbn: int) -> DataParallelForm:
    """One stage's DataParallelForm from its DataParallelTerms at its fewest (`lo`) and most (`hi`) layers."""
    windows = fewest.windows(mbn)
    return DataParallelForm(
        windows=windows, unhidden=most.unhidden, optimizer=fewest.per_step(mbn),
        window_slopes=tuple(_slope(a, b, lo, hi) for (a, _, _), (b, _, _) in zip(windows, most.windows(mbn))),
        optimizer_slope=_slope(fewest.per_step(mbn), most.per_step(mbn), lo, hi))


def _host_optimizer_forms(space: SearchSpace, bounds: _StageBounds, zeros: tuple[int, ...], layouts
                          ) -> list[list[tuple[float, float]]]:
    """Per ZeRO stage and device stage: an offloaded optimizer's host bytes at its fewest layers and per layer above
    (0 without optimizer offload)."""
    out = []
    for z in zeros:
        fewest, most = ([host_optimizer_bytes(space.model, space.run, strategy, stage) for stage in layouts]
                        for strategy in bounds.at_fewest_and_most(z))
        out.append([(a, _slope(a, b, lo, hi)) for a, b, lo, hi in zip(fewest, most, bounds.low, bounds.high)])
    return out


class StageMemory(NamedTuple):
    """One device stage's memory terms that recompute and offload act on (bytes)."""

    resident: dict[KindOption, float]  # what a layer of (kind, option) keeps on the device
    host: dict[KindOption, float]  # what it puts in host memory (its in-flight micro-batches)
    fixed: float  # activations no option changes (stage_dynamic_bytes with no layers)
    workspace_hidden: dict[KindOption, float]  # of a layer's workspace, what the stage's logits already pay


def stage_memory(space: SearchSpace, base: Strategy, stage, keys: tuple[KindOption, ...],
                 host_keys: tuple[KindOption, ...], extra_layers: int = 0, hidden: bool = True) -> StageMemory:
    """The memory terms of device stage `stage` (a StageLayout) under `base`, for the (kind, option) pairs `keys`
    (their host bytes for `host_keys`): the one place the plan model (PlanForm) and the level-3 bounds
    (plan_bounds._bytes_to_shed) take them from. The fixed part is less the most that the states a torchtitan
    pipeline stage releases part of the step can save with up to `extra_layers` more layers (memory
    .unheld_state_bound), so the plan model stays a relaxation there. `hidden` False: workspace_hidden left empty
    (the bounds do not read it, and it is most of the cost)."""
    model, run = space.model, space.run
    fixed = stage_dynamic_bytes(model, run, base, stage, counts={})
    return StageMemory(resident_layer_table(model, run, base, stage, keys),
                       host_offload_table(model, run, base, stage, host_keys),
                       parts_total(fixed) - unheld_state_bound(model, run, base, stage, extra_layers),
                       _workspace_hidden(space, base, stage, keys, fixed["logits"]) if hidden else {})


def _workspace_hidden(space: SearchSpace, base: Strategy, stage, keys: tuple[KindOption, ...], logits: float
                      ) -> dict[KindOption, float]:
    """Of each (kind, option)'s workspace, what the stage's `logits` already pay (StageMemory.workspace_hidden)."""
    model, run = space.model, space.run
    degrees = Degrees.of_strategy(base)
    return {key: layer_workspace_bytes(model, run, *key, degrees)
            - sum(stage_layer_workspace(model, run, base, stage, *key, logits)) for key in keys}


def host_room(space: SearchSpace, base: Strategy, stage, zeros) -> float:
    """Host memory left for offloaded activations on a stage: the host memory less an offloaded optimizer's states
    at the lightest of `zeros` (none given: no states, as with uneven partitions, where a stage may hold fewer layers:
    the room is never underestimated)."""
    if not base.optimizer_offload:  # the optimizer stays on the device
        return float(space.cluster.device.host_memory_bytes)
    states = min((host_optimizer_bytes(space.model, space.run, base.with_zero(z), stage) for z in zeros), default=0.0)
    return space.cluster.device.host_memory_bytes - states


def _slope(at_fewest: float, at_most: float, fewest: int, most: int) -> float:
    """Seconds (or bytes) per layer between a stage's fewest and most layers (0 when they are equal)."""
    return (at_most - at_fewest) / (most - fewest) if most > fewest else 0.0
