"""Search results shared by the exhaustive oracle and the CP-SAT search: verified strategies and the proof status."""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

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
        fewest peers across nodes, then the strategy's identity, so every search orders alike."""
        return (self.step_seconds, self.memory.peak_bytes, self.off_node_peers, self.strategy.key())

    def as_dict(self, rank: int | None = None) -> dict:
        out = {"strategy": self.strategy.as_dict(), "memory": self.memory.as_dict(), "time": self.time.as_dict()}
        return {"rank": rank, **out} if rank is not None else out


def off_node_peers(strategy: Strategy, devices_per_node: int) -> int:
    """How many of rank 0's peers in its TP, CP, DP and PP groups (and ETP, EP for expert layers) sit on other
    nodes, under Megatron's rank placement (estimate/communication.py): a group of n ranks at stride `stride` keeps
    ceil(devices_per_node / stride) of them (at most n, at least rank 0 itself) on rank 0's node."""
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
            peers += size - min(size, max(1, -(-devices_per_node // stride)))
            stride *= size
    return peers


def evaluate(space: SearchSpace, strategy: Strategy) -> Evaluated:
    """Price one strategy with the full memory and step-time estimators."""
    return Evaluated(strategy, estimate_memory(space.model, space.cluster, space.run, strategy),
                     estimate_time(space.model, space.cluster, space.run, strategy),
                     off_node_peers(strategy, space.cluster.device.devices_per_node))


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

    def as_dict(self) -> dict:
        return {
            "status": self.status,
            "proven": self.proven,
            "gap": self.gap,
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
