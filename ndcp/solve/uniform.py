"""CP-SAT search with a proof (uniform recompute): solve the relaxation, then verify its points in objective order
with the full estimators until the K-th best verified step time is <= the relaxation's bound on everything not yet
verified.

Every point the model has not produced has a relaxation objective above the enumerated band, and the relaxation is
never above the full estimators, so when the stop rule holds no unverified strategy can enter the top K: that is the
optimality certificate. A time limit returns the best verified strategies with the proven bound and the gap.
"""
from __future__ import annotations

import heapq
import time
from dataclasses import replace

from ..space import SearchSpace
from .coefficients import expand_item, inner_choices
from .context import SearchContext, with_max_offset
from .cpsat import TIME_UNIT, Point, StrategyModel
from .items import READY, ItemBounds, bounded_items, explain_memory
from .result import TIE, Evaluated, Progress, SearchResult, evaluate, finish

BAND_GROWTH = 0.005  # the first band above the optimum spans 0.5 % of it; each further band doubles the width
BAND_POINTS = 256  # a band holding more points than this is narrowed before it is enumerated in full
# Ctrl-C before the first verification: the expanded items' fastest points that fit the model's memory, verified in
# objective order until one fits (each one evaluation: milliseconds, DeepSeek-V3 included)
INTERRUPT_CANDIDATES = 4
# Before the best-first expansion, which can take the whole time limit before it expands its first item (DeepSeek-V3
# on 2,048 GPUs under a 40 GiB cap: 38,000 bounds tightened, 40 s), at most this many items from the front of the
# queue are taken through every bound level and expanded at once, and their fastest points verified until one fits
# (that search's first fits at the 44th item, 0.8 s): a search stopped by its time limit answers with a plan and its
# gap. A count, not a time: the same items on every machine.
DIVE_ITEMS = 64


def cpsat_search(space: SearchSpace, top: int = 10, time_limit: float = 60.0, seed: int = 0, workers: int = 1,
                 progress=None) -> SearchResult:
    """The `top` fastest strategies of the space that fit (uniform recompute), proven: `optimal` when the
    certificate completes, `feasible` with the proven bound at the time limit or on Ctrl-C, `infeasible` with why.
    Deterministic for a given seed and worker count. Uniform plans keep the default partition (the space's
    max_offset is not used)."""
    ctx = SearchContext.begin(with_max_offset(space, 0), top, time_limit, seed, workers, progress)
    walk, result, bounds = bounded_items(ctx, "cp-sat")
    if bounds is None:
        return result
    return uniform_search(ctx, walk, result, bounds)


def uniform_search(ctx: SearchContext, walk, result: SearchResult, bounds: ItemBounds,
                   verified: list[Evaluated] | None = None) -> SearchResult:
    """cpsat_search once its items are bounded (plan_search hands over its own bounds: any valid bound will do;
    `bounds` is tightened in place, its space with no partition offsets). `verified`, when given, receives every
    fitting strategy the search verified, its top K and beyond."""
    search = _UniformSearch(replace(ctx, space=with_max_offset(ctx.space, 0)), walk, result, bounds)
    try:
        return search.run()
    finally:
        if verified is not None:
            verified.extend(search.verifier.fitting)


class _UniformSearch:
    """One search: the relaxation, the expander and verifier working on it, and the proven lower bound on
    everything not yet verified (`known`, seconds), kept up to date for an interrupted search."""

    def __init__(self, ctx: SearchContext, walk, result: SearchResult, bounds: ItemBounds):
        space = ctx.space
        self.ctx, self.walk, self.result = ctx, walk, result
        self.model = StrategyModel(bounds.seconds, space.run.capacity(space.cluster.device.memory_bytes), ctx.seed,
                                   ctx.workers)
        self.expander = _Expander(ctx, walk.batches, self.model, bounds)
        self.verifier = _Verifier(ctx, walk.batches)
        self.known = min((b for b in bounds.seconds if b is not None), default=float("inf"))

    def run(self) -> SearchResult:
        try:
            return self._search()
        except KeyboardInterrupt:  # Ctrl-C: like the time limit, the best verified so far with the proven bound
            result = self.result
            result.status, result.explanation, result.interrupted = "feasible", "interrupted", True
            self._verify_expanded()
            result.lower_bound_seconds = min(self.known, self.verifier.lower_bound(float("inf")))
            return self._finish()

    def _verify_expanded(self) -> None:
        """Stopped before anything fitting was verified (the first solve not done yet, while items are expanded):
        verify the expanded items' fastest points (INTERRUPT_CANDIDATES) until one fits, so the answer has a plan
        as soon as any item has exact coefficients."""
        for point in self.model.least_points(INTERRUPT_CANDIDATES):
            if self.verifier.fitting:
                return
            if (point.i, point.j, point.z) not in self.verifier.seen:
                self.verifier.verify(point)

    def _finish(self) -> SearchResult:
        verifier = self.verifier
        self.result.expanded = self.expander.next
        self.result.verified = verifier.count
        return finish(self.result, self.ctx.start, verifier.fitting, verifier.misses, verifier.top, verifier.seconds)

    def _search(self) -> SearchResult:
        """A first incumbent, the optimum of the relaxation, then bands until the certificate holds."""
        result = self.result
        self._dive()
        status, best, bound = self._optimum()
        if best is None:
            if status == "INFEASIBLE":
                explain_memory(self.ctx.space, self.walk, result)
            elif self.verifier.fitting:  # the time ran out before the first solve: the dive's plan, with the bound
                result.status, result.lower_bound_seconds = "feasible", self.verifier.lower_bound(self.known)
                return self._finish()
            else:
                result.status, result.explanation = "feasible", "time limit reached before any solution"
            return finish(result, self.ctx.start)
        if status != "OPTIMAL" or not best.expanded:
            if best.expanded:
                self.verifier.verify(best)
            result.status, result.lower_bound_seconds = "feasible", bound * TIME_UNIT
            return self._finish()
        return self._bands(bound)

    def _dive(self) -> None:
        """An incumbent before the best-first expansion (DIVE_ITEMS): the items at the front of the queue expanded
        ahead of their turn, one by one, until a verified point fits. Only verified strategies are added: the
        certificate and the answer's top K are what they would be without it."""
        for _ in range(DIVE_ITEMS):
            if self.verifier.fitting or not self.expander.dive():
                return
            self._verify_expanded()

    def _optimum(self) -> tuple[str, Point | None, int | None]:
        """(status, best point, proven bound in units) of the relaxation, solved again with more items expanded
        until its optimum is an expanded item (or the time runs out)."""
        ctx, expander = self.ctx, self.expander
        expander.expand_cheapest(max(ctx.top, 4))
        while True:
            status, best, bound = self.model.optimize(ctx.left())
            self.result.solver_calls += 1
            if bound is not None:
                self.known = bound * TIME_UNIT
            if best is None or best.expanded or status != "OPTIMAL" or ctx.left() <= 0:
                return status, best, bound
            expander.expand_up_to(best.bound, at_least=expander.next)  # doubling: few solver calls if bounds are loose

    def _bands(self, bound: int) -> SearchResult:
        """Enumerate the model's points band by band above its optimum `bound`, verifying them, until the K-th best
        verified time is <= the bound on everything outside (or the time runs out)."""
        ctx, model, expander, verifier, result = self.ctx, self.model, self.expander, self.verifier, self.result
        low, high, complete, bands, limit = bound, bound, True, 0, BAND_POINTS
        while True:
            points, state = model.enumerate_band(low, high, ctx.left(), limit)
            result.solver_calls += 1
            complete = state != "timeout" and ctx.left() > 0
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
            if ctx.progress is not None:
                best = verifier.fitting[0].step_seconds if verifier.fitting else None
                ctx.progress(Progress("verifying the solver's best strategies", ctx.elapsed(), best,
                                      verifier.lower_bound((high + 1) * TIME_UNIT), verifier.count))
            if verifier.certified((high + 1) * TIME_UNIT) or high >= model.max_objective():
                break
            low, high = high + 1, max(high + 1, int(bound * (1 + BAND_GROWTH * 2 ** bands)))
            self.known = low * TIME_UNIT
            bands += 1
        outside = (high + 1) * TIME_UNIT if complete else low * TIME_UNIT
        result.status = ("optimal" if complete else "feasible") if verifier.fitting else (
            "infeasible" if complete else "feasible")
        result.lower_bound_seconds = verifier.lower_bound(outside)
        if not verifier.fitting and complete:
            explain_memory(ctx.space, self.walk, result)
        return self._finish()


PROGRESS_EVERY = 64  # tightened bounds between progress reports (each takes up to a few ms)


class _Expander:
    """Gives items exact coefficients, least lower bound first. An item reaching the front below level READY gets
    its next, tighter bound (`tighten`; the memory-aware ones are valid for uniform plans too) and waits again with
    it; an item that cannot fit even with full recompute leaves the model. Reaching the front at READY, it is
    expanded."""

    def __init__(self, ctx: SearchContext, items, model: StrategyModel, bounds: ItemBounds):
        self.ctx, self.space, self.items, self.model, self.deadline = ctx, ctx.space, items, model, ctx.deadline
        self.bounds = bounds  # each item's current bound in seconds and level (the model holds it in units)
        self.queue = [(model.bounds[i], i, level) for _, i, level in bounds.queue()]
        heapq.heapify(self.queue)
        self.next = 0  # items expanded
        self.tightened = 0  # bounds tightened

    def _front(self) -> int | None:
        """The least bound of an item still waiting (tightened ones included), or None."""
        return self.queue[0][0] if self.queue else None

    def _tighten(self, i: int, bound: int) -> int | None:
        """Item i's next bound in model units (never below `bound`), recorded in the model; None when it is proven
        not to fit (it leaves the model)."""
        tighter = self.bounds.tighten(i)
        self.tightened += 1
        if tighter is None:
            self.model.drop(i)
            return None
        self.model.bounds[i] = max(bound, int(tighter / TIME_UNIT))
        return self.model.bounds[i]

    def _expand(self, i: int) -> None:
        self.model.expand(i, expand_item(self.space, self.items[i]))
        self.next += 1

    def _step(self) -> bool:
        """Tighten or expand the item at the front; True when an item was expanded."""
        bound, i, level = heapq.heappop(self.queue)
        if level < READY:
            tighter = self._tighten(i, bound)
            if tighter is not None:
                heapq.heappush(self.queue, (tighter, i, level + 1))
            if self.ctx.progress is not None and self.tightened % PROGRESS_EVERY == 0:
                self.ctx.progress(Progress(f"{self.tightened:,} bounds tightened", self.ctx.elapsed(),
                                           None, None))
            return False
        self._expand(i)
        return True

    def dive(self) -> bool:
        """Take the item at the front through its remaining bound levels and expand it, ahead of the items whose
        bounds are lower than its tightened one; False when no item is left or the time runs out first. An item
        proven not to fit leaves the model, and the next one is taken."""
        while self.queue and time.perf_counter() < self.deadline:
            bound, i, level = heapq.heappop(self.queue)
            for _ in range(level, READY):
                bound = self._tighten(i, bound)
                if bound is None:
                    break
            else:
                self._expand(i)
                return True
        return False

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

    def __init__(self, ctx: SearchContext, items):
        self.space, self.items, self.top = ctx.space, items, ctx.top
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
