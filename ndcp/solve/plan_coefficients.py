"""A plan form (plan_form.py) in the CP-SAT model's integer units: memory in whole bytes, time in the form's unit.

Every coefficient is rounded so the model stays a relaxation of the full estimators: what a plan uses (bytes, seconds)
rounded down, what hides work (the DP overlap windows) rounded up. The coefficients are the model's whole content
besides the capacity, the excluded plans and the cutoff: sub-models with equal coefficients are the same model
(PlanModel memoises their outcomes by them). Frozen and made of tuples, so they hash.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .plan_bounds import lower_hull
from .margins import NO_MARGINS, PlanMargins
from .plan_form import PASSES, KindOption, PlanForm, StageForm

BYTE = 1  # memory unit: whole bytes, so a plan the model fits almost never fails verification by rounding

Terms = tuple[tuple[KindOption, int], ...]  # an integer per (kind, option), in the order of the model's variables


def floor_to(value: float, unit: float) -> int:
    return int(math.floor(value / unit + 1e-9))


def ceil_to(value: float, unit: float) -> int:
    return int(math.ceil(value / unit - 1e-9))


@dataclass(frozen=True)
class WindowCoefficients:
    """One data-parallel collective of a stage under one ZeRO stage (DataParallelForm.windows), in time units."""

    index: int  # its place among the stage's windows (DataParallelForm.windows)
    at_fewest: int  # its seconds at the stage's fewest layers, floored
    slope: int  # per layer above the fewest, floored
    count: int  # how many times a step pays it
    which: str  # the pass whose window hides it
    last: int  # the share that never overlaps (fixed partition), floored
    top: int  # the most it can be exposed: the variable's upper bound
    lines: tuple[tuple[int, int], ...]  # (intercept, slope per layer) of the never-overlapping share's lower hull
    # (free partition)


@dataclass(frozen=True)
class DataParallelCoefficients:
    """One stage's data-parallel terms under one ZeRO stage."""

    optimizer: int
    optimizer_slope: int
    windows: tuple[WindowCoefficients, ...]  # only those that can be exposed (count and top above 0)
    rounding_count: int  # the windows' counts, all of them (for the rounding bound)


@dataclass(frozen=True)
class StageCoefficients:
    """One device stage, in bytes and time units."""

    default_layers: int
    fewest: int
    most: int
    kinds: tuple[tuple[str, int], ...]
    static: tuple[int, ...]  # per ZeRO stage, at zero layers of the per-layer slope: static - slope x default
    layer_static: tuple[int, ...]  # per ZeRO stage: model-state bytes per layer
    fixed: int
    resident: Terms
    host: Terms  # only the (kind, option) pairs that put bytes on the host
    host_room: int
    host_optimizer: tuple[tuple[int, int, bool], ...]  # per ZeRO stage: (bytes at the fewest layers, per layer,
    # whether any)
    time: Terms
    extra_time: int
    fill: Terms  # empty when the fills equal the times
    extra_fill: int
    window: tuple[Terms, ...]  # per pass (PASSES), rounded up
    extra_window: tuple[int, ...]  # per pass, rounded up
    data_parallel: tuple[DataParallelCoefficients, ...]  # per ZeRO stage
    workspace_hidden: Terms = ()  # of PlanCoefficients.workspace, what `fixed` (the logits) already pays (rounded up)


@dataclass(frozen=True)
class PlanCoefficients:
    """The whole sub-model in integers."""

    modes: tuple[str, ...]
    zero_count: int
    partition_fixed: bool
    offset: int
    total_layers: int
    host_capacity: int
    fill_is_total: bool
    slowest_weight: int
    sum_weight: int
    divisor: int
    workspace: Terms
    stages: tuple[StageCoefficients, ...]
    margins: PlanMargins = NO_MARGINS  # bytes, exact (plan_form.PlanForm.margins)

    @property
    def most_layers(self) -> int:
        """The most layers any stage may hold: every count's upper bound."""
        return max(st.default_layers for st in self.stages) + self.offset


def counted_kinds(partition_fixed: bool, kinds: tuple[str, ...]) -> tuple[str, ...]:
    """The layer kinds the model counts on a stage holding `kinds`, in the order of its variables (and of every
    Terms): each of them, or with a free partition the first, which then holds all the stage's layers (uneven
    partitions are searched for single-kind models only)."""
    return kinds if partition_fixed else kinds[:1]


def plan_coefficients(form: PlanForm) -> PlanCoefficients:
    """The form in the model's units."""
    keys = tuple(form.layer_time)
    fill_is_total = form.fill_is_total
    return PlanCoefficients(
        modes=form.modes, zero_count=len(form.zeros), partition_fixed=form.partition_fixed, offset=form.offset,
        total_layers=form.total_layers, host_capacity=int(form.host_capacity // BYTE), fill_is_total=fill_is_total,
        slowest_weight=form.linear.slowest_weight, sum_weight=form.linear.sum_weight, divisor=form.linear.divisor,
        workspace=tuple((key, floor_to(form.workspace[key], BYTE)) for key in keys),
        stages=tuple(_stage(form, stage, fill_is_total) for stage in form.stages), margins=form.margins)


def _stage(form: PlanForm, stage: StageForm, fill_is_total: bool) -> StageCoefficients:
    unit = form.unit
    on_stage = [(kind, mode) for kind in counted_kinds(form.partition_fixed, tuple(stage.kinds)) for mode in form.modes]
    return StageCoefficients(
        default_layers=stage.default_layers, fewest=stage.fewest, most=stage.most,
        kinds=tuple(stage.kinds.items()),
        static=tuple(floor_to(static - per_layer * stage.default_layers, BYTE)
                     for static, per_layer in zip(stage.static, form.static_per_layer)),
        layer_static=tuple(floor_to(per_layer, BYTE) for per_layer in form.static_per_layer),
        fixed=floor_to(stage.fixed, BYTE),
        resident=tuple((key, floor_to(stage.resident[key], BYTE)) for key in on_stage),
        host=tuple((key, floor_to(stage.host[key], BYTE)) for key in on_stage if stage.host[key] > 0),
        host_room=int(stage.host_room // BYTE),
        host_optimizer=tuple((floor_to(fewest, BYTE), floor_to(per_layer, BYTE), fewest > 0)
                             for fewest, per_layer in stage.host_optimizer),
        time=tuple((key, floor_to(form.layer_time[key], unit)) for key in on_stage),
        extra_time=floor_to(stage.extra_time, unit),
        fill=() if fill_is_total else tuple((key, floor_to(form.layer_fill[key], unit)) for key in on_stage),
        extra_fill=floor_to(stage.extra_fill, unit),
        window=tuple(tuple((key, ceil_to(form.window[which][key], unit)) for key in on_stage) for which in PASSES),
        extra_window=tuple(ceil_to(stage.extra_window[which], unit) for which in PASSES),
        data_parallel=tuple(_data_parallel(form, stage, terms) for terms in stage.data_parallel),
        workspace_hidden=tuple((key, ceil_to(stage.workspace_hidden[key], BYTE)) for key in form.layer_time
                               if stage.workspace_hidden[key] > 0))


def _data_parallel(form: PlanForm, stage: StageForm, terms) -> DataParallelCoefficients:
    """A stage's DP terms under one ZeRO stage; the windows that can never be exposed are left out."""
    unit = form.unit
    windows = []
    for index, ((seconds, count, which), slope) in enumerate(zip(terms.windows, terms.window_slopes)):
        at_fewest = floor_to(seconds, unit)
        top = max(at_fewest, at_fewest + floor_to(slope, unit) * form.offset * 2)
        if count == 0 or top == 0:
            continue
        lines = () if form.partition_fixed else tuple(
            (floor_to(p, unit), floor_to(q, unit))
            for p, q in lower_lines([(n, (seconds + slope * (n - stage.fewest)) / n)
                                     for n in range(stage.fewest, stage.most + 1)]))
        windows.append(WindowCoefficients(index, at_fewest, floor_to(slope, unit), count, which,
                                          floor_to(seconds * terms.unhidden, unit), top, lines))
    return DataParallelCoefficients(floor_to(terms.optimizer, unit), floor_to(terms.optimizer_slope, unit),
                                    tuple(windows), sum(count for _, count, _ in terms.windows))


def lower_lines(points: list[tuple[int, float]]) -> list[tuple[float, float]]:
    """(intercept, slope) of the lines through consecutive vertices of the lower convex hull of `points` (x rising):
    each is at most every point's y, and their largest equals it at every vertex (a lone point: a flat line). Floored
    to the model's units (intercept and slope each, with x >= 0) they stay below."""
    hull = lower_hull(points)
    if len(hull) == 1:
        return [(hull[0][1], 0.0)]
    return [(y0 - (y1 - y0) / (x1 - x0) * x0, (y1 - y0) / (x1 - x0)) for (x0, y0), (x1, y1) in zip(hull, hull[1:])]
