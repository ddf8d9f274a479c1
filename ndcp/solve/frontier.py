"""The memory-time frontier of one strategy: for a sweep of memory caps, the fastest per-stage recompute plan (and
layer partition) that fits, degrees, SP and ZeRO stage fixed, solved by recompute.PlanModel (within its GAP_LIMIT)
and verified with the full estimators.

The plan model's coefficients are rounded down, so a solution may be over the cap once priced in full: it is then
excluded (a no-good cut) and the model solved again. Each point is reported with its verified peak and step time.
A looser cap never gives a slower point: a plan that fits a tighter cap fits every looser one, so the frontier keeps
the faster of the new optimum and the previous point (the model's optima are monotone already; this also covers ties
in the rounded objective that the full estimators break differently).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from ..estimate.layout import partition
from ..space import Layout, SearchSpace
from ..specs.recompute import RecomputePlan
from ..specs.strategy import RECOMPUTE_MODES, Strategy
from .recompute import PlanModel, PlanTimeout
from .result import CTRL_C, TIE, TIME_LIMIT, Evaluated, evaluate

MIB, GIB = 2**20, 2**30
RESOLUTION = 16 * MIB  # the least memory is found to within this
RETRIES = 4  # solutions over the cap once priced in full, excluded before giving up on a cap
MAX_POINTS = 200  # the most caps one frontier solves (`ndcp recompute --points`, --caps): a few seconds each


class _OutOfTime(Exception):
    """The frontier's time limit has passed: the caps not solved yet stay unsolved."""


@dataclass
class FrontierPoint:
    caps: list[int]  # the caps (bytes) that gave this plan, ascending
    evaluated: Evaluated
    bound_seconds: float  # the plan model's lower bound under the smallest of the caps
    proven: bool  # the plan model was solved to optimality at every cap of this point

    @property
    def cap_bytes(self) -> int:
        return self.caps[0]

    @property
    def step_seconds(self) -> float:
        return self.evaluated.step_seconds

    @property
    def peak_bytes(self) -> int:
        return self.evaluated.memory.peak_bytes

    @property
    def strategy(self) -> Strategy:
        return self.evaluated.strategy


@dataclass
class Frontier:
    strategy: Strategy  # the strategy whose degrees are fixed
    least_bytes: int | None  # the least cap any plan fits under (None: not even the largest cap)
    points: list[FrontierPoint] = field(default_factory=list)  # ascending cap, descending step time
    infeasible_caps: list[int] = field(default_factory=list)  # requested caps no plan fits under
    solve_seconds: float = 0.0
    solves: int = 0
    complete: bool = True  # False when a plan solve ran out of time: a cap read as infeasible may not be
    unsolved_caps: list[int] = field(default_factory=list)  # requested caps left unsolved when the frontier stopped
    stopped: str | None = None  # why it stopped before every cap was solved: TIME_LIMIT or CTRL_C (None: it did not)
    uniform: bool = False  # only plans of one recompute option on every layer (frontier's `uniform`)

    def marginal(self) -> list[float | None]:
        """Per point: seconds of step time per GiB of peak saved by moving to the next tighter point (None for the
        tightest, or when the tighter point does not save memory)."""
        out: list[float | None] = [None]
        for lo, hi in zip(self.points, self.points[1:]):
            saved = (hi.peak_bytes - lo.peak_bytes) / GIB
            out.append((lo.step_seconds - hi.step_seconds) / saved if saved > 0 else None)
        return out


def stage_counts(model, strategy: Strategy) -> list[dict[str, int]]:
    """Per device stage: layers with none / selective / full recompute, and the stage's layers."""
    counts = partition(model, strategy)
    pp = strategy.pp
    out = [dict.fromkeys(RECOMPUTE_MODES + ("layers",), 0) for _ in range(pp)]
    for v, n in enumerate(counts):
        plan = strategy.recompute.for_stage(v, n)
        row = out[v % pp]
        for mode in RECOMPUTE_MODES:
            row[mode] += plan.count(mode)
        row["layers"] += n
    return out


def _space_at(space: SearchSpace, cap: int) -> SearchSpace:
    return replace(space, run=replace(space.run, memory_cap_bytes=cap))


class _Solver:
    def __init__(self, space: SearchSpace, strategy: Strategy, deadline: float, seed: int, workers: int):
        layout = Layout(strategy.tp, strategy.pp, strategy.cp, strategy.dp, strategy.ep, strategy.etp, strategy.vpp,
                        strategy.cp_comm, strategy.schedule, strategy.optimizer_offload, strategy.dp_shard)
        self.space, self.deadline, self.seed, self.workers = space, deadline, seed, workers
        self.model = PlanModel(space, layout, strategy.mbs, strategy.mbn, strategy.sp,
                               tuple(space.inner_choices(strategy.tp)[2]),
                               [strategy.zero])
        self.solves = 0
        self.timed_out = False

    def fastest(self, cap: int):
        """(evaluated, solution) of the fastest verified plan under `cap`, or None when none fits."""
        space = _space_at(self.space, cap)
        exclude: tuple = ()
        for _ in range(RETRIES + 1):
            seconds = self.deadline - time.perf_counter()  # each solve has what is left of the frontier's time
            if seconds <= 0:
                raise _OutOfTime
            self.solves += 1
            try:
                solution = self.model.solve(cap, seconds, self.seed, self.workers, exclude)
            except PlanTimeout:  # unknown under this cap: reported, and read as no plan found
                self.timed_out = True
                return None
            if solution is None:
                return None
            evaluated = evaluate(space, solution.strategy)
            if evaluated.fits:
                return evaluated, solution
            exclude += (solution.assignment,)
        return None


class _Priced(NamedTuple):
    """What _UniformSolver.fastest returns beside the plan, in the shape of a plan solution: every option priced,
    so the bound is the plan's own time and it is proven."""

    bound_seconds: float
    proven: bool = True


class _UniformSolver:
    """The frontier of a trainer that runs one recompute option on every layer (policy.trainer_method): under each
    cap the fastest of the strategy's uniform plans, one per offered option, each priced in full (exhaustive)."""

    def __init__(self, space: SearchSpace, strategy: Strategy, options: tuple[str, ...], deadline: float):
        self.space, self.deadline = space, deadline
        self.plans = [replace(strategy, recompute=RecomputePlan.uniform(option)) for option in options]
        self.solves = 0
        self.timed_out = False

    def fastest(self, cap: int):
        """(evaluated, _Priced) of the fastest uniform plan that fits under `cap`, or None when none fits."""
        if self.deadline - time.perf_counter() <= 0:
            raise _OutOfTime
        space = _space_at(self.space, cap)
        self.solves += 1
        fitting = [e for e in (evaluate(space, plan) for plan in self.plans) if e.fits]
        if not fitting:
            return None
        best = min(fitting, key=Evaluated.rank_key)
        return best, _Priced(best.step_seconds)


def least_memory(solver: _Solver | _UniformSolver, high: int) -> int | None:
    """The least cap (to within RESOLUTION) under which some plan fits, verified; None if none fits under `high`."""
    if solver.fastest(high) is None:
        return None
    low = 0  # no plan fits under 0 bytes
    while high - low > RESOLUTION:
        mid = (low + high) // 2
        if solver.fastest(mid) is None:
            low = mid
        else:
            high = mid
    return high


def default_caps(least: int, most: int, count: int = 12) -> list[int]:
    if count <= 1 or most <= least:
        return [most]
    step = (most - least) / (count - 1)
    return sorted({min(most, int(least + i * step + MIB - 1) // MIB * MIB) for i in range(count)})


def frontier(space: SearchSpace, strategy: Strategy, caps: list[int] | None = None, max_cap: int | None = None,
             count: int = 12, time_limit: float = 60.0, seed: int = 0, workers: int = 1,
             uniform: bool = False) -> Frontier:
    """The memory-time frontier of `strategy` over `caps` (default: `count` caps from the least memory any plan needs
    up to `max_cap`, default the run's capacity); uneven partitions within the space's options.max_offset. The time
    limit covers the whole frontier (each plan solve has what is left); at it, or on Ctrl-C, the points solved so far
    and the caps left (`unsolved_caps`, `stopped`). At most MAX_POINTS caps (ValueError above). `uniform`: only the
    plans that run one recompute option on every layer (the space's options, as the trainer offers them), for a
    trainer that runs no other (policy.trainer_method)."""
    if max(count, len(caps or ())) > MAX_POINTS:
        raise ValueError(f"a frontier solves at most {MAX_POINTS} caps, not {max(count, len(caps or ())):,}")
    start = time.perf_counter()
    solver = (_UniformSolver(space, strategy, tuple(space.inner_choices(strategy.tp)[2]), start + time_limit)
              if uniform else _Solver(space, strategy, start + time_limit, seed, workers))
    most = max_cap or space.run.capacity(space.cluster.device.memory_bytes)
    out = Frontier(strategy, None, uniform=uniform)
    try:
        out.least_bytes = least_memory(solver, max(caps) if caps else most)
        if caps is None:
            caps = default_caps(out.least_bytes, most, count) if out.least_bytes is not None else [most]
        _solve_caps(solver, out, sorted(set(caps)))
    except (_OutOfTime, KeyboardInterrupt) as stop:
        out.stopped = TIME_LIMIT if isinstance(stop, _OutOfTime) else CTRL_C
        done = set(out.infeasible_caps) | {c for p in out.points for c in p.caps}
        out.unsolved_caps = [c for c in sorted(set(caps or [most])) if c not in done]
    out.solves, out.complete = solver.solves, not solver.timed_out and out.stopped is None
    out.solve_seconds = time.perf_counter() - start
    return out


def _solve_caps(solver: _Solver | _UniformSolver, out: Frontier, caps: list[int]) -> None:
    """The frontier's points under `caps` (ascending), into `out`."""
    previous: FrontierPoint | None = None
    for cap in caps:
        found = solver.fastest(cap) if out.least_bytes is not None and cap >= out.least_bytes else None
        if found is None:
            out.infeasible_caps.append(cap)
            continue
        evaluated, solution = found
        if previous is not None and previous.step_seconds <= evaluated.step_seconds * (1 + TIE):
            previous.caps.append(cap)  # the same plan (or a tie): no faster plan under this cap
            previous.proven = previous.proven and solution.proven
            continue
        previous = FrontierPoint([cap], evaluated, solution.bound_seconds, solution.proven)
        out.points.append(previous)


__all__ = ["Frontier", "FrontierPoint", "frontier", "MAX_POINTS", "least_memory", "default_caps", "stage_counts"]
