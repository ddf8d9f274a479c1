"""CP-SAT search with a proof: solve the relaxation, then verify its points in objective order with the full
estimators until the K-th best verified step time is <= the relaxation's bound on everything not yet verified.

Every point the model has not produced has a relaxation objective above the enumerated band, and the relaxation is
never above the full estimators, so when the stop rule holds no unverified strategy can enter the top K: that is the
optimality certificate. A time limit returns the best verified strategies with the proven bound and the gap.
"""
from __future__ import annotations

import heapq
import time
from dataclasses import dataclass

from ..space import SearchSpace
from .coefficients import (expand_item, inner_choices, item_data_parallel_floor, item_lower_bounds,
                           item_memory_lower_bound, item_plan_lower_bound)
from .cpsat import TIME_UNIT, Point, StrategyModel
from .recompute import PlanModel, PlanTimeout
from ..specs.strategy import RECOMPUTE_MODES
from .explain import explain_infeasible
from .result import TIE, Evaluated, Progress, SearchResult, evaluate

BAND_GROWTH = 0.005  # the first band above the optimum spans 0.5 % of it; each further band doubles the width
BAND_POINTS = 256  # a band holding more points than this is narrowed before it is enumerated in full
NEAREST_MISSES = 5
# Per-layer plans: another plan of the same degrees is searched for only while it could be faster than the best
# verified one by more than the plan model's rounding (each time coefficient floored to 1e-6 of the step; PlanSolution says
# by how much at most) or this fraction, whichever is larger: plans are proven optimal within that tolerance.
PLAN_TOLERANCE = 1e-4


def cpsat_search(space: SearchSpace, top: int = 10, time_limit: float = 60.0, seed: int = 0, workers: int = 1,
                 progress=None) -> SearchResult:
    """The `top` fastest strategies of the space that fit (uniform recompute), proven: `optimal` when the
    certificate completes, `feasible` with the proven bound at the time limit or on Ctrl-C, `infeasible` with why.
    Deterministic for a given seed and worker count."""
    start = time.perf_counter()
    deadline = start + time_limit
    walk, result, bounds = _bounded_items(space, "cp-sat", start, deadline)
    if bounds is None:
        return result
    return _uniform_search(space, top, start, deadline, seed, workers, progress, walk, result, bounds)


def _uniform_search(space: SearchSpace, top: int, start: float, deadline: float, seed: int, workers: int, progress,
                    walk, result: SearchResult, bounds: list[float]) -> SearchResult:
    """cpsat_search once its items are bounded (plan_search hands over its own bounds: any valid bound will do)."""
    items = walk.batches
    capacity = space.run.capacity(space.cluster.device.memory_bytes)
    model = StrategyModel(bounds, capacity, seed, workers)
    expander = _Expander(space, items, model, bounds, deadline)
    verifier = _Verifier(space, items, top)
    known = _Floor(min(bounds))
    try:
        return _search_model(space, top, start, deadline, progress, walk, result, model, expander, verifier, known)
    except KeyboardInterrupt:  # Ctrl-C: like the time limit, the best verified so far with the proven bound
        result.status, result.explanation, result.interrupted = "feasible", "interrupted", True
        result.lower_bound_seconds = min(known.seconds, verifier.lower_bound(float("inf")))
        return _finish(result, start, verifier.seconds, verifier, expander)


@dataclass
class _Floor:
    """The proven lower bound on everything not yet verified, kept up to date for an interrupted search."""

    seconds: float


def _search_model(space, top, start, deadline, progress, walk, result, model, expander, verifier, known):
    """The body of cpsat_search: optimum of the relaxation, then bands until the certificate holds."""
    items = walk.batches
    expander.expand_cheapest(max(top, 4))

    def left() -> float:
        return deadline - time.perf_counter()

    while True:  # the relaxation's optimum must be an expanded item
        status, best, bound = model.optimize(left())
        result.solver_calls += 1
        if bound is not None:
            known.seconds = bound * TIME_UNIT
        if best is None or best.expanded or status != "OPTIMAL" or left() <= 0:
            break
        expander.expand_up_to(best.bound, at_least=expander.next)  # doubling: few solver calls if bounds are loose
    if best is None:
        if status == "INFEASIBLE":
            _explain_memory(space, walk, items, result)
        else:
            result.status, result.explanation = "feasible", "time limit reached before any solution"
        return _finish(result, start, 0.0)
    if status != "OPTIMAL" or not best.expanded:
        if best.expanded:
            verifier.verify(best)
        result.status, result.lower_bound_seconds = "feasible", bound * TIME_UNIT
        return _finish(result, start, verifier.seconds, verifier, expander)
    low, high, complete, bands, limit = bound, bound, True, 0, BAND_POINTS
    while True:
        points, state = model.enumerate_band(low, high, left(), limit)
        result.solver_calls += 1
        complete = state != "timeout" and left() > 0
        if not complete:
            break
        if state == "overflow":  # too many points at once: a narrower band (or, if it cannot narrow, a larger one)
            if high > low:
                high = low + (high - low) // 4
            else:
                limit *= 4
            continue
        pending = [p.bound for p in points if not p.expanded]
        if pending:  # unexpanded items reach into the band: give them exact coefficients, enumerate it again
            expander.expand_up_to(high)
            continue
        verifier.push(points)
        verifier.verify_until()
        if progress is not None:
            best = verifier.fitting[0].step_seconds if verifier.fitting else None
            progress(Progress("verifying the solver's best strategies", time.perf_counter() - start, best,
                              verifier.lower_bound((high + 1) * TIME_UNIT), verifier.count))
        if verifier.certified((high + 1) * TIME_UNIT) or high >= model.max_objective():
            break
        low, high = high + 1, max(high + 1, int(bound * (1 + BAND_GROWTH * 2 ** bands)))
        known.seconds = low * TIME_UNIT
        bands += 1
    outside = (high + 1) * TIME_UNIT if complete else low * TIME_UNIT
    result.status = ("optimal" if complete else "feasible") if verifier.fitting else (
        "infeasible" if complete else "feasible")
    result.lower_bound_seconds = verifier.lower_bound(outside)
    if not verifier.fitting and complete:
        _explain_memory(space, walk, items, result)
    return _finish(result, start, verifier.seconds, verifier, expander)


def _unsolved(method: str, space_size: int, walk) -> SearchResult:
    """A search's result before anything is found (`infeasible` until a strategy is verified)."""
    return SearchResult(method=method, status="infeasible", strategies=[], lower_bound_seconds=0.0,
                        space_size=space_size, refused=walk.refused)


def _bounded_items(space: SearchSpace, method: str, start: float, deadline: float, max_offset: int = 0):
    """Walk the space and bound every batch item (the deadline checked every 256 items): (walk, result, bounds),
    where bounds is None when the search ends here, with `result` finished (empty space, or out of time)."""
    walk = space.walk()
    result = _unsolved(method, space.size(walk), walk)
    if not walk.batches:
        result.explanation = explain_infeasible(space, walk, None)
        return walk, _finish(result, start, 0.0), None

    def check() -> None:
        if time.perf_counter() > deadline:
            raise TimeoutError

    try:
        bounds = item_lower_bounds(space, walk.batches, check, max_offset)
    except (TimeoutError, KeyboardInterrupt) as stop:
        result.status = "feasible"
        result.interrupted = isinstance(stop, KeyboardInterrupt)
        result.explanation = (f"{'interrupted' if result.interrupted else 'time limit reached'} while "
                              f"bounding the {len(walk.batches):,} batch items; nothing verified yet")
        return walk, _finish(result, start, 0.0), None
    return walk, result, bounds


READY = 2  # bound levels: 0 cheap pipeline bound, 1 + DP floor, 2 memory-aware plan bound (then expand or solve)


def tighten(space: SearchSpace, item, level: int, bound: float, max_offset: int) -> float | None:
    """The item's bound at the next level (seconds), or None when it is proven not to fit: level 1 adds the cheap
    data-parallel floor to the pipeline bound, level 2 takes the memory-aware plan bound. Cheap levels first, so
    most items are cut before the costly ones."""
    if level == 0:
        return bound + item_data_parallel_floor(space, item, max_offset)
    tighter = item_plan_lower_bound(space, item, max_offset)
    return None if tighter is None else max(bound, tighter)


class _Expander:
    """Gives items exact coefficients, least lower bound first. An item reaching the front below level READY gets
    its next, tighter bound (`tighten`; the memory-aware ones are valid for uniform plans too) and waits again with
    it; an item that cannot fit even with full recompute leaves the model. Reaching the front at READY, it is
    expanded."""

    def __init__(self, space: SearchSpace, items, model: StrategyModel, seconds: list[float],
                 deadline: float = float("inf")):
        self.space, self.items, self.model, self.deadline = space, items, model, deadline
        self.seconds = list(seconds)  # each item's current bound in seconds (the model holds it in units)
        self.queue = [(b, i, 0) for i, b in enumerate(model.bounds) if b is not None]
        heapq.heapify(self.queue)
        self.next = 0  # items expanded

    def _front(self) -> int | None:
        """The least bound of an item still waiting (tightened ones included), or None."""
        return self.queue[0][0] if self.queue else None

    def _step(self) -> bool:
        """Tighten or expand the item at the front; True when an item was expanded."""
        bound, i, level = heapq.heappop(self.queue)
        if level < READY:
            tighter = tighten(self.space, self.items[i], level, self.seconds[i], max_offset=0)
            if tighter is None:
                self.model.drop(i)
            else:
                self.seconds[i] = tighter
                self.model.bounds[i] = max(bound, int(tighter / TIME_UNIT))
                heapq.heappush(self.queue, (self.model.bounds[i], i, level + 1))
            return False
        self.model.expand(i, expand_item(self.space, self.items[i]))
        self.next += 1
        return True

    def expand_cheapest(self, count: int) -> None:
        while self.queue and count > 0 and time.perf_counter() < self.deadline:
            count -= self._step()

    def expand_up_to(self, bound: int, at_least: int = 1) -> None:
        """Expand every item whose lower bound is <= bound, and at least `at_least` more (until the deadline: the
        model stays a valid relaxation with items unexpanded, so the search just ends `feasible`)."""
        self.expand_cheapest(at_least)
        while self.queue and self._front() <= bound and time.perf_counter() < self.deadline:
            self._step()


def strategy_of(space: SearchSpace, item, j: int, z: int):
    """The strategy a model point stands for."""
    layout, mbs, mbn = item
    inner, zeros = inner_choices(space)
    sp, mode = inner[j]
    return layout.strategy(mbs, mbn, zeros[z], sp, mode)


class _Verifier:
    """Verifies model points in objective order; keeps the fitting ones ranked and the refused faster ones."""

    def __init__(self, space: SearchSpace, items, top: int):
        self.space, self.items, self.top = space, items, top
        self.pending: list[tuple[int, int, int, int]] = []
        self.seen: set[tuple[int, int, int]] = set()
        self.fitting: list[Evaluated] = []
        self.misses: list[Evaluated] = []
        self.seconds = 0.0
        self.count = 0

    def push(self, points: list[Point]) -> None:
        for p in points:
            if (p.i, p.j, p.z) not in self.seen:
                self.seen.add((p.i, p.j, p.z))
                heapq.heappush(self.pending, (p.bound, p.i, p.j, p.z))

    def verify(self, point: Point) -> None:
        self.push([point])
        self._verify_next()

    def _verify_next(self) -> None:
        _, i, j, z = heapq.heappop(self.pending)
        t0 = time.perf_counter()
        evaluated = evaluate(self.space, strategy_of(self.space, self.items[i], j, z))
        self.seconds += time.perf_counter() - t0
        self.count += 1
        (self.fitting if evaluated.fits else self.misses).append(evaluated)
        self.fitting.sort(key=Evaluated.rank_key)

    def kth(self) -> float:
        return self.fitting[self.top - 1].step_seconds if len(self.fitting) >= self.top else float("inf")

    def verify_until(self) -> None:
        """Verify pending points while one of them could still enter the top K."""
        while self.pending and self.pending[0][0] * TIME_UNIT <= self.kth() * (1 + TIE):
            self._verify_next()

    def certified(self, outside_bound: float) -> bool:
        return len(self.fitting) >= self.top and self.kth() <= outside_bound * (1 + TIE) and (
            not self.pending or self.pending[0][0] * TIME_UNIT >= self.kth() * (1 - TIE))

    def lower_bound(self, outside_bound: float) -> float:
        """Proven lower bound on the optimum: the best verified, or the least bound left unverified."""
        pending = self.pending[0][0] * TIME_UNIT if self.pending else float("inf")
        best = self.fitting[0].step_seconds if self.fitting else float("inf")
        return min(best, pending, outside_bound)


def _explain_memory(space: SearchSpace, walk, items, result: SearchResult) -> None:
    """Nothing fits: the least memory any item can need (a proven lower bound over every item) and the lightest
    strategy of that item, verified."""
    bounds = [item_memory_lower_bound(space, item) for item in items]
    least = min(range(len(items)), key=lambda i: (bounds[i], i))
    layout, mbs, mbn = items[least]
    inner, zeros = inner_choices(space)
    lightest = [layout.strategy(mbs, mbn, z, sp, mode) for sp, mode in inner if not sp or layout.tp > 1 for z in zeros]
    evaluated = min((evaluate(space, s) for s in lightest), key=lambda e: (e.memory.peak_bytes, e.strategy.key()))
    result.explanation = explain_infeasible(space, walk, evaluated, int(bounds[least]))


def _finish(result: SearchResult, start: float, verify_seconds: float, verifier: _Verifier | None = None,
            expander: _Expander | None = None) -> SearchResult:
    if expander is not None:
        result.expanded = expander.next
    if verifier is not None:
        result.strategies = verifier.fitting[:verifier.top]
        result.verified = verifier.count
        best = result.strategies[0].step_seconds if result.strategies else float("inf")
        result.nearest_misses = sorted((e for e in verifier.misses if e.step_seconds < best),
                                       key=Evaluated.rank_key)[:NEAREST_MISSES]
        result.over_memory = len(verifier.misses)
    result.verify_seconds = verify_seconds
    result.solve_seconds = time.perf_counter() - start
    return result


def plan_search(space: SearchSpace, top: int = 10, time_limit: float = 60.0, seed: int = 0, workers: int = 1,
                max_offset: int = 0, progress=None) -> SearchResult:
    """Per-layer recompute and layer partition decided jointly with the degrees (design-notes approach C).

    Batch items are visited in order of a lower bound valid for every plan (no recompute, balanced stages). Each
    visited item's plan sub-model (recompute.PlanModel, one per SP setting) is solved exactly by CP-SAT; its optimum
    bounds every remaining plan of that (item, SP), and its plan is verified with the full estimators. When the
    verified time exceeds the bound by more than the tolerance (the model's rounding, at least PLAN_TOLERANCE) or
    the plan does not fit, the sub-model is solved again without the verified plans (a no-good cut) as long as its
    bound could still beat that item's best. The search stops when the K-th best verified step time is
    <= the bound of every item not yet visited and every sub-model not yet exhausted: that is the certificate.
    One strategy per (item, SP): its best plan and ZeRO stage.
    """
    start = time.perf_counter()
    deadline = start + time_limit
    walk, result, bounds = _bounded_items(space, "cp-sat per-layer", start, deadline, max_offset)
    if bounds is None:
        return result
    items = walk.batches
    capacity = space.run.capacity(space.cluster.device.memory_bytes)
    # Items wait in a queue ordered by their bound: an item reaching the front below level READY gets its next,
    # tighter bound (`tighten`) and is queued again; reaching the front at READY, its plans are solved.
    queue = [(bound, i, 0) for i, bound in enumerate(bounds)]
    heapq.heapify(queue)
    inner, zeros = inner_choices(space)
    sps = sorted({sp for sp, _ in inner})
    verifier = _PlanVerifier(space, top, capacity, seed, workers, deadline)
    # Uniform plans are per-layer plans too: the proven uniform top K seeds the incumbents, so the answer is never
    # slower than the best uniform plan and most items are cut by their bounds at once.
    uniform = _uniform_search(space, top, start, start + time_limit / 2, seed, workers, None, walk,
                              _unsolved("cp-sat", result.space_size, walk), list(bounds))
    verifier.add_verified(uniform.strategies)
    result.solver_calls += uniform.solver_calls
    next_bound = queue[0][0]  # the least bound of any item not yet visited (kept up to date by the loop)
    interrupted = uniform.interrupted  # Ctrl-C during the uniform search stops this one too
    try:
        while queue and not interrupted:
            next_bound, i, level = queue[0]
            verifier.settle(next_bound)
            if verifier.certified(next_bound) or time.perf_counter() > deadline:
                break
            heapq.heappop(queue)
            if level < READY:
                tighter = tighten(space, items[i], level, next_bound, max_offset)
                if tighter is not None:
                    heapq.heappush(queue, (tighter, i, level + 1))
                continue
            layout, mbs, mbn = items[i]
            for sp in (s for s in sps if not s or layout.tp > 1):
                plan = PlanModel(space, layout, mbs, mbn, sp, RECOMPUTE_MODES, zeros, max_offset)
                verifier.solve(plan, _degree_key(plan.base), (), next_bound)
            result.expanded += 1
            if progress is not None:
                best = verifier.ranked()[0].step_seconds if verifier.best else None
                progress(Progress("solving per-stage recompute plans", time.perf_counter() - start, best,
                                  min(next_bound, verifier.least_pending()), verifier.count))
        if not queue:
            next_bound = float("inf")
        if not interrupted:
            verifier.settle(next_bound)
    except KeyboardInterrupt:  # like the time limit: the best verified so far with the proven bound
        interrupted = True
    ranked = verifier.ranked()
    certified = verifier.certified(next_bound) and not verifier.unproven and not interrupted
    if ranked:
        result.status = "optimal" if certified else "feasible"
    elif time.perf_counter() > deadline or verifier.unproven or interrupted:
        result.status = "feasible"
    if interrupted:
        result.explanation, result.interrupted = "interrupted", True
    result.lower_bound_seconds = min(next_bound, verifier.least_pending(), *verifier.unproven,
                                     ranked[0].step_seconds if ranked else float("inf"))
    result.solver_calls = verifier.solves
    result.strategies = ranked[:top]
    result.verified = verifier.count + uniform.verified
    best = ranked[0].step_seconds if ranked else float("inf")
    result.nearest_misses = sorted((e for e in verifier.misses if e.step_seconds < best),
                                   key=Evaluated.rank_key)[:NEAREST_MISSES]
    result.over_memory = len(verifier.misses)
    if result.status == "infeasible":
        _explain_memory(space, walk, items, result)
    result.verify_seconds = verifier.seconds
    result.solve_seconds = time.perf_counter() - start
    return result


def _degree_key(strategy) -> tuple:
    """Strategies that differ only in their recompute plan, partition or ZeRO stage share one ranking entry."""
    s = strategy
    return (s.tp, s.pp, s.cp, s.dp, s.ep, s.etp, s.vpp, s.mbs, s.mbn, s.sp)


class _PlanVerifier:
    """Plans from the sub-models, verified with the full estimators in order of their bounds; sub-models whose
    bound could still beat their item's best are solved again without the plans already verified."""

    def __init__(self, space: SearchSpace, top: int, capacity: int, seed: int, workers: int, deadline: float):
        self.space, self.top, self.capacity = space, top, capacity
        self.seed, self.workers, self.deadline = seed, workers, deadline
        self.pending: list[tuple] = []  # (bound, sequence, action, payload)
        self.best: dict[tuple, Evaluated] = {}  # (item, sp) -> best verified plan that fits
        self.misses: list[Evaluated] = []
        self.unproven: list[float] = []  # bounds of sub-models stopped by the time limit
        self.count = self.solves = self.sequence = 0
        self.seconds = 0.0

    def add_verified(self, strategies: list[Evaluated]) -> None:
        """Verified strategies found elsewhere (the uniform search) enter the ranking."""
        for evaluated in strategies:
            key = _degree_key(evaluated.strategy)
            if key not in self.best or Evaluated.rank_key(evaluated) < Evaluated.rank_key(self.best[key]):
                self.best[key] = evaluated

    def _push(self, bound: float, action: str, payload) -> None:
        self.sequence += 1
        heapq.heappush(self.pending, (bound, self.sequence, action, payload))

    def solve(self, plan: PlanModel, key: tuple, exclude: tuple, floor: float) -> None:
        """Solve a sub-model whose plans are proven no faster than `floor` seconds (kept as unproven on a timeout).
        Only a plan that could enter the top K matters: the K-th best verified time cuts the sub-model off."""
        self.solves += 1
        try:
            solution = plan.solve(self.capacity, self.deadline - time.perf_counter(), self.seed, self.workers,
                                  exclude, cutoff_seconds=self.kth() * (1 + TIE))
        except (PlanTimeout, KeyboardInterrupt) as stop:
            self.unproven.append(floor)  # nothing known of this sub-model beyond its bound
            if isinstance(stop, KeyboardInterrupt):
                raise
            return
        if solution is None:
            return
        if not solution.proven:
            self.unproven.append(solution.bound_seconds)
        self._push(solution.bound_seconds, "verify", (plan, key, exclude + (solution.assignment,), solution))

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
            if time.perf_counter() > self.deadline:
                return
            lower, _, action, payload = heapq.heappop(self.pending)
            try:
                self._process(lower, action, *payload)
            except KeyboardInterrupt:
                self.unproven.append(lower)  # popped but not processed: only its bound is known
                raise

    def _process(self, lower: float, action: str, plan: PlanModel, key: tuple, exclude: tuple, solution) -> None:
        """Re-solve a sub-model without its verified plans, or verify a plan (and queue a re-solve if needed)."""
        if action == "resolve":
            if key not in self.best or self.best[key].step_seconds > lower + solution:
                self.solve(plan, key, exclude, lower)
            return
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
            self._push(lower, "resolve", (plan, key, exclude, slack))

    def certified(self, next_bound: float) -> bool:
        kth = self.kth()
        return kth <= next_bound * (1 + TIE) and kth <= self.least_pending() * (1 + TIE)
