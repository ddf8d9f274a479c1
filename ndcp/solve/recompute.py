"""Per-stage recompute plans (and layer partitions) for one degree tuple, solved exactly by a small CP-SAT model.

For a batch item (layout, mbs, mbn) and an SP setting, the decisions are, per device stage s and layer kind k, the
number of layers n[s,k,m] that run with recompute mode m (none / selective / full), the layers per stage L[s] when
uneven partitions are searched (single-kind models, no interleaving, within +-max_offset of the default), and the
ZeRO stage (one boolean each). With coefficients from the full estimators (estimate.memory / estimate.time):
    memory[s] = static[s, zero] + dstatic x (L[s] - default[s]) + fixed[s] + sum r[s,k,m] n[s,k,m] + workspace[s]
    time[s]   = sum layer[k,m] n[s,k,m] + extra[s];   slowest >= time[s]
    fill[s]   = sum fill[k,m] n[s,k,m] + extra_fill[s]   (the schedule's bubble share, Schedule.fill; = time[s] for
                                                          1F1B and interleaving)
    divisor x pipeline = slowest_weight x slowest + sum_weight x sum fill[s]   (the schedule's linear form,
                                                                            ndcp/schedules, LinearPipeline)
Coefficients are rounded down (memory in bytes, time in units of 1e-6 of the item's step-time bound) so the optimum
is a lower bound of the full estimators; the caller verifies the plan it returns.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

from ortools.sat.python import cp_model

from ..estimate.activations import recompute_workspace_bytes
from ..estimate.layout import (LAYER_KINDS, chunk_kinds, default_partition, mode_kind_counts, stage_layouts,
                               stage_mode_counts)
from ..estimate.memory import (host_offload_table, host_optimizer_bytes, parts_total, resident_layer_table,
                               stage_dynamic_bytes, stage_static_bytes)
from ..estimate.data_parallel import data_parallel_terms
from ..estimate.overlap import hidden_comms
from ..estimate.keys import Degrees, StageKey
from ..estimate.layer_time import layer_time
from ..estimate.time import p2p_per_microbatch, stage_extra, stage_fill
from ..schedules import schedule_named
from ..space import Layout, SearchSpace
from .coefficients import item_lower_bound, layer_static_bytes
from .plan_bounds import host_room, lower_hull
from .interrupt import solve as interruptible
from ..specs.recompute import (HEAVIEST_FIRST, MODE_INDEX, NO_RECOMPUTE, RECOMPUTE_MODES, RecomputePlan,
                               StageRecompute)
from ..specs.pipeline_layout import split_device_stages
from ..specs.model import ModelSpec
from ..specs.strategy import Strategy

BYTE = 1  # memory unit: whole bytes, so a plan the model fits almost never fails verification by rounding
RESOLUTION = 1e-6  # the plan model's time unit, as a fraction of the item's step-time lower bound
UPPER = 10**15  # upper bound of the model's integer variables (bytes and time units): far above any real value


def _floor(value: float, unit: float) -> int:
    return int(math.floor(value / unit + 1e-9))


def _ceil(value: float, unit: float) -> int:
    return int(math.ceil(value / unit - 1e-9))


PROBE_SECONDS = 0.5  # a sub-model's first try with the cutoff as a constraint (see PlanModel.solve)
# Deterministic seconds a sub-model gets with the tuned search (PlanModel._solver) before CP-SAT's default branching
# takes over for the time left. Over the 20 bench_search cases' sub-models the most any used was 0.05; found by
# hypothesis (tests/estimate/test_data_parallel.py): a 43-variable sub-model (1 GB/s network, ZeRO-3 gathering in
# forward and backward, uneven partitions) on which the LP-guided search stalls 2.7 % above the optimum for its whole
# 60 s, while the default branching proves it in 0.02 s. Deterministic time, so the switch happens at the same point
# on every machine.
TUNED_DETERMINISTIC_SECONDS = 1.0
# Per-layer plans: another plan of the same degrees is searched for only while it could be faster than the best
# verified one by more than the plan model's rounding (each time coefficient floored to 1e-6 of the step;
# PlanSolution says by how much at most) or this fraction, whichever is larger: plans are proven optimal within that
# tolerance (plans.plan_search).
PLAN_TOLERANCE = 1e-4
# CP-SAT stops a sub-model once its plan is within this fraction of its proven bound: just inside the tolerance, so
# a plan it returns is accepted without a re-solve (the certificate uses the proven bound, never the plan's
# objective). Measured on the 47 sub-models of Qwen3-235B on 1,024 H100 under 70 GiB, re-solved alone: 9.7 s at half
# the tolerance, 3.0 s at 0.9 of it (their LP bounds start about 1.5e-4 below the optimum; closing the rest is
# branching); the whole search 14.1 -> 9.7 s.
GAP_LIMIT = 0.9 * PLAN_TOLERANCE


@dataclass(frozen=True)
class _Built:
    """A built sub-model and the variables its solution is read from."""

    model: cp_model.CpModel
    z: list
    sizes: list
    counts: list
    decisions: list
    most: int


class PlanTimeout(Exception):
    """A sub-model ran out of time before finding any plan: nothing is known of it beyond the caller's bound."""


@dataclass(frozen=True)
class PlanSolution:
    """The best plan of one (item, sp): the strategy it gives and a lower bound on its full-estimator step time."""

    strategy: Strategy
    bound_seconds: float  # lower bound on every plan of the sub-model not excluded so far
    proven: bool
    assignment: tuple[int, ...]  # values of the decision variables, to exclude this plan in a later solve
    rounding_seconds: float = 0.0  # how far below the full estimators rounding can put the model's objective


class PlanModel:
    """The sub-model of one batch item and SP setting; ZeRO stage, recompute counts and partition are decided."""

    def __init__(self, space: SearchSpace, layout: Layout, mbs: int, mbn: int, sp: bool, modes: tuple[str, ...],
                 zeros: list[int]):
        model, cluster, run = space.model, space.cluster, space.run
        self.space, self.layout, self.mbs, self.mbn, self.sp = space, layout, mbs, mbn, sp
        self.modes, self.zeros = modes, zeros
        base = layout.strategy(mbs, mbn, zeros[0], sp, NO_RECOMPUTE)
        self.base = base
        schedule = schedule_named(layout.schedule)
        self.linear = schedule.linear_pipeline(mbn, layout.vpp, layout.pp)
        # Time unit: fine enough that flooring every coefficient costs well under PLAN_TOLERANCE of the step.
        self.unit = max(1e-12, item_lower_bound(space, (layout, mbs, mbn)) * RESOLUTION)
        self.layouts = stage_layouts(model, base)
        self.kinds = [{k: n for (k, _), n in counts if n} for counts in stage_mode_counts(model, base)]
        pp = layout.pp
        self.offset = space.partition_offset(layout)
        self.default = [self.layouts[s].layers for s in range(pp)]
        present = [k for k, n in (("dense", model.dense_layers), ("moe", model.moe_layers)) if n]
        hidden = hidden_comms(run, layout.schedule, pp, layout.vpp, layout.tp, sp, layout.ep)
        stage_key = StageKey(Degrees.of(layout, mbs, sp), layout.cp_comm, hidden)
        times = {(k, m): layer_time(model, cluster, run, stage_key.layer(k, m)) for k in present for m in modes}
        extras = [stage_extra(model, cluster, run, layout.schedule, s, pp, stage_key) for s in range(pp)]
        self.layer_time = {key: t.total for key, t in times.items()}
        p2p = p2p_per_microbatch(model, cluster, run, base)
        self.extra_time = [t.total + p2p for t in extras]
        # what each layer and stage adds to the schedule's bubble (Schedule.fill; the total for 1F1B-like schedules)
        self.layer_fill = {key: schedule.fill(t.total, t.full_backward, t.wgrad) for key, t in times.items()}
        self.extra_fill = [stage_fill(layout.schedule, t, p2p) for t in extras]
        keys = tuple((k, m) for k in present for m in modes)
        self.resident = [resident_layer_table(model, run, base, self.layouts[s], keys) for s in range(pp)]
        self.workspace = {(k, m): recompute_workspace_bytes(model, run, k, m, stage_key.degrees) for k in present
                          for m in modes}
        # host memory of offloaded layers per (kind, mode), per stage (its in-flight micro-batches)
        self.host = [host_offload_table(model, run, base, self.layouts[s], keys) for s in range(pp)]
        # host memory left for them: the capacity less an offloaded optimizer's states (its lightest ZeRO stage; with
        # uneven partitions none, as a stage may hold fewer layers: the model stays a relaxation)
        self.host_room = [host_room(space, base, self.layouts[s], () if self.offset else zeros) for s in range(pp)]
        self.fixed = [parts_total(stage_dynamic_bytes(model, run, base, self.layouts[s], counts={})) for s in range(pp)]
        self.static = [[parts_total(stage_static_bytes(model, run, base.with_zero(z), self.layouts[s]))
                        for s in range(pp)] for z in zeros]
        self.static_per_layer = [layer_static_bytes(space, layout, z) for z in zeros]
        # Data-parallel terms per ZeRO stage and stage: (windows: (seconds, count, pass), last bucket, optimizer, and
        # per layer: the windows' seconds and the optimizer's). A stage's collectives and optimizer step are affine in
        # its layers (one kind of layer, where uneven partitions are searched): the terms at its fewest layers and
        # the slope to its most; the last bucket's share at the most layers. Fixed partition: slopes 0.
        self.low = tuple(max(layout.vpp, d - self.offset) for d in self.default)  # a layer per chunk
        self.high = high = tuple(d + self.offset for d in self.default)
        self.dp_terms = []
        for z in zeros:
            fewest, most = (data_parallel_terms(model, cluster, run, strategy)
                            for strategy in self._at_fewest_and_most(z))
            self.dp_terms.append([(t.windows(mbn), m.last_bucket, t.optimizer,
                                   tuple(_slope(a, b, lo, hi) for (a, _, _), (b, _, _) in zip(t.windows(mbn),
                                                                                            m.windows(mbn))),
                                   _slope(t.optimizer, m.optimizer, lo, hi))
                                  for t, m, lo, hi in zip(fewest, most, self.low, high)])
        # An offloaded optimizer's host memory per ZeRO stage and stage, affine in its layers as the DP terms: (bytes
        # at its fewest layers, per layer above); 0 without optimizer offload
        self.host_optimizer = []
        for z in zeros:
            fewest, most = ([host_optimizer_bytes(model, run, strategy, self.layouts[s]) for s in range(pp)]
                            for strategy in self._at_fewest_and_most(z))
            self.host_optimizer.append([(a, _slope(a, b, lo, hi))
                                        for a, b, lo, hi in zip(fewest, most, self.low, high)])
        # Per pass ("forward", "backward"): each layer's and each stage's extra work's wall time (the DP windows)
        self.window = {"forward": {key: t.forward_window for key, t in times.items()},
                       "backward": {key: t.backward_window for key, t in times.items()}}
        self.extra_window = {"forward": [t.forward_window for t in extras],
                             "backward": [t.backward_window for t in extras]}

    @staticmethod
    def _follow_kind_rule(m, n, moe_layers: int, s: int) -> None:
        """On a stage with both kinds, MoE layers take the heavier recompute first (layout.mode_kind_counts), so
        the counts the model picks are the ones the estimators will read back."""
        # For each heaviest-first prefix of the options: dense layers run an option of the prefix only once every
        # MoE layer does (three options: full, then full or selective).
        options = [o for o in HEAVIEST_FIRST if ("moe", o) in n]
        for depth in range(1, len(options)):
            prefix = options[:depth]
            moe_covered = m.new_bool_var(f"moe_covered{s}_{depth}")
            m.add(sum(n[("moe", o)] for o in prefix) == moe_layers).only_enforce_if(moe_covered)
            m.add(sum(n.get(("dense", o), 0) for o in prefix) == 0).only_enforce_if(~moe_covered)

    def _at_fewest_and_most(self, zero: int) -> tuple[Strategy, Strategy]:
        """The base strategy under ZeRO stage `zero` with every stage at its fewest layers, and at its most (the
        default partition both times when it is fixed)."""
        if not self.offset:
            return self.base.with_zero(zero), self.base.with_zero(zero)
        return tuple(self.base.with_(zero=zero, layers_per_stage=split_device_stages(counts, self.layout.vpp))
                     for counts in (self.low, self.high))

    def solve(self, capacity_bytes: int, seconds: float, seed: int = 0, workers: int = 1,
              exclude: tuple[tuple[int, ...], ...] = (), cutoff_seconds: float = math.inf,
              solved: dict | None = None) -> PlanSolution | None:
        """The fastest plan whose every stage fits, other than the `exclude`d assignments; None when none is left
        or, given a cutoff, when none can be faster than it (the model is a lower bound, so then no plan is).
        Raises PlanTimeout when the time runs out before any plan is found.

        `solved` (a dict the caller keeps for one search): outcomes of sub-models already solved, by their exact
        content. Items that differ only where the model does not look (Llama-3.1-405B on 16,384 H100: cp 2 with
        micro-batch 1 and cp 4 with 2 hold the same tokens per device and shard over the same ranks) build the same
        sub-model, solved once (deterministic for a given seed and worker count; timeouts are not kept)."""
        deadline = time.perf_counter() + seconds
        limit = _floor(cutoff_seconds * self.linear.divisor, self.unit) if cutoff_seconds < math.inf else None
        found = self._solve(capacity_bytes, exclude, limit, deadline, seed, workers, solved)
        return None if found is None else self._solution(*found)

    def _solve(self, capacity_bytes: int, exclude: tuple[tuple[int, ...], ...], limit: int | None, deadline: float,
               seed: int, workers: int, solved: dict | None) -> tuple[_Outcome, _Built] | None:
        """The outcome of the model's best plan and the built model; None when no plan is left or none can beat the
        cutoff `limit`. With a cutoff, a short probe first solves with `objective <= cutoff` as a constraint (usually
        settles it in milliseconds, most often proving that no plan can beat the cutoff); measured, that constraint
        can also keep CP-SAT from proving an optimum it proves in 0.5 s without it, so when the probe does not
        conclude the model is solved without it, stopping as soon as its proven bound passes the cutoff. The tuned
        search gets TUNED_DETERMINISTIC_SECONDS; should it stall there, CP-SAT's default branching takes the rest."""
        if limit is not None:
            built = self._build(capacity_bytes, exclude, limit)
            # A wall-clock limit: CP-SAT's deterministic-time limit did not stop the stuck probes. Probes either settle
            # in milliseconds or stall far longer, so the answer does not hinge on where the limit falls.
            seconds = min(PROBE_SECONDS, deadline - time.perf_counter())
            outcome = _solve_once(built, self._solver(seconds, seed, workers), None, solved)
            if outcome.status == cp_model.INFEASIBLE:
                return None
            if outcome.status == cp_model.OPTIMAL:
                return outcome, built
        built = self._build(capacity_bytes, exclude, None)
        tuned = self._solver(deadline - time.perf_counter(), seed, workers)
        tuned.parameters.max_deterministic_time = TUNED_DETERMINISTIC_SECONDS
        outcome = _solve_once(built, tuned, limit, solved)
        if outcome.status in (cp_model.FEASIBLE, cp_model.UNKNOWN) and not outcome.past_cutoff \
                and time.perf_counter() < deadline:  # the tuned search stalled: the default branching, for the rest
            fallback = self._solver(deadline - time.perf_counter(), seed, workers)
            fallback.parameters.search_branching = cp_model.AUTOMATIC_SEARCH
            outcome = _solve_once(built, fallback, limit, solved)
        if outcome.past_cutoff:
            return None
        if outcome.status == cp_model.UNKNOWN:
            raise PlanTimeout
        if outcome.status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return None
        return outcome, built

    @staticmethod
    def _solver(seconds: float, seed: int, workers: int) -> cp_model.CpSolver:
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = max(0.01, seconds)
        solver.parameters.random_seed = seed
        solver.parameters.num_workers = workers
        # Full linearisation of the ZeRO-enforced constraints: measured, without it CP-SAT took seconds instead of
        # tens of milliseconds to prove sub-models where several ZeRO stages' DP exposures nearly tie.
        solver.parameters.linearization_level = 2
        # Light presolve, no probing or symmetry detection: measured on the plan sub-models of Llama-3-70B and
        # Mixtral-8x7B on 64 H100 (152 models), the same optima 1.2-1.6x faster.
        solver.parameters.max_presolve_iterations = 1
        solver.parameters.cp_model_probing_level = 0
        solver.parameters.symmetry_level = 0
        # Branch on the LP solution: the LP bound comes within the gap limit in tenths of a second, and the default
        # search then spent seconds finding plans as good (Qwen3-235B on 1,024 H100: 3 s per sub-model). Measured
        # on the 285 sub-models the default search solves over the 20 bench_search cases, as the search calls them:
        # 22.4 -> 15.3 s in all, Qwen3 7.2 -> 1.6 s, no case slower beyond noise.
        solver.parameters.search_branching = cp_model.LP_SEARCH
        # Every linear constraint in the LP from the start, not added as it is violated: the 296 sub-models the 20
        # bench_search cases solve, replayed twice each way in one run: 13.1 and 12.0 -> 10.4 and 11.0 s;
        # Llama-3.1-405B on 16,384 and 131,072 H100 0.74 -> 0.39 s and 0.86 -> 0.41 s, Mixtral-8x22B on 2,048
        # H100 the one case slower (0.8 -> 1.15 s).
        solver.parameters.add_lp_constraints_lazily = False
        solver.parameters.relative_gap_limit = GAP_LIMIT
        return solver

    def _build(self, capacity_bytes: int, exclude: tuple[tuple[int, ...], ...], limit: int | None) -> "_Built":
        """The CP-SAT model; `limit` (objective units) adds `objective <= limit` as a constraint."""
        m = cp_model.CpModel()
        pp, cap = self.layout.pp, capacity_bytes // BYTE
        host_cap = int(self.space.cluster.device.host_memory_bytes // BYTE)
        z = [m.new_bool_var(f"zero{k}") for k in range(len(self.zeros))]
        m.add_exactly_one(z)
        most = max(self.default) + self.offset
        sizes, counts, stage_times, fills = [], [], [], []
        fill_is_total = self.layer_fill == self.layer_time and self.extra_fill == self.extra_time
        slowest = m.new_int_var(0, UPPER, "slowest")
        for s in range(pp):
            if self.offset:
                size = m.new_int_var(max(self.layout.vpp, self.default[s] - self.offset), self.default[s] + self.offset,
                                     f"L{s}")
                kinds = {next(iter(self.kinds[s])): size}
            else:
                size = self.default[s]
                kinds = self.kinds[s]
            sizes.append(size)
            n = {}
            for kind, total in kinds.items():
                for mode in self.modes:
                    n[(kind, mode)] = m.new_int_var(0, most, f"n{s}_{kind}_{mode}")
                m.add(sum(n[(kind, mode)] for mode in self.modes) == total)
            if len(kinds) > 1:
                self._follow_kind_rule(m, n, kinds["moe"], s)
            counts.append(n)
            workspace = m.new_int_var(0, UPPER, f"ws{s}")
            for key, var in n.items():
                need = _floor(self.workspace[key], BYTE)
                if need:
                    used = m.new_bool_var(f"used{s}_{key[0]}_{key[1]}")
                    m.add(var <= most * used)
                    m.add(workspace >= need * used)
            static = sum(zk * _floor(self.static[k][s] - self.static_per_layer[k] * self.default[s], BYTE)
                         for k, zk in enumerate(z))
            per_layer = [_floor(self.static_per_layer[k], BYTE) for k in range(len(z))]
            # static parts: z picks the ZeRO stage; the per-layer static term scales with the stage's layers
            layer_static = m.new_int_var(0, UPPER, f"layer_static{s}")
            for k, zk in enumerate(z):
                m.add(layer_static == per_layer[k] * size).only_enforce_if(zk)
            memory = (static + layer_static + _floor(self.fixed[s], BYTE) + workspace
                      + sum(_floor(self.resident[s][key], BYTE) * var for key, var in n.items()))
            m.add(memory <= cap)
            # an offloaded optimizer's states within the host memory: a ZeRO stage whose states cannot fit is not chosen
            # (verification refuses its every plan: without this the no-good cuts enumerated them all)
            for k, zk in enumerate(z):
                fewest, per_layer = self.host_optimizer[k][s]
                if isinstance(size, int) and _floor(fewest, BYTE) > host_cap:
                    m.add(zk == 0)
                elif not isinstance(size, int) and fewest > 0:
                    m.add(_floor(fewest, BYTE) + _floor(per_layer, BYTE) * (size - self.low[s]) <= host_cap
                          ).only_enforce_if(zk)
            host = [(_floor(self.host[s][key], BYTE), var) for key, var in n.items() if self.host[s][key] > 0]
            if host:  # offloaded activations within the host memory (floored: the model stays a relaxation)
                m.add(sum(c * v for c, v in host) <= int(self.host_room[s] // BYTE))
            busy = sum(_floor(self.layer_time[key], self.unit) * var for key, var in n.items())
            t = m.new_int_var(0, UPPER, f"t{s}")
            m.add(t == busy + _floor(self.extra_time[s], self.unit))
            m.add(slowest >= t)
            stage_times.append(t)
            fills.append(t if fill_is_total else
                         sum(_floor(self.layer_fill[key], self.unit) * var for key, var in n.items())
                         + _floor(self.extra_fill[s], self.unit))
        if self.offset:
            m.add(sum(sizes) == self.space.model.layers)
        decisions = list(z) + [x for x in sizes if not isinstance(x, int)] + [v for n in counts for v in n.values()]
        for assignment in exclude:  # no-good: differ from an excluded plan in at least one decision
            differs = []
            for var, value in zip(decisions, assignment):
                d = m.new_bool_var("")
                m.add(var != value).only_enforce_if(d)
                differs.append(d)
            m.add_bool_or(differs)
        exposed, optimizer = self._data_parallel(m, z, counts, sizes)
        # the schedule's pipeline as its linear form, plus the DP terms (all times the form's divisor)
        line = self.linear
        objective = (line.slowest_weight * slowest + line.sum_weight * sum(fills)
                     + line.divisor * (exposed + optimizer))
        if limit is not None:
            m.add(objective <= limit)
        m.minimize(objective)
        return _Built(m, z, sizes, counts, decisions, most)

    @staticmethod
    def _read(outcome: "_Outcome", built: "_Built") -> tuple[int, list[int], list[dict]]:
        """(index of the chosen ZeRO stage, layers per stage, counts per (kind, mode) per stage) of a solution."""
        value = {var.index: v for var, v in zip(built.decisions, outcome.values)}
        k = next(k for k, var in enumerate(built.z) if value[var.index])
        layers = [value[x.index] if not isinstance(x, int) else x for x in built.sizes]
        return k, layers, [{key: value[var.index] for key, var in n.items()} for n in built.counts]

    def _solution(self, outcome: "_Outcome", built: "_Built") -> PlanSolution:
        """The plan a solved model chose, its proven bound and how far rounding can put it below the estimators."""
        pp, line = self.layout.pp, self.linear
        k, layers, counts = self._read(outcome, built)
        stages = []
        for n in counts:
            totals = dict.fromkeys(RECOMPUTE_MODES, 0)
            for (_, mode), count in n.items():
                totals[mode] += count
            stages.append(totals)
        bound = math.floor(outcome.bound + 1e-9) * self.unit / line.divisor
        # Every coefficient is floored to the unit: at most one unit per layer and per extra term on a stage,
        # counted slowest_weight times through the slowest stage and sum_weight times per stage, plus the DP terms.
        per_stage = built.most + 1
        rounding = self.unit * ((line.slowest_weight + line.sum_weight * pp) * per_stage
                                + line.divisor * self._data_parallel_rounding(per_stage)) / line.divisor
        return PlanSolution(self._plan(stages, layers, self.zeros[k]), bound, outcome.status == cp_model.OPTIMAL,
                            outcome.values, rounding)

    def _data_parallel(self, m, z, counts, sizes):
        """Exposed DP sync and optimizer step (estimate.data_parallel.DataParallelTerms.exposed), linear in the
        counts. A window (DataParallelTerms.windows) is the stage's forward or backward wall time per micro-batch, each
        coefficient rounded up; per ZeRO choice z_k and kind of window an integer e >= z_k x floor(seconds) - window
        and e >= z_k x floor(seconds x last bucket) (no constraint unless z_k = 1, as z is exactly one), and the
        stage's exposure = sum count x e: exposure is never overestimated. With the stage's layer count L a variable
        (uneven partitions), seconds = floor(at its fewest layers) + floor(per layer) x (L - fewest), enforced when
        z_k = 1: each part rounded down, so still never above the estimators; the last bucket's share, seconds / L,
        at least each line through its values at consecutive layer counts on its lower convex hull (_lower_lines)."""
        exposed = m.new_int_var(0, UPPER, "dp_exposed")
        optimizer = m.new_int_var(0, UPPER, "optimizer")
        for s, n in enumerate(counts):
            window = {which: sum(_ceil(self.window[which][key], self.unit) * var for key, var in n.items())
                      + _ceil(self.extra_window[which][s], self.unit) for which in ("forward", "backward")}
            extra = 0 if isinstance(sizes[s], int) else sizes[s] - self.low[s]  # layers above the fewest
            stage = []
            for k, zk in enumerate(z):
                windows, last, opt, slopes, opt_slope = self.dp_terms[k][s]
                if isinstance(extra, int):  # a fixed partition: linear in z_k (a tighter LP than an enforced one)
                    m.add(optimizer >= _floor(opt, self.unit) * zk)
                else:
                    m.add(optimizer >= _floor(opt, self.unit) + _floor(opt_slope, self.unit) * extra
                          ).only_enforce_if(zk)
                for i, ((seconds, count, which), slope) in enumerate(zip(windows, slopes)):
                    at_fewest = _floor(seconds, self.unit)
                    top = max(at_fewest, at_fewest + _floor(slope, self.unit) * self.offset * 2)
                    if count == 0 or top == 0:
                        continue
                    # never more than the collective itself (window >= 0, last bucket <= 1): a tight domain, and
                    # measured, CP-SAT 9.15's presolve wrongly proved some models infeasible with [0, UPPER] here
                    e = m.new_int_var(0, top, f"dp{s}_{k}_{i}")
                    if isinstance(extra, int):
                        m.add(e >= at_fewest * zk - window[which])
                        m.add(e >= _floor(seconds * last, self.unit) * zk)
                    else:
                        m.add(e >= at_fewest + _floor(slope, self.unit) * extra - window[which]).only_enforce_if(zk)
                        # the last bucket's share: 1/L of a collective affine in L (convex in L with the stage's
                        # fixed parameters), at least the lines through its values at each layer count L may take
                        for p, q in _lower_lines([(n, (seconds + slope * (n - self.low[s])) / n)
                                                  for n in range(self.low[s], self.high[s] + 1)]):
                            m.add(e >= _floor(p, self.unit) + _floor(q, self.unit) * sizes[s]).only_enforce_if(zk)
                    stage.append(count * e)
            m.add(exposed >= sum(stage))
        return exposed, optimizer

    def _data_parallel_rounding(self, per_stage: int) -> float:
        """Units the DP terms of _data_parallel can lie below the estimators: per window, under 1 for the floored
        seconds, under one per layer above the fewest for the floored slope, and under one per layer and extra term
        for the window's rounding; the same but the window's for the optimizer."""
        slope = 2 * self.offset  # layers above a stage's fewest, at most
        return max(sum(count for _, count, _ in windows) * (1 + slope + per_stage) + 1 + slope
                   for terms in self.dp_terms for windows, _, _, _, _ in terms)

    def _plan(self, stages: list[dict[str, int]], layers: list[int], zero: int) -> Strategy:
        """The strategy carrying the per-virtual-stage plan, the partition (if changed) and the ZeRO stage."""
        pp, vpp = self.layout.pp, self.layout.vpp
        partition = split_device_stages(layers, vpp) if layers != self.default else ()
        chunk_layers = partition or default_partition(self.space.model.layers, pp * vpp)
        recompute = plan_from_stage_totals(self.space.model, stages, chunk_layers, pp, uneven=bool(partition))
        return self.base.with_(zero=zero, recompute=recompute, layers_per_stage=partition)


@dataclass(frozen=True)
class _Outcome:
    """What a solve of a built sub-model gave: its status, the values of its decisions (_Built.decisions), its proven
    bound (objective units) and whether it stopped because that bound passed the cutoff."""

    status: int
    values: tuple[int, ...]
    bound: float
    past_cutoff: bool = False


def _solve_once(built: _Built, solver: cp_model.CpSolver, limit: int | None, solved: dict | None) -> _Outcome:
    """Solve `built` (stopping once the proven bound passes `limit`, if given), or take the outcome of the same
    model solved before from `solved` (keyed by the model's text, the limit, the seed and the worker count)."""
    params = solver.parameters
    key = None if solved is None else (str(built.model.proto), limit, params.random_seed, params.num_workers)
    if key is not None and key in solved:
        return solved[key]
    beyond = []
    if limit is not None:
        def past_cutoff(bound: float) -> None:
            if bound > limit:
                beyond.append(bound)
                solver.stop_search()

        solver.best_bound_callback = past_cutoff
    status = interruptible(solver, built.model)
    found = status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    outcome = _Outcome(status, tuple(solver.value(v) for v in built.decisions) if found else (),
                       solver.best_objective_bound if found else 0.0, bool(beyond))
    # an outcome the clock decided (a timeout, with or without a plan) is not kept
    if key is not None and (status in (cp_model.OPTIMAL, cp_model.INFEASIBLE) or beyond):
        solved[key] = outcome
    return outcome


def _lower_lines(points: list[tuple[int, float]]) -> list[tuple[float, float]]:
    """(intercept, slope) of the lines through consecutive vertices of the lower convex hull of `points` (x rising):
    each is at most every point's y, and their largest equals it at every vertex (a lone point: a flat line). Floored
    to the model's units (intercept and slope each, with x >= 0) they stay below."""
    hull = lower_hull(points)
    if len(hull) == 1:
        return [(hull[0][1], 0.0)]
    return [(y0 - (y1 - y0) / (x1 - x0) * x0, (y1 - y0) / (x1 - x0)) for (x0, y0), (x1, y1) in zip(hull, hull[1:])]


def _slope(at_fewest: float, at_most: float, fewest: int, most: int) -> float:
    """Seconds per layer between a stage's fewest and most layers (0 when they are equal)."""
    return (at_most - at_fewest) / (most - fewest) if most > fewest else 0.0


def plan_from_stage_totals(model: ModelSpec, stages: list[dict[str, int]], chunk_layers: tuple[int, ...], pp: int,
                           uneven: bool) -> RecomputePlan:
    """The recompute plan of per-device-stage mode totals: one uniform mode when every layer has the same one (and
    the partition is the default), else per-virtual-stage counts."""
    per_virtual = split_stage_counts(model, stages, chunk_layers, pp)
    modes = {m for st in per_virtual for m in RECOMPUTE_MODES if st.count(m)}
    if len(modes) == 1 and not uneven:
        return RecomputePlan.uniform(modes.pop())
    return RecomputePlan(mode="per-stage", stages=tuple(per_virtual))


def split_stage_counts(model: ModelSpec, stages: list[dict[str, int]], chunk_layers: tuple[int, ...], pp: int
                       ) -> list[StageRecompute]:
    """Per-virtual-stage counts from each device stage's totals, keeping the kind rule over the whole device stage
    (its MoE layers take the heaviest options: layout.mode_kind_counts): each kind's options are handed to the
    stage's chunks (virtual stages s, s+pp, ...) heaviest first, as many as each chunk has layers of that kind. Within
    a chunk the MoE layers then hold its heaviest options, so the estimators read back the same assignment."""
    kinds = chunk_kinds(model, chunk_layers)
    out: list[StageRecompute] = [StageRecompute()] * len(chunk_layers)
    for s, totals in enumerate(stages):
        chunks = range(s, len(chunk_layers), pp)
        device = {k: sum(kinds[v][k] for v in chunks) for k in LAYER_KINDS}
        plan = StageRecompute(**{m: n for m, n in totals.items() if n})
        pool = mode_kind_counts(device, plan)
        for v in chunks:
            chunk = [0] * len(RECOMPUTE_MODES)
            for kind in LAYER_KINDS:
                need = kinds[v][kind]
                for mode in HEAVIEST_FIRST:
                    take = min(need, pool.get((kind, mode), 0))
                    if take:
                        chunk[MODE_INDEX[mode]] += take
                        pool[(kind, mode)] -= take
                        need -= take
            out[v] = StageRecompute.from_counts(tuple(chunk))
    return out
