"""The CP-SAT model of the strategy space (uniform recompute), disaggregated per batch item.

Every valid (layout, mbs, mbn) triple is a batch item i (space.SearchSpace.walk builds that table of allowed
tuples, so dp x mbs x mbn = global batch and every divisibility rule hold exactly). An *expanded* item owns one
boolean q[i,j,z] per inner choice j (sp x recompute) and ZeRO stage z; the items not yet expanded share one boolean,
rest, carrying the least of their lower bounds. Exactly one boolean is true. Then, linear in the booleans:
    time     = sum q[i,j,z] time[i,j,z] + rest * min bound[unexpanded]                        (units of 10 us)
    memory_r = sum q[i,j,z] (dynamic[i,j,r] + static[i,z,r] + margin[i,j,z]) <= cap, r in first/second/last stage (MiB)
(margin: the bytes the point's peak upper edge keeps free at the run's confidence, margins.py; 0 at confidence 0)
Coefficients are rounded down and the cap is rounded down, so the model stays a relaxation of the full estimators:
exact in time, exact in memory except on stages it does not constrain (approach B, docs/solver.md §3.2: each item owns
its variables; no big-M over shared ones).
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from ortools.sat.python import cp_model

from .coefficients import ItemTable
from .interrupt import solve as interruptible

MIB = 2**20  # memory unit of the coefficients and the cap (bytes)
TIME_UNIT = 1e-5  # seconds per objective unit (10 us)
# Float noise forgiven when rounding down to a unit: a value within this of the next whole unit counts as that unit
# (coefficients, and CP-SAT's proven objective bound, which it reports as a float).
ROUNDING_SLACK = 1e-9
MIN_SOLVE_SECONDS = 0.01  # CP-SAT is never given less time than this (a spent deadline still gets a try)


def _floor(value: float, unit: float) -> int:
    return int(math.floor(value / unit + ROUNDING_SLACK))


@dataclass(frozen=True)
class Point:
    """A model solution: item i, and for an expanded item its inner choice j and ZeRO index z (else None)."""

    i: int
    j: int | None
    z: int | None
    bound: int  # objective in units: a lower bound on the point's full-estimator step time

    @property
    def expanded(self) -> bool:
        return self.j is not None


class StrategyModel:
    """Integer coefficients for every item; builds and solves CP-SAT models over them."""

    def __init__(self, bounds: list[float], capacity_bytes: int, seed: int = 0, workers: int = 1):
        """bounds[i]: the item's step-time lower bound (None once the item is proven not to fit)."""
        self.bounds = [None if b is None else _floor(b, TIME_UNIT) for b in bounds]
        self.tables: dict[int, dict] = {}
        self.cap_bytes = capacity_bytes
        self.cap = capacity_bytes // MIB
        self.seed, self.workers = seed, workers

    def drop(self, i: int) -> None:
        """Item i is proven not to fit: it leaves the model."""
        self.bounds[i] = None

    def expand(self, i: int, table: ItemTable) -> None:
        """Exact coefficients for item i: {(j, z): (time units, memory units per role)} over its allowed choices."""
        self.tables[i] = {
            (j, z): (_floor(table.time[j][z], TIME_UNIT),
                     tuple(_floor(d, MIB) + _floor(st, MIB) + (_floor(table.margin[j][z], MIB) if table.margin else 0)
                           for d, st in zip(table.dynamic[j], table.static[z])))
            for j, ok in enumerate(table.allowed) if ok for z, zero_ok in enumerate(table.zero_allowed) if zero_ok}
        if not self.tables[i]:  # no inner choice can run (the host memory, or no ZeRO stage the layout allows)
            self.drop(i)

    def objective(self, i: int, j: int, z: int) -> int:
        return self.tables[i][(j, z)][0]

    def max_objective(self) -> int:
        expanded = [max(t for t, _ in table.values()) for table in self.tables.values() if table]
        return max(expanded + [b for b in self.bounds if b is not None])

    def least_points(self, count: int) -> list[Point]:
        """The `count` points of least objective among the expanded items' whose constrained stages fit, found
        without a solve (what a search stopped before its first solve can still verify)."""
        points = ((units, i, j, z) for i, table in self.tables.items() if self.bounds[i] is not None
                  for (j, z), (units, memory) in table.items() if max(memory) <= self.cap)
        return [Point(i, j, z, units) for units, i, j, z in heapq.nsmallest(count, points)]

    def _rest(self) -> tuple[int, int] | None:
        """(item, bound) of the unexpanded item with the least bound, or None when every item is expanded."""
        bound, i = min(((b, i) for i, b in enumerate(self.bounds) if b is not None and i not in self.tables),
                       default=(None, None))
        return None if bound is None else (i, bound)

    def _build(self, band: tuple[int, int] | None):
        """Expanded items contribute their points; every unexpanded item is represented by one boolean, `rest`,
        carrying the least bound among them (all their points lie at or above it, so the model stays a relaxation,
        and choosing `rest` tells the caller to expand more)."""
        m = cp_model.CpModel()
        choices: dict = {}  # boolean -> (i, j, z); j, z None for the rest
        time_terms, memory_terms = [], [[], [], []]
        rest = self._rest()
        if rest is not None and (band is None or rest[1] <= band[1]):
            u = m.new_bool_var("rest")
            choices[u] = (rest[0], None, None)
            # In a band, an unexpanded item below its low end would still own points inside it: charge `low`.
            time_terms.append((u, rest[1] if band is None else max(rest[1], band[0])))
        for i, table in self.tables.items():
            if self.bounds[i] is None:
                continue
            for (j, z), (units, memory) in table.items():
                if band is not None and not band[0] <= units <= band[1]:
                    continue
                q = m.new_bool_var(f"q{i}_{j}_{z}")
                choices[q] = (i, j, z)
                time_terms.append((q, units))
                for r in range(3):
                    memory_terms[r].append((q, memory[r]))
        variables = list(choices)
        if not variables:
            m.add_bool_or([])  # nothing to choose: infeasible
            return m, choices
        # Choice: exactly one point (an expanded item's (j, z), or `rest`).
        m.add_exactly_one(variables)
        # Time: the chosen point's step time in units (the objective).
        objective = cp_model.LinearExpr.weighted_sum([v for v, _ in time_terms], [c for _, c in time_terms])
        # Memory: on each constrained stage (first, second, last), the chosen point's MiB within the cap.
        for terms in memory_terms:
            m.add(cp_model.LinearExpr.weighted_sum([v for v, _ in terms], [c for _, c in terms]) <= self.cap)
        if band is not None:  # enumerating a band: every point with low <= objective <= high
            m.add(objective >= band[0])
            m.add(objective <= band[1])
        else:  # optimizing: the least step time
            m.minimize(objective)
        return m, choices

    def _solver(self, seconds: float, enumerate_all: bool = False) -> cp_model.CpSolver:
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = max(MIN_SOLVE_SECONDS, seconds)
        solver.parameters.random_seed = self.seed
        solver.parameters.num_workers = 1 if enumerate_all else self.workers
        solver.parameters.enumerate_all_solutions = enumerate_all
        return solver

    def _decode(self, value, choices) -> Point:
        for var, (i, j, z) in choices.items():
            if value(var):
                return Point(i, j, z, self.bounds[i] if j is None else self.objective(i, j, z))
        raise AssertionError("a solution chooses exactly one point")

    def optimize(self, seconds: float):
        """(status name, best Point or None, proven lower bound of the objective in units or None)."""
        m, choices = self._build(None)
        solver = self._solver(seconds)
        status = interruptible(solver, m)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return solver.status_name(status), None, None
        point = self._decode(solver.value, choices)
        return solver.status_name(status), point, _floor(solver.best_objective_bound, 1)

    def enumerate_band(self, low: int, high: int, seconds: float, limit: int) -> tuple[list[Point], str]:
        """Every point whose objective lies in [low, high] and whose constrained stages fit, and how it ended:
        "complete", "overflow" (more than `limit` points: the caller narrows the band) or "timeout"."""
        m, choices = self._build((low, high))
        found: list[Point] = []
        model = self

        class Collect(cp_model.CpSolverSolutionCallback):
            def on_solution_callback(self):
                found.append(model._decode(self.value, choices))
                if len(found) > limit:
                    self.stop_search()

        solver = self._solver(seconds, enumerate_all=True)
        status = interruptible(solver, m, Collect())
        if len(found) > limit:
            return found, "overflow"
        return found, "complete" if status in (cp_model.OPTIMAL, cp_model.INFEASIBLE) else "timeout"
