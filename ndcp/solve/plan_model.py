"""The CP-SAT model of one plan sub-model, built from its integer coefficients (plan_coefficients.py) by small
builders, one per constraint group, in the style of OR-Tools' examples.

Decisions: one boolean per ZeRO stage (exactly one), the layers per device stage when the partition is free, and per
stage the layers of each (kind, recompute option). The objective is the schedule's pipeline as its linear form plus
the exposed data-parallel sync and the optimizer step, all times the form's divisor (docs/solver.md §4).
"""
from __future__ import annotations

from dataclasses import dataclass

from ortools.sat.python import cp_model

from ..specs.recompute import HEAVIEST_FIRST
from .plan_coefficients import PASSES, PlanCoefficients, StageCoefficients, counted_kinds

UPPER = 10**15  # upper bound of the model's integer variables (bytes and time units): far above any real value
# CP-SAT refuses a model (MODEL_INVALID, "Possible integer overflow") in which a linear expression could pass
# 2^62 - 1 given its variables' domains (ortools/sat/cp_model_checker.cc). The objective weighs the stage times by
# the schedule's linear form: interleaved 1F1B weighs the slowest stage vpp x mbn - 1 (GPT-3 175B on 64 A100 with
# vpp 3 and 1,536 micro-batches: 4,607; x UPPER = 4.6e18, past it), zero bubble pp x mbn.
CPSAT_LIMIT = 2**62 - 1


@dataclass(frozen=True)
class BuiltPlanModel:
    """A built sub-model and the variables its solution is read from."""

    model: cp_model.CpModel
    zero: list  # one boolean per ZeRO stage
    sizes: list  # layers per stage: ints when the partition is fixed, else variables
    counts: list  # per stage: {(kind, option): layers}
    decisions: list  # the variables a plan is: zero, free sizes, counts (an excluded plan is their values)


def build_plan_model(c: PlanCoefficients, capacity: int, exclude: tuple[tuple[int, ...], ...] = (),
                     limit: int | None = None) -> BuiltPlanModel:
    """The model of `c` under `capacity` bytes per device, other than the `exclude`d plans; `limit` (objective
    units) adds `objective <= limit` as a constraint."""
    m = cp_model.CpModel()
    zero = add_zero_choice(m, c.zero_count)
    upper = time_upper(c)
    slowest = m.new_int_var(0, upper, "slowest")
    sizes, counts, fills = [], [], []
    margin = m.new_int_var(0, UPPER, "margin") if c.margins.any else 0
    for s, stage in enumerate(c.stages):
        size = add_stage_size(m, c, stage, s)
        n = add_stage_counts(m, c, stage, s, size)
        add_memory(m, c, stage, s, zero, size, n, capacity, margin)
        add_host(m, c, stage, zero, size, n)
        fills.append(add_stage_time(m, c, stage, s, n, slowest, upper))
        sizes.append(size)
        counts.append(n)
    if c.margins.any:
        add_margin(m, c, zero, counts, margin, capacity)
    if not c.partition_fixed:  # the stages hold every layer
        m.add(sum(sizes) == c.total_layers)
    free_sizes = [] if c.partition_fixed else sizes
    decisions = list(zero) + free_sizes + [v for n in counts for v in n.values()]
    add_no_goods(m, decisions, exclude)
    exposed, optimizer = add_data_parallel(m, c, zero, counts, sizes, upper)
    # the schedule's pipeline as its linear form, plus the DP terms (all times the form's divisor)
    objective = c.slowest_weight * slowest + c.sum_weight * sum(fills) + c.divisor * (exposed + optimizer)
    if limit is not None:
        m.add(objective <= limit)
    m.minimize(objective)
    return BuiltPlanModel(m, zero, sizes, counts, decisions)


def time_upper(c: PlanCoefficients) -> int:
    """Upper bound of the time variables the objective weighs (the stages' times, the slowest, the DP exposure and
    the optimizer step): UPPER, or less where the objective's weights would let it pass CPSAT_LIMIT. Still far above
    any real value: a weight of a million leaves 4.6e12 units, where a real stage time is under 1e9."""
    weight = c.slowest_weight + c.sum_weight * len(c.stages) + 2 * c.divisor
    return min(UPPER, CPSAT_LIMIT // (weight + 1))


def add_zero_choice(m: cp_model.CpModel, zero_count: int) -> list:
    """One boolean per ZeRO stage decided between; exactly one holds."""
    zero = [m.new_bool_var(f"zero{k}") for k in range(zero_count)]
    m.add_exactly_one(zero)
    return zero


def add_stage_size(m: cp_model.CpModel, c: PlanCoefficients, stage: StageCoefficients, s: int):
    """The stage's layers: its default when the partition is fixed, else a variable within its fewest and most."""
    if c.partition_fixed:
        return stage.default_layers
    return m.new_int_var(stage.fewest, stage.most, f"L{s}")


def add_stage_counts(m: cp_model.CpModel, c: PlanCoefficients, stage: StageCoefficients, s: int, size) -> dict:
    """Layers per (kind, option) on the stage; each kind's add up to its layers (with a free partition the stage's
    one kind holds `size`). On a stage with both kinds the kind rule holds (add_kind_rule)."""
    layers = dict(stage.kinds)
    kinds = counted_kinds(c.partition_fixed, tuple(layers))
    n = {}
    for kind in kinds:
        for mode in c.modes:
            n[(kind, mode)] = m.new_int_var(0, c.most_layers, f"n{s}_{kind}_{mode}")
        m.add(sum(n[(kind, mode)] for mode in c.modes) == (layers[kind] if c.partition_fixed else size))
    if len(kinds) > 1:
        add_kind_rule(m, n, layers["moe"], s)
    return n


def add_kind_rule(m: cp_model.CpModel, n: dict, moe_layers: int, s: int) -> None:
    """On a stage with both kinds, MoE layers take the heavier recompute first (layout.mode_kind_counts), so the
    counts the model picks are the ones the estimators will read back."""
    # For each heaviest-first prefix of the options: dense layers run an option of the prefix only once every MoE
    # layer does (three options: full, then full or selective).
    options = [o for o in HEAVIEST_FIRST if ("moe", o) in n]
    for depth in range(1, len(options)):
        prefix = options[:depth]
        moe_covered = m.new_bool_var(f"moe_covered{s}_{depth}")
        m.add(sum(n[("moe", o)] for o in prefix) == moe_layers).only_enforce_if(moe_covered)
        m.add(sum(n.get(("dense", o), 0) for o in prefix) == 0).only_enforce_if(~moe_covered)


def add_margin(m: cp_model.CpModel, c: PlanCoefficients, zero: list, counts: list, margin, capacity: int) -> None:
    """`margin`, the bytes the plan's peak upper edge keeps free under `capacity` (margins.PlanMargins): at
    least the entry of the chosen ZeRO stage and of the recompute families in use, exactly (a family's boolean is 1
    when and only when some stage runs one of its modes). Without an entry above 0 bytes (confidence 0) there is no
    margin variable and the model is today's."""
    used = {}
    if c.margins.by_family:
        for family, modes in c.margins.families:
            used[family] = m.new_bool_var(f"family_{family}")
            layers = [var for n in counts for (_, mode), var in n.items() if mode in modes]
            for var in layers:
                m.add(var <= c.most_layers * used[family])
            m.add(sum(layers) >= 1).only_enforce_if(used[family])
    for zk, entries in zip(zero, c.margins.per_zero):
        for entry in entries:
            exactly = [used[f] if f in entry.families else ~used[f] for f in used] if entry.families else []
            m.add(margin >= entry.margin(capacity)).only_enforce_if([zk] + exactly)


def add_memory(m: cp_model.CpModel, c: PlanCoefficients, stage: StageCoefficients, s: int, zero: list, size, n: dict,
               capacity: int, margin=0) -> None:
    """The stage's device memory and the plan's confidence margin (add_margin) within the capacity: model states
    (the chosen ZeRO stage's, scaling with the stage's layers), the fixed activations, each layer's resident bytes,
    and the largest workspace (recompute and backward temporaries) of an option in use, less what the stage's logits
    already pay of it (estimate/memory.py stage_layer_workspace)."""
    workspace = m.new_int_var(0, UPPER, f"ws{s}")
    hidden = dict(stage.workspace_hidden)
    need = {key: max(0, b - hidden.get(key, 0)) for key, b in c.workspace}
    for key, var in n.items():
        if need[key]:
            used = m.new_bool_var(f"used{s}_{key[0]}_{key[1]}")
            m.add(var <= c.most_layers * used)
            m.add(workspace >= need[key] * used)
    static = sum(zk * stage.static[k] for k, zk in enumerate(zero))
    # static parts: zero picks the ZeRO stage; the per-layer static term scales with the stage's layers
    layer_static = m.new_int_var(0, UPPER, f"layer_static{s}")
    for k, zk in enumerate(zero):
        m.add(layer_static == stage.layer_static[k] * size).only_enforce_if(zk)
    resident = dict(stage.resident)
    memory = static + layer_static + stage.fixed + workspace + sum(resident[key] * var for key, var in n.items())
    m.add((memory + margin if c.margins.any else memory) <= capacity)


def add_host(m: cp_model.CpModel, c: PlanCoefficients, stage: StageCoefficients, zero: list, size, n: dict) -> None:
    """Host memory: an offloaded optimizer's states within it (a ZeRO stage whose states cannot fit is not chosen:
    verification refuses its every plan, and without this the no-good cuts enumerated them all), and the offloaded
    activations within the room left (floored: the model stays a relaxation)."""
    for zk, (fewest, per_layer, any_states) in zip(zero, stage.host_optimizer):
        if c.partition_fixed and fewest > c.host_capacity:
            m.add(zk == 0)
        elif not c.partition_fixed and any_states:
            m.add(fewest + per_layer * (size - stage.fewest) <= c.host_capacity).only_enforce_if(zk)
    host = [(bytes_, n[key]) for key, bytes_ in stage.host]
    if host:
        m.add(sum(b * v for b, v in host) <= stage.host_room)


def add_stage_time(m: cp_model.CpModel, c: PlanCoefficients, stage: StageCoefficients, s: int, n: dict, slowest,
                   upper: int = UPPER):
    """The stage's time per micro-batch (its layers and its extra work), at most `slowest`; returns its fill (the
    schedule's bubble share: the time itself for 1F1B-like schedules)."""
    t = m.new_int_var(0, upper, f"t{s}")
    m.add(t == sum(seconds * n[key] for key, seconds in stage.time) + stage.extra_time)
    m.add(slowest >= t)
    if c.fill_is_total:
        return t
    return sum(seconds * n[key] for key, seconds in stage.fill) + stage.extra_fill


def add_no_goods(m: cp_model.CpModel, decisions: list, exclude: tuple[tuple[int, ...], ...]) -> None:
    """Each excluded plan is cut off: a plan differs from it in at least one decision."""
    for assignment in exclude:
        differs = []
        for var, value in zip(decisions, assignment):
            d = m.new_bool_var("")
            m.add(var != value).only_enforce_if(d)
            differs.append(d)
        m.add_bool_or(differs)


def add_data_parallel(m: cp_model.CpModel, c: PlanCoefficients, zero: list, counts: list, sizes: list,
                      upper: int = UPPER):
    """Exposed DP sync and optimizer step (estimate.data_parallel.DataParallelTerms.exposed), linear in the counts.
    A window is the stage's forward or backward wall time per micro-batch, each coefficient rounded up; per ZeRO
    choice z_k and collective an integer e >= z_k x seconds - window and e >= z_k x seconds x last bucket (no
    constraint unless z_k = 1, as exactly one holds), and the stage's exposure = sum count x e: never overestimated.
    With a free partition, seconds = at its fewest layers + per layer x (L - fewest), enforced when z_k = 1, and the
    last bucket's share at least each line of its lower convex hull in L (plan_coefficients.lower_lines)."""
    exposed = m.new_int_var(0, upper, "dp_exposed")
    optimizer = m.new_int_var(0, upper, "optimizer")
    for s, (stage, n, size) in enumerate(zip(c.stages, counts, sizes)):
        window = {which: sum(units * n[key] for key, units in stage.window[p]) + stage.extra_window[p]
                  for p, which in enumerate(PASSES)}
        extra = None if c.partition_fixed else size - stage.fewest  # layers above the fewest
        exposures = []
        for k, (zk, terms) in enumerate(zip(zero, stage.data_parallel)):
            if extra is None:  # a fixed partition: linear in z_k (a tighter LP than an enforced one)
                m.add(optimizer >= terms.optimizer * zk)
            else:
                m.add(optimizer >= terms.optimizer + terms.optimizer_slope * extra).only_enforce_if(zk)
            for w in terms.windows:
                # never more than the collective itself (window >= 0, last bucket <= 1): a tight domain (with
                # [0, UPPER] CP-SAT 9.15's presolve wrongly proved some models infeasible: docs/tuning.md)
                e = m.new_int_var(0, w.top, f"dp{s}_{k}_{w.index}")
                if extra is None:
                    m.add(e >= w.at_fewest * zk - window[w.which])
                    m.add(e >= w.last * zk)
                else:
                    m.add(e >= w.at_fewest + w.slope * extra - window[w.which]).only_enforce_if(zk)
                    for intercept, slope in w.lines:
                        m.add(e >= intercept + slope * size).only_enforce_if(zk)
                exposures.append(w.count * e)
        m.add(exposed >= sum(exposures))
    return exposed, optimizer
