"""Search results shared by the exhaustive oracle and the CP-SAT search: verified strategies and the proof status."""
from __future__ import annotations

import bisect
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable

from ..estimate.communication import EXPERT_RANK_ORDER, RANK_ORDER
from ..estimate.memory import MemoryEstimate, estimate_memory
from ..estimate.time import TimeEstimate, estimate_time
from ..space import SearchSpace
from ..specs.strategy import Strategy

# Relative tolerance under which two step times count as a tie (the estimators are deterministic floats).
TIE = 1e-9
NEAREST_MISSES = 5  # strategies faster than the best one that fits, refused by memory, listed with a result


@dataclass(frozen=True)
class Evaluated:
    """One strategy priced by the full estimators."""

    strategy: Strategy
    memory: MemoryEstimate
    time: TimeEstimate
    off_node_peers: int = 0  # peers over the scale-out network (off_node_peers below): the second tie-break

    @property
    def fits(self) -> bool:
        return self.memory.fits

    @property
    def step_seconds(self) -> float:
        return self.time.step_seconds

    @property
    def over_bytes(self) -> int:
        """Bytes the peak is over what fits at the run's confidence (MemoryEstimate.fit_bytes)."""
        return max(0, self.memory.peak_bytes - self.memory.fit_bytes)

    def rank_key(self) -> tuple:
        """Rank by step time; equal times (equivalent plans) by the canonical tie-break: least peak memory, then
        fewest peers across scale-up domains, then the strategy's identity, so every search orders alike."""
        return (self.step_seconds, self.memory.peak_bytes, self.off_node_peers, self.strategy.key())

    def as_dict(self, rank: int | None = None) -> dict:
        out = {"strategy": self.strategy.as_dict(), "memory": self.memory.as_dict(), "time": self.time.as_dict()}
        return {"rank": rank, **out} if rank is not None else out


def off_node_peers(strategy: Strategy, domain_ranks: int) -> int:
    """How many of rank 0's peers in its TP, CP, DP and PP groups (and ETP, EP for expert layers) sit outside its
    scale-up domain of `domain_ranks` consecutive ranks (ClusterSpec.domain_ranks; the node on 8-GPU boards), under
    Megatron's rank placement (estimate/communication.py): a group of n ranks at stride `stride` keeps
    ceil(domain_ranks / stride) of them (at most n, at least rank 0 itself) in rank 0's domain."""
    s = strategy
    expert_dp = (s.tp * s.cp * s.dp) // (s.etp * s.ep)
    orders = [(RANK_ORDER, {"tp": s.tp, "cp": s.cp, "dp": s.dp, "pp": s.pp})]
    if s.ep > 1 or s.etp > 1:
        orders.append((EXPERT_RANK_ORDER[:2], {"etp": s.etp, "ep": s.ep, "edp": expert_dp}))
    peers = 0
    for order, degrees in orders:
        stride = 1
        for name in order:
            size = degrees[name]
            peers += size - min(size, max(1, -(-domain_ranks // stride)))
            stride *= size
    return peers


def evaluate(space: SearchSpace, strategy: Strategy) -> Evaluated:
    """Price one strategy with the full memory and step-time estimators."""
    return Evaluated(strategy, estimate_memory(space.model, space.cluster, space.run, strategy),
                     estimate_time(space.model, space.cluster, space.run, strategy),
                     off_node_peers(strategy, space.cluster.domain_ranks))


@dataclass(frozen=True)
class Progress:
    """A progress report from a running search (for the terminal's live display)."""

    phase: str
    elapsed: float
    incumbent_seconds: float | None  # best verified step time so far
    lower_bound_seconds: float | None  # proven bound on anything not yet verified
    done: int = 0  # candidates priced (oracle) or verified (CP-SAT)
    total: int = 0  # candidates in the space (oracle)

    @property
    def gap(self) -> float | None:
        if self.incumbent_seconds is None or self.lower_bound_seconds is None:
            return None
        return max(0.0, (self.incumbent_seconds - self.lower_bound_seconds) / self.incumbent_seconds)


UNKNOWN = "unknown"
STATUSES = ("optimal", "feasible", "infeasible", UNKNOWN, "heuristic")


@dataclass
class SearchResult:
    """What a search proves (STATUSES): `optimal` (certificate complete), `feasible` (time limit or Ctrl-C: best
    verified + bound + gap), `infeasible` (proven: nothing fits, with why), `unknown` (time limit or Ctrl-C before any
    strategy was verified: the bound, nothing more); `heuristic` for the greedy method (no proof)."""

    method: str
    status: str
    strategies: list[Evaluated]
    lower_bound_seconds: float
    space_size: int
    refused: Counter
    solve_seconds: float = 0.0
    verify_seconds: float = 0.0
    verified: int = 0
    over_memory: int = 0  # strategies priced and dropped for memory
    nearest_misses: list[Evaluated] = field(default_factory=list)  # faster than the winner, refused by memory
    explanation: str = ""
    solver_calls: int = 0
    expanded: int = 0  # batch items given exact coefficients (CP-SAT); the rest kept their lower bounds
    interrupted: bool = False  # stopped by Ctrl-C (status `feasible` or `unknown`, with what was proven by then)
    space_complete: bool = True  # False: the time limit stopped the walk, space_size counts what it reached

    @property
    def proven(self) -> bool:
        return self.status == "optimal"

    @property
    def best(self) -> Evaluated | None:
        return self.strategies[0] if self.strategies else None

    @property
    def gap(self) -> float:
        """Relative gap between the best verified step time and the proven lower bound (0 when proven)."""
        if not self.strategies:
            return 0.0 if self.status == "infeasible" else float("inf")
        best = self.strategies[0].step_seconds
        return max(0.0, (best - self.lower_bound_seconds) / best) if self.status != "optimal" else 0.0

    @property
    def proven_within(self) -> float | None:
        """How far below the best verified step time an `optimal` answer's proven bound may lie (relative): 0 where
        the certificate is exact; above 0 where the per-layer search accepted plans within its plan model's rounding
        (plans.PLAN_TOLERANCE or the model's time rounding, whichever is larger), so a plan up to that much faster
        may exist among the plans it left unverified. None unless optimal."""
        if self.status != "optimal" or not self.strategies or self.lower_bound_seconds is None:
            return None
        best = self.strategies[0].step_seconds
        return max(0.0, (best - self.lower_bound_seconds) / best)

    def as_dict(self) -> dict:
        return {
            "status": self.status,
            "proven": self.proven,
            "gap": self.gap,
            "proven_within": self.proven_within,
            "lower_bound_seconds": self.lower_bound_seconds,
            "solve_seconds": self.solve_seconds,  # contract key, docs/solver.md §9: a copy of timing.solve_seconds
            "timing": {"solve_seconds": self.solve_seconds, "verify_seconds": self.verify_seconds},
            "method": self.method,
            "verified": self.verified,
            "solver_calls": self.solver_calls,
            "expanded_items": self.expanded,
            "explanation": self.explanation,
            "space": {"size": self.space_size, "complete": self.space_complete,
                      "refused": dict(sorted(self.refused.items())), "over_memory": self.over_memory},
            "strategies": [e.as_dict(rank=i + 1) for i, e in enumerate(self.strategies)],
            "nearest_misses": [{**e.as_dict(), "over_bytes": e.over_bytes, "peak_stage": e.memory.peak_stage}
                               for e in self.nearest_misses],
        }


def nearest_misses(misses: Iterable[Evaluated], best: float) -> list[Evaluated]:
    """The NEAREST_MISSES fastest strategies refused by memory that are faster than `best` seconds, ranked."""
    return sorted((e for e in misses if e.step_seconds < best), key=Evaluated.rank_key)[:NEAREST_MISSES]


TIME_LIMIT, CTRL_C = "time limit", "Ctrl-C"  # why a search stopped before its end (its explanation starts so)


def expiry(start: float, time_limit: float | None) -> Callable[[], bool]:
    """Whether `time_limit` seconds have passed since `start` (a time.perf_counter() value); never, for None."""
    if time_limit is None:
        return lambda: False
    deadline = start + time_limit
    return lambda: time.perf_counter() > deadline


class Ranking:
    """The fitting strategies' `top` best, the nearest misses and the least-memory miss of a stream of priced
    strategies, kept as they arrive: a stream of any length holds top + NEAREST_MISSES + 1 of them (the exhaustive
    oracle and greedy price hundreds of thousands). Ties are ranked by Evaluated.rank_key, as a sorted list is."""

    def __init__(self, top: int):
        self.top = top
        self.best: list[Evaluated] = []  # the `top` fastest that fit, ranked
        self.fastest_misses: list[Evaluated] = []  # the NEAREST_MISSES fastest refused by memory, ranked
        self.least_miss: Evaluated | None = None  # the miss of least peak memory (why nothing fits)
        self.fitting = 0
        self.misses = 0

    def add(self, evaluated: Evaluated) -> None:
        if evaluated.fits:
            self.fitting += 1
            _keep(self.best, evaluated, self.top)
            return
        self.misses += 1
        _keep(self.fastest_misses, evaluated, NEAREST_MISSES)
        if self.least_miss is None or _memory_key(evaluated) < _memory_key(self.least_miss):
            self.least_miss = evaluated

    def price(self, items: Iterable, price: Callable[..., Evaluated], expired: Callable[[], bool],
              report: Callable[[int], None] | None = None, every: int = 500) -> str | None:
        """Add `price(item)` for each of `items` until they end (returns None), `expired()` (TIME_LIMIT) or Ctrl-C
        (CTRL_C); `report(count)` after every `every` items."""
        try:
            for count, item in enumerate(items, 1):
                if expired():
                    return TIME_LIMIT
                self.add(price(item))
                if report is not None and count % every == 0:
                    report(count)
        except KeyboardInterrupt:
            return CTRL_C
        return None

    @property
    def incumbent_seconds(self) -> float | None:
        return self.best[0].step_seconds if self.best else None

    def finish(self, result: SearchResult, start: float) -> SearchResult:
        """`finish(result, start, ...)` with what the stream kept (over_memory counts every miss)."""
        finish(result, start, self.best, self.fastest_misses, self.top)
        result.over_memory = self.misses
        return result


def _keep(ranked: list[Evaluated], evaluated: Evaluated, most: int) -> None:
    if len(ranked) < most or Evaluated.rank_key(evaluated) < Evaluated.rank_key(ranked[-1]):
        bisect.insort(ranked, evaluated, key=Evaluated.rank_key)
        del ranked[most:]


def _memory_key(evaluated: Evaluated) -> tuple:
    return evaluated.memory.peak_bytes, evaluated.strategy.key()


def finish(result: SearchResult, start: float, ranked: list[Evaluated] | None = None, misses: list[Evaluated] = (),
           top: int | None = None, verify_seconds: float = 0.0) -> SearchResult:
    """Complete a search's result: with `ranked` (the fitting strategies, best first), its `top` strategies, the
    nearest of `misses` (strategies priced and refused by memory) and how many they are; always its timings, from
    `start` (time.perf_counter() when the search began). Every search ends here."""
    if ranked is not None:
        result.strategies = ranked[:top]
        result.nearest_misses = nearest_misses(misses, ranked[0].step_seconds if ranked else float("inf"))
        result.over_memory = len(misses)
    if result.status == "feasible" and not result.strategies:
        # stopped (time limit or Ctrl-C) before any strategy was verified: nothing is known to fit, and nothing is
        # proven not to (that is "infeasible")
        result.status = UNKNOWN
    result.verify_seconds = verify_seconds
    result.solve_seconds = time.perf_counter() - start
    return result
