"""Per-stage recompute plans (and layer partitions) for one degree tuple, solved exactly by a small CP-SAT model.

For a batch item (layout, mbs, mbn) and an SP setting, the decisions are, per device stage s and layer kind k, the
number of layers n[s,k,m] that run with each recompute option m (keep, selective, Megatron's modules, offload,
full), the layers per stage L[s] when uneven partitions are searched (single-kind models, within +-max_offset of the
default), and the ZeRO stage (one boolean each). The layers flow one way:
    plan_form.py          the sub-model's terms from the full estimators, in seconds and bytes, with names
    plan_coefficients.py  the same in the model's integer units, rounded so the model stays a relaxation
    plan_model.py         the CP-SAT model built from them, one builder per constraint group
    this module           solving it (a probe against the cutoff, the tuned search, a fallback), memoising outcomes by
                          the coefficients, and reading the plan back as a strategy
The optimum is a lower bound of the full estimators; the caller verifies the plan it returns.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import cached_property

from ortools.sat.python import cp_model

from ..estimate.layout import LAYER_KINDS, chunk_kinds, default_partition, mode_kind_counts
from ..space import Layout, SearchSpace
from .interrupt import solve as interruptible
from .plan_coefficients import BYTE, PlanCoefficients, counted_kinds, floor_to, plan_coefficients
from .plan_form import plan_form, weighed_coefficients
from .plan_model import BuiltPlanModel, build_plan_model
from ..specs.recompute import HEAVIEST_FIRST, MODE_INDEX, RECOMPUTE_MODES, RecomputePlan, StageRecompute
from ..specs.pipeline_layout import split_device_stages
from ..specs.model import ModelSpec
from ..specs.strategy import Strategy


# A sub-model's first try, with the cutoff as a constraint (PlanModel._solve), stops after this much deterministic
# time: whether the probe concludes (and so which path, and which plan within GAP_LIMIT, the sub-model takes) is
# then the same on every machine and at any load. It was 0.5 s of wall clock, which probes settling near it crossed
# one way or the other with the load. The 22 bench cases' 114 probes, let run to the end: none stalled, the slowest
# used 0.74 deterministic seconds, the next 0.21 (docs/tuning.md).
PROBE_DETERMINISTIC_SECONDS = 0.25
# A wall-clock safety net for the probe, far above what its deterministic budget takes (0.25 deterministic seconds
# came within about 2 s of wall clock on a 2-core machine at load 7): only a probe whose deterministic clock stalled
# would reach it (none of the 114 did), the one case where the machine's speed would still choose the path
# (docs/solver.md §9, Determinism).
PROBE_SAFETY_SECONDS = 10.0
# Deterministic seconds a sub-model gets with the tuned search (PlanModel._solver) before CP-SAT's default branching
# takes over for the time left: far more than the bench cases' sub-models use, and the default branching proves the
# few on which the LP-guided search stalls (docs/tuning.md). Deterministic, so the switch happens at the same point
# on every machine.
TUNED_DETERMINISTIC_SECONDS = 1.0
# Per-layer plans: another plan of the same degrees is searched for only while it could be faster than the best
# verified one by more than the plan model's rounding (at most about plan_form.RESOLUTION of the step;
# PlanSolution says by how much) or this fraction, whichever is larger: plans are proven optimal within that
# tolerance (plans.plan_search).
PLAN_TOLERANCE = 1e-4
# CP-SAT stops a sub-model once its plan is within this fraction of its proven bound: just inside the tolerance, so
# a plan it returns is accepted without a re-solve (the certificate uses the proven bound, never the plan's
# objective); closer to the tolerance, less branching (docs/tuning.md).
GAP_LIMIT = 0.9 * PLAN_TOLERANCE


class PlanTimeout(Exception):
    """A sub-model ran out of time before finding any plan, or CP-SAT refused it (MODEL_INVALID): nothing is known of
    it beyond the caller's bound (never read as "no plan", which would drop its plans from a proof)."""


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
        self.space, self.layout, self.zeros = space, layout, zeros
        self.form = plan_form(space, layout, mbs, mbn, sp, modes, tuple(zeros))
        self.base = self.form.base
        self.coefficients: PlanCoefficients = plan_coefficients(self.form)

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
        form = self.form
        limit = floor_to(cutoff_seconds * form.linear.divisor, form.unit) if cutoff_seconds < math.inf else None
        found = self._solve(capacity_bytes, exclude, limit, deadline, seed, workers, solved)
        return None if found is None else self._solution(found)

    def _solve(self, capacity_bytes: int, exclude: tuple[tuple[int, ...], ...], limit: int | None, deadline: float,
               seed: int, workers: int, solved: dict | None) -> _Outcome | None:
        """The outcome of the model's best plan; None when no plan is left or none can beat the
        cutoff `limit`. With a cutoff, a short probe first solves with `objective <= cutoff` as a constraint (usually
        settles it in milliseconds, most often proving that no plan can beat the cutoff); measured, that constraint
        can also keep CP-SAT from proving an optimum it proves in 0.5 s without it, so when the probe does not
        conclude the model is solved without it, stopping as soon as its proven bound passes the cutoff. The tuned
        search gets TUNED_DETERMINISTIC_SECONDS; should it stall there, CP-SAT's default branching takes the rest.
        Which way a sub-model goes is decided by deterministic time only (the paths can answer different plans
        within GAP_LIMIT, so a wall-clock limit would let the machine's load reorder a proven ranking); the wall
        clock is the caller's deadline, and for the probe a far safety net (PROBE_SAFETY_SECONDS)."""
        if limit is not None:
            built = self._build(capacity_bytes, exclude, limit)
            probe = self._solver(min(PROBE_SAFETY_SECONDS, deadline - time.perf_counter()), seed, workers)
            probe.parameters.max_deterministic_time = PROBE_DETERMINISTIC_SECONDS
            outcome = _solve_once(built, probe, None, solved)
            if outcome.status == cp_model.INFEASIBLE:
                return None
            if outcome.status == cp_model.OPTIMAL:
                return outcome
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
        if outcome.status in (cp_model.UNKNOWN, cp_model.MODEL_INVALID):
            raise PlanTimeout
        if outcome.status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return None
        return outcome

    @staticmethod
    def _solver(seconds: float, seed: int, workers: int) -> cp_model.CpSolver:
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = max(0.01, seconds)
        solver.parameters.random_seed = seed
        solver.parameters.num_workers = workers
        # Each setting below was chosen by a measurement: docs/tuning.md.
        # Full linearisation of the ZeRO-enforced constraints: proves sub-models whose ZeRO stages nearly tie.
        solver.parameters.linearization_level = 2
        # Light presolve, no probing or symmetry detection: the sub-models are small; the same optima, faster.
        solver.parameters.max_presolve_iterations = 1
        solver.parameters.cp_model_probing_level = 0
        solver.parameters.symmetry_level = 0
        # Branch on the LP solution: the LP bound comes within the gap limit quickly, and the default search then
        # spends long finding plans as good.
        solver.parameters.search_branching = cp_model.LP_SEARCH
        # Every linear constraint in the LP from the start, not added as it is violated.
        solver.parameters.add_lp_constraints_lazily = False
        solver.parameters.relative_gap_limit = GAP_LIMIT
        return solver

    def _build(self, capacity_bytes: int, exclude: tuple[tuple[int, ...], ...], limit: int | None) -> _SubModel:
        """The sub-model under the capacity, less the `exclude`d plans; `limit` (objective units) adds
        `objective <= limit` as a constraint."""
        return _SubModel(self.coefficients, capacity_bytes // BYTE, exclude, limit)

    def _solution(self, outcome: _Outcome) -> PlanSolution:
        """The plan a solved model chose, its proven bound and how far rounding can put it below the estimators."""
        form, c = self.form, self.coefficients
        line, pp = form.linear, len(c.stages)
        k, layers, counts = read_decisions(c, outcome.values)
        stages = []
        for n in counts:
            totals = dict.fromkeys(RECOMPUTE_MODES, 0)
            for (_, mode), count in n.items():
                totals[mode] += count
            stages.append(totals)
        bound = math.floor(outcome.bound + 1e-9) * form.unit / line.divisor
        # Every coefficient is floored to the unit: at most one unit per weighed coefficient, plus the DP terms.
        rounding = form.unit * (weighed_coefficients(line, pp, c.most_layers)
                                + self._data_parallel_rounding(c.most_layers + 1))
        return PlanSolution(self._plan(stages, layers, self.zeros[k]), bound, outcome.status == cp_model.OPTIMAL,
                            outcome.values, rounding)

    def _data_parallel_rounding(self, per_stage: int) -> float:
        """Units the DP terms (plan_model.add_data_parallel) can lie below the estimators: per window, under 1 for
        the floored seconds, under one per layer above the fewest for the floored slope, and under one per layer and
        extra term for the window's rounding; the same but the window's for the optimizer."""
        slope = 2 * self.coefficients.offset  # layers above a stage's fewest, at most
        return max(terms.rounding_count * (1 + slope + per_stage) + 1 + slope
                   for stage in self.coefficients.stages for terms in stage.data_parallel)

    def _plan(self, stages: list[dict[str, int]], layers: list[int], zero: int) -> Strategy:
        """The strategy carrying the per-virtual-stage plan, the partition (if changed) and the ZeRO stage."""
        pp, vpp = self.layout.pp, self.layout.vpp
        default = [stage.default_layers for stage in self.coefficients.stages]
        partition = split_device_stages(layers, vpp) if layers != default else ()
        chunk_layers = partition or default_partition(self.space.model.layers, pp * vpp)
        recompute = plan_from_stage_totals(self.space.model, stages, chunk_layers, pp, uneven=bool(partition))
        return self.base.with_(zero=zero, recompute=recompute, layers_per_stage=partition)


@dataclass(frozen=True)
class _Outcome:
    """What a solve of a built sub-model gave: its status, the values of its decisions (BuiltPlanModel.decisions),
    its proven bound (objective units) and whether it stopped because that bound passed the cutoff."""

    status: int
    values: tuple[int, ...]
    bound: float
    past_cutoff: bool = False


@dataclass(frozen=True)
class _SubModel:
    """A sub-model to solve: its coefficients, capacity, excluded plans and cutoff constraint; built on first use."""

    coefficients: PlanCoefficients
    capacity: int
    exclude: tuple[tuple[int, ...], ...]
    limit: int | None

    @cached_property
    def built(self) -> BuiltPlanModel:
        return build_plan_model(self.coefficients, self.capacity, self.exclude, self.limit)


def _solve_once(sub: _SubModel, solver: cp_model.CpSolver, limit: int | None, solved: dict | None) -> _Outcome:
    """Solve `sub` (stopping once the proven bound passes `limit`, if given), or take the outcome of the same model
    solved before from `solved` (keyed by the sub-model's content, the limit, the seed and the worker count)."""
    params = solver.parameters
    key = None if solved is None else (sub, limit, params.random_seed, params.num_workers)
    if key is not None and key in solved:
        return solved[key]
    beyond = []
    if limit is not None:
        def past_cutoff(bound: float) -> None:
            if bound > limit:
                beyond.append(bound)
                solver.stop_search()

        solver.best_bound_callback = past_cutoff
    built = sub.built
    status = interruptible(solver, built.model)
    found = status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    outcome = _Outcome(status, tuple(solver.value(v) for v in built.decisions) if found else (),
                       solver.best_objective_bound if found else 0.0, bool(beyond))
    # an outcome the clock decided (a timeout, with or without a plan) is not kept
    if key is not None and (status in (cp_model.OPTIMAL, cp_model.INFEASIBLE) or beyond):
        solved[key] = outcome
    return outcome


def read_decisions(c: PlanCoefficients, values: tuple[int, ...]) -> tuple[int, list[int], list[dict]]:
    """(index of the chosen ZeRO stage, layers per stage, counts per (kind, option) per stage) of a solution's
    decision values, in plan_model.build_plan_model's order: the ZeRO booleans, the free sizes, the counts."""
    rest = iter(values)
    zero = [next(rest) for _ in range(c.zero_count)]
    layers = [stage.default_layers if c.partition_fixed else next(rest) for stage in c.stages]
    counts = [{(kind, mode): next(rest) for kind in counted_kinds(c.partition_fixed, tuple(k for k, _ in stage.kinds))
               for mode in c.modes} for stage in c.stages]
    return zero.index(1), layers, counts


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
