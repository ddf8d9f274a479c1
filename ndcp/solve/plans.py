"""Per-layer recompute and layer partition decided jointly with the degrees (docs/solver.md §3.3), proven: each
visited batch item's plan sub-models (recompute.PlanModel) are solved exactly by CP-SAT and their plans verified with
the full estimators, until the K-th best verified step time is <= the bound of everything not yet solved."""
from __future__ import annotations

import heapq
import time
from dataclasses import replace
from enum import IntEnum
from typing import NamedTuple

from ..space import SearchSpace
from .context import SearchContext, with_max_offset
from .items import READY, ItemBounds, bounded_items, explain_memory, unsolved
from .coefficients import inner_choices
from .plan_bounds import zero_plan_lower_bounds
from .recompute import PLAN_TOLERANCE, PlanModel, PlanSolution, PlanTimeout
from .result import TIE, Evaluated, Progress, SearchResult, evaluate, finish
from .uniform import uniform_search

# The uniform strategies proven first (plan_search): the optimum only, faster than a uniform top K (docs/tuning.md).
UNIFORM_SEEDS = 1


def plan_search(space: SearchSpace, top: int = 10, time_limit: float = 60.0, seed: int = 0, workers: int = 1,
                progress=None) -> SearchResult:
    """Per-layer recompute and layer partition decided jointly with the degrees (approach C, docs/solver.md §3.3).

    Batch items are visited in order of a lower bound valid for every plan (no recompute, balanced stages). Each
    visited item's plan sub-model (recompute.PlanModel, one per SP setting and ZeRO stage; with uneven partitions one
    per SP setting, deciding the ZeRO stage) is solved exactly by CP-SAT; its optimum bounds every remaining plan of
    it, and its plan is verified with the full estimators. When the
    verified time exceeds the bound by more than the tolerance (the model's rounding, at least PLAN_TOLERANCE) or
    the plan does not fit, the sub-model is solved again without the verified plans (a no-good cut) as long as its
    bound could still beat that item's best. The search stops when the K-th best verified step time is
    <= the bound of every item not yet visited and every sub-model not yet exhausted: that is the certificate.
    One strategy per (item, SP): its best plan and ZeRO stage. Uneven partitions within the space's
    options.max_offset (space.partition_offset).
    """
    ctx = SearchContext.begin(space, top, time_limit, seed, workers, progress)
    walk, result, items = bounded_items(ctx, "cp-sat per-layer")
    if items is None:
        return result
    verifier = _PlanVerifier(ctx)
    first = _FirstPhase(ctx, walk, result, items)
    try:
        first.run(verifier)
        # Ctrl-C during the uniform search stops this one too
        next_bound, interrupted = _visit(ctx, items, verifier, result, first.interrupted)
    except KeyboardInterrupt:  # between the phases: the uniform phase's verified plans answer it
        verifier.add_verified(first.seeds)
        next_bound, interrupted = first.least_bound(), True
    ranked = verifier.ranked()
    certified = verifier.certified(next_bound) and not verifier.unproven and not interrupted
    if ranked:
        result.status = "optimal" if certified else "feasible"
    elif ctx.expired() or verifier.unproven or interrupted:
        result.status = "feasible"
    if interrupted:
        result.explanation, result.interrupted = "interrupted", True
    result.lower_bound_seconds = min(next_bound, verifier.least_pending(), *verifier.unproven, verifier.accepted,
                                     ranked[0].step_seconds if ranked else float("inf"))
    result.solver_calls = verifier.solves  # the plan sub-models' solves (the uniform search's are not counted)
    result.verified = verifier.count + first.verified
    if result.status == "infeasible":
        explain_memory(ctx.space, walk, result)
    return finish(result, ctx.start, ranked, verifier.misses, ctx.top, verifier.seconds)


class _FirstPhase:
    """The uniform search that seeds plan_search's incumbents (UNIFORM_SEEDS), with what it verified kept where
    an interrupt at any moment finds it.

    Uniform plans are per-layer plans too: the proven uniform optimum, and every other uniform strategy its search
    verified, seed the incumbents, so the answer is never slower than the best uniform plan and many items are cut
    by their bounds at once. Only the optimum is proven (UNIFORM_SEEDS): a uniform top K would bound and expand
    items up to the uniform K-th best, which the per-layer K-th best usually lies below. With the partition fixed
    the two searches bound items alike: the items the uniform search tightened keep their bounds (and those proven
    not to fit stay out)."""

    def __init__(self, ctx: SearchContext, walk, result: SearchResult, items: ItemBounds):
        self.ctx, self.walk, self.result, self.items = ctx, walk, result, items
        self.seeds: list[Evaluated] = []  # every fitting uniform strategy verified (uniform_search fills it)
        self.verified = 0  # strategies the uniform search verified, misses included
        self.interrupted = False

    def run(self, verifier: _PlanVerifier) -> None:
        """Search the uniform plans and hand the verified ones to `verifier`. The whole time limit: the seeds shape
        which plan, among those within the tolerance, each item ranks with, so a uniform phase the clock cut short
        could change a proven answer with the machine's load; cut by the limit, the whole search is (`feasible`)."""
        ctx, items = self.ctx, self.items
        shared = with_max_offset(ctx.space, 0) is ctx.space
        uniform = uniform_search(replace(ctx, top=UNIFORM_SEEDS, progress=_first(ctx.progress)), self.walk,
                                 unsolved("cp-sat", self.result.space_size, self.walk),
                                 items if shared else ItemBounds(with_max_offset(ctx.space, 0), self.walk.batches,
                                                                 items.seconds, items.memo),
                                 self.seeds)
        self.verified, self.interrupted = uniform.verified, uniform.interrupted
        verifier.add_verified(self.seeds)

    def least_bound(self) -> float:
        """The least bound of any item (as the uniform search tightened them): valid for every per-layer plan, the
        answer's bound when an interrupt lands before `_visit` keeps its own."""
        return min((b for b in self.items.seconds if b is not None), default=float("inf"))


def _first(progress):
    """The uniform search's progress reports, shown as this search's first phase: its incumbents are per-layer plans
    too, its bounds are not (a per-layer plan can be faster), so they are left out."""
    if progress is None:
        return None
    return lambda p: progress(replace(p, phase=f"uniform first: {p.phase}", lower_bound_seconds=None))


class Step(IntEnum):
    """What an item's queue entry waits for; entries of equal bound and item are taken in this order."""

    BOUND = 0  # its next, tighter bound (ItemBounds.tighten), from `Phase.level`
    READY = 1  # every bound level done: each of its SP settings is queued at its own bound
    SPLIT = 2  # one SP setting: each ZeRO stage of it is queued at its own bound
    SOLVE = 3  # one (SP setting, ZeRO stage): its plan sub-model is solved


class Phase(NamedTuple):
    """Where one queue entry of an item stands (compared as a tuple: the step, then its level or ZeRO stage's place,
    then the SP setting)."""

    step: Step
    level: int = 0  # Step.BOUND: the item's bound level
    slot: int = 0  # Step.SOLVE: the ZeRO stage's place among the space's (every ZeRO stage in one sub-model: last)
    sp: bool = False  # Step.SPLIT and Step.SOLVE: the SP setting
    zero: int | None = None  # Step.SOLVE: the ZeRO stage (None: every ZeRO stage in one sub-model)

    @staticmethod
    def of_level(level: int) -> "Phase":
        """The phase of an item at bound level `level` (ItemBounds.levels)."""
        return Phase(Step.BOUND, level) if level < READY else Phase(Step.READY)

    @staticmethod
    def solve(sp: bool, zero: int | None, zeros: tuple) -> "Phase":
        """The phase of a plan sub-model: its SP setting and ZeRO stage (None last)."""
        return Phase(Step.SOLVE, slot=len(zeros) if zero is None else zeros.index(zero), sp=sp, zero=zero)


class Queued(NamedTuple):
    """An entry of the item queue, least bound first."""

    bound: float
    item: int
    phase: Phase


def _visit(ctx: SearchContext, bounds: ItemBounds, verifier: _PlanVerifier, result: SearchResult,
           interrupted: bool) -> tuple[float, bool]:
    """Visit the items in bound order, solving each one's plan sub-models, until the certificate holds, the time
    runs out or Ctrl-C: (the least bound of any item not yet visited, interrupted)."""
    # Items wait in a queue ordered by their bound (Queued): an item reaching the front at Step.BOUND gets its next,
    # tighter bound (`ItemBounds.tighten`) and is queued again; reaching it at Step.READY, each of its SP settings
    # is queued at its own bound; reaching the front, that setting's ZeRO stages each at its own (the full bound
    # per ZeRO stage, plan_bounds.zero_plan_lower_bounds); and reaching the front, that ZeRO stage's plan sub-model
    # is solved. A setting or ZeRO stage whose bound is higher waits: by then the K-th best usually cuts it off
    # (Llama-3.1-405B on 131,072 H100: the first items' SP-off sub-models took 0.3-0.7 s each, solved before any
    # cutoff existed; DeepSeek-V3 on 2,048 H800: a sub-model deciding the ZeRO stage took 0.42 s where the one of
    # its best ZeRO stage alone took 0.25 s, and the others' bounds were far above the K-th best).
    _, zeros = inner_choices(ctx.space)
    at_level = [Phase.of_level(level) for level in range(READY + 1)]
    queue = [Queued(b, i, at_level[level]) for b, i, level in bounds.queue()]  # still a heap: the same order
    # the least bound of any item not yet visited (kept up to date by the loop)
    next_bound = queue[0].bound if queue else float("inf")
    try:
        while queue and not interrupted:
            next_bound = queue[0].bound
            verifier.settle(next_bound)
            if verifier.certified(next_bound) or ctx.expired():
                break
            _take(ctx, bounds, verifier, result, queue, heapq.heappop(queue), zeros)
            if ctx.progress is not None:
                best = verifier.ranked()[0].step_seconds if verifier.best else None
                ctx.progress(Progress("solving per-stage recompute plans", ctx.elapsed(), best,
                                      min(next_bound, verifier.least_pending()), verifier.count))
        if not queue:
            next_bound = float("inf")
        if not interrupted:
            verifier.settle(next_bound)
    except KeyboardInterrupt:  # like the time limit: the best verified so far with the proven bound
        interrupted = True
    return next_bound, interrupted


def _take(ctx: SearchContext, bounds: ItemBounds, verifier: _PlanVerifier, result: SearchResult, queue: list[Queued],
          entry: Queued, zeros: tuple) -> None:
    """Do what the entry at the front of the queue waits for, queueing what follows from it."""
    space, (bound, i, phase) = ctx.space, entry
    if phase.step == Step.BOUND:
        tighter = bounds.tighten(i)
        if tighter is not None:
            heapq.heappush(queue, Queued(tighter, i, Phase.of_level(phase.level + 1)))
        return
    if phase.step == Step.READY:  # each SP setting waits at its own bound (one that cannot fit is not queued)
        for sp, b in bounds.per_sp[i].items():
            heapq.heappush(queue, Queued(b, i, Phase(Step.SPLIT, sp=sp)))
        result.expanded += 1
        return
    layout, mbs, mbn = bounds.items[i]
    runs = tuple(space.zero_stages(layout))
    if bound > verifier.kth() * (1 + TIE):
        return  # a bound that cannot beat the K-th best needs no more work
    if phase.step == Step.SPLIT:  # each ZeRO stage the layout runs waits at its own bound (one that cannot fit is not)
        for zero, b in zero_plan_lower_bounds(space, bounds.items[i], phase.sp).items():
            if zero is None or zero in runs:
                heapq.heappush(queue, Queued(max(bound, b), i, Phase.solve(phase.sp, zero, zeros)))
        return
    plan = PlanModel(space, layout, mbs, mbn, phase.sp, tuple(space.inner_choices(layout.tp)[2]),
                     runs if phase.zero is None else (phase.zero,))
    verifier.solve(plan, _degree_key(plan.base), (), bound)


def _degree_key(strategy) -> tuple:
    """Strategies that differ only in their recompute plan, partition or ZeRO stage share one ranking entry (the
    schedule is part of the item, as the exhaustive oracle ranks it)."""
    s = strategy
    return (s.tp, s.pp, s.cp, s.dp, s.ep, s.etp, s.vpp, s.mbs, s.mbn, s.sp, s.cp_comm, s.schedule, s.optimizer_offload,
            s.dp_shard)


class _Verify(NamedTuple):
    """A plan a sub-model returned, to verify with the full estimators."""

    plan: PlanModel
    key: tuple  # its ranking entry (_degree_key)
    exclude: tuple  # the sub-model's plans found so far, this one included
    solution: PlanSolution


class _Resolve(NamedTuple):
    """A sub-model to solve again without the plans found so far, while a plan faster than its item's best by more
    than `slack` seconds may remain."""

    plan: PlanModel
    key: tuple
    exclude: tuple
    slack: float  # seconds: the model's rounding, at least PLAN_TOLERANCE of its bound


class _PlanVerifier:
    """Plans from the sub-models, verified with the full estimators in order of their bounds; sub-models whose
    bound could still beat their item's best are solved again without the plans already verified."""

    def __init__(self, ctx: SearchContext):
        self.ctx, self.space, self.top = ctx, ctx.space, ctx.top
        self.capacity = ctx.space.run.capacity(ctx.space.cluster.device.memory_bytes)
        self.pending: list[tuple[float, int, _Verify | _Resolve]] = []  # (bound, sequence, work)
        self.best: dict[tuple, Evaluated] = {}  # (item, sp) -> best verified plan that fits
        self.misses: list[Evaluated] = []
        self.unproven: list[float] = []  # bounds of sub-models stopped by the time limit
        # the least bound of a sub-model whose plans were left unexplored within the tolerance: its best plan may lie
        # that far below the verified one (the proven bound of the answer takes it)
        self.accepted = float("inf")
        self.solved: dict = {}  # sub-model outcomes by content (PlanModel.solve: equivalent items solve once)
        self.count = self.solves = self.sequence = 0
        self.seconds = 0.0

    def add_verified(self, strategies: list[Evaluated]) -> None:
        """Verified strategies found elsewhere (the uniform search) enter the ranking."""
        for evaluated in strategies:
            key = _degree_key(evaluated.strategy)
            if key not in self.best or Evaluated.rank_key(evaluated) < Evaluated.rank_key(self.best[key]):
                self.best[key] = evaluated

    def _push(self, bound: float, work: _Verify | _Resolve) -> None:
        self.sequence += 1
        heapq.heappush(self.pending, (bound, self.sequence, work))

    def solve(self, plan: PlanModel, key: tuple, exclude: tuple, floor: float) -> None:
        """Solve a sub-model whose plans are proven no faster than `floor` seconds (kept as unproven on a timeout).
        Only a plan that could enter the top K matters: the K-th best verified time cuts the sub-model off."""
        self.solves += 1
        try:
            solution = plan.solve(self.capacity, self.ctx.left(), self.ctx.seed, self.ctx.workers, exclude,
                                  cutoff_seconds=self.kth() * (1 + TIE), solved=self.solved)
        except (PlanTimeout, KeyboardInterrupt) as stop:
            self.unproven.append(floor)  # nothing known of this sub-model beyond its bound
            if isinstance(stop, KeyboardInterrupt):
                raise
            return
        if solution is None:
            return
        if not solution.proven:
            self.unproven.append(solution.bound_seconds)
        self._push(solution.bound_seconds, _Verify(plan, key, exclude + (solution.assignment,), solution))

    def ranked(self) -> list[Evaluated]:
        return sorted(self.best.values(), key=Evaluated.rank_key)

    def least_pending(self) -> float:
        return self.pending[0][0] if self.pending else float("inf")

    def kth(self) -> float:
        ranked = self.ranked()
        return ranked[self.top - 1].step_seconds if len(ranked) >= self.top else float("inf")

    def settle(self, bound: float) -> None:
        """Process pending work whose bound could still matter: below the K-th best, or below `bound`."""
        while self.pending and (self.pending[0][0] <= self.kth() * (1 + TIE) or self.pending[0][0] <= bound):
            if self.ctx.expired():
                return
            lower, _, work = heapq.heappop(self.pending)
            try:
                if isinstance(work, _Resolve):
                    self._resolve(lower, work)
                else:
                    self._verify(lower, work)
            except KeyboardInterrupt:
                self.unproven.append(lower)  # popped but not processed: only its bound is known
                raise

    def _resolve(self, lower: float, work: _Resolve) -> None:
        """Solve a sub-model again without its verified plans, unless its item's best is within the slack."""
        key = work.key
        if key not in self.best or self.best[key].step_seconds > lower + work.slack:
            self.solve(work.plan, key, work.exclude, lower)
        else:
            self.accepted = min(self.accepted, lower)

    def _verify(self, lower: float, work: _Verify) -> None:
        """Verify a plan with the full estimators, and queue a re-solve if a faster plan may remain."""
        plan, key, exclude, solution = work
        t0 = time.perf_counter()
        evaluated = evaluate(self.space, solution.strategy)
        self.seconds += time.perf_counter() - t0
        self.count += 1
        if not evaluated.fits:
            self.misses.append(evaluated)
        elif key not in self.best or Evaluated.rank_key(evaluated) < Evaluated.rank_key(self.best[key]):
            self.best[key] = evaluated
        # Another plan of these degrees could still be faster by more than the tolerance (the model's rounding,
        # at least PLAN_TOLERANCE), or this one does not fit: solve again without the plans verified so far.
        slack = max(solution.rounding_seconds, PLAN_TOLERANCE * lower)
        if not evaluated.fits or evaluated.step_seconds > lower + slack:
            self._push(lower, _Resolve(plan, key, exclude, slack))
        else:
            self.accepted = min(self.accepted, lower)

    def certified(self, next_bound: float) -> bool:
        kth = self.kth()
        return kth <= next_bound * (1 + TIE) and kth <= self.least_pending() * (1 + TIE)
