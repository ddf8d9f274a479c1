"""The CP-SAT model of the strategy space (uniform recompute), disaggregated per batch item.

Every valid (layout, mbs, mbn) triple is a batch item i (space.SearchSpace.walk builds that table of allowed
tuples, so dp x mbs x mbn = global batch and every divisibility rule hold exactly). An *expanded* item owns booleans
x[i,j] (its inner choice: sp x recompute) and y[i,z] (its ZeRO stage) with sum_j x[i,j] = sum_z y[i,z]; an item not
yet expanded is one boolean u[i] carrying its lower bound. Exactly one item is chosen. Then, linear in the booleans:
    time     = sum x[i,j] pipeline[i,j] + sum y[i,z] data_parallel[i,z] + sum u[i] bound[i]     (units of 10 us)
    memory_r = sum x[i,j] dynamic[i,j,r] + sum y[i,z] static[i,z,r] <= cap, for r in first/second/last stage (MiB)
Coefficients are rounded down and the cap is rounded down, so the model stays a relaxation of the full estimators
(design-notes formulation B: each item owns its variables; no big-M over shared ones).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ortools.sat.python import cp_model

from .coefficients import ItemTable

MIB = 2**20
TIME_UNIT = 1e-5  # seconds per objective unit (10 us)


def _floor(value: float, unit: float) -> int:
    return int(math.floor(value / unit + 1e-9))


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
        self.tables[i] = {
            "allowed": table.allowed,
            "time": [_floor(t, TIME_UNIT) for t in table.pipeline],
            "dp": [_floor(t, TIME_UNIT) for t in table.data_parallel],
            "dynamic": [[_floor(b, MIB) for b in row] for row in table.dynamic],
            "static": [[_floor(b, MIB) for b in row] for row in table.static],
        }

    def _least(self, i: int) -> int:
        """The item's smallest objective in the model."""
        table = self.tables.get(i)
        if table is None:
            return self.bounds[i]
        return min(t for t, ok in zip(table["time"], table["allowed"]) if ok) + min(table["dp"])

    def objective(self, i: int, j: int, z: int) -> int:
        t = self.tables[i]
        return t["time"][j] + t["dp"][z]

    def max_objective(self) -> int:
        expanded = [max(t["time"]) + max(t["dp"]) for t in self.tables.values()]
        return max(expanded + [b for b in self.bounds if b is not None])

    def _build(self, capped: bool, band: tuple[int, int] | None, minimize: str):
        m = cp_model.CpModel()
        choose, time_terms, memory_terms = [], [], [[], [], []]
        xs: dict[int, list] = {}
        ys: dict[int, list] = {}
        us: dict[int, object] = {}
        for i in range(len(self.bounds)):
            table = self.tables.get(i)
            if self.bounds[i] is None or (band is not None and self._least(i) > band[1]):
                continue  # proven not to fit, or every point of the item lies above the band
            if table is None:
                u = m.NewBoolVar(f"u{i}")
                us[i] = u
                choose.append(u)
                time_terms.append((u, self.bounds[i]))
                continue
            x = [m.NewBoolVar(f"x{i}_{j}") if ok else None for j, ok in enumerate(table["allowed"])]
            y = [m.NewBoolVar(f"y{i}_{z}") for z in range(len(table["dp"]))]
            xs[i], ys[i] = x, y
            live = [v for v in x if v is not None]
            choose.extend(live)
            m.Add(sum(live) == sum(y))
            for j, v in enumerate(x):
                if v is None:
                    continue
                time_terms.append((v, table["time"][j]))
                for r in range(3):
                    memory_terms[r].append((v, table["dynamic"][j][r]))
            for z, v in enumerate(y):
                time_terms.append((v, table["dp"][z]))
                for r in range(3):
                    memory_terms[r].append((v, table["static"][z][r]))
        m.AddExactlyOne(choose)
        objective = cp_model.LinearExpr.WeightedSum([v for v, _ in time_terms], [c for _, c in time_terms])
        peaks = [cp_model.LinearExpr.WeightedSum([v for v, _ in terms], [c for _, c in terms]) for terms in memory_terms]
        if capped:
            for peak in peaks:
                m.Add(peak <= self.cap)
        if band is not None:
            m.Add(objective >= band[0])
            m.Add(objective <= band[1])
        if minimize == "time":
            m.Minimize(objective)
        elif minimize == "memory":
            worst = m.NewIntVar(0, max(1, sum(max((c for _, c in terms), default=0) for terms in memory_terms)), "peak")
            m.AddMaxEquality(worst, peaks)
            m.Minimize(worst)
        return m, xs, ys, us

    def _solver(self, seconds: float, enumerate_all: bool = False) -> cp_model.CpSolver:
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = max(0.01, seconds)
        solver.parameters.random_seed = self.seed
        solver.parameters.num_workers = 1 if enumerate_all else self.workers
        solver.parameters.enumerate_all_solutions = enumerate_all
        return solver

    def _decode(self, value, xs, ys, us) -> Point:
        for i, u in us.items():
            if value(u):
                return Point(i, None, None, self.bounds[i])
        for i, x in xs.items():
            for j, v in enumerate(x):
                if v is not None and value(v):
                    z = next(k for k, w in enumerate(ys[i]) if value(w))
                    return Point(i, j, z, self.objective(i, j, z))
        raise AssertionError("a solution chooses exactly one item")

    def optimize(self, seconds: float, minimize: str = "time", capped: bool = True):
        """(status name, best Point or None, proven lower bound of the objective in units or None)."""
        m, xs, ys, us = self._build(capped, None, minimize)
        solver = self._solver(seconds)
        status = solver.Solve(m)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return solver.StatusName(status), None, None
        point = self._decode(solver.Value, xs, ys, us)
        return solver.StatusName(status), point, int(math.floor(solver.BestObjectiveBound() + 1e-9))

    def enumerate_band(self, low: int, high: int, seconds: float) -> tuple[list[Point], bool]:
        """Every point whose objective lies in [low, high] and whose constrained stages fit; (points, complete)."""
        m, xs, ys, us = self._build(True, (low, high), "none")
        found: list[Point] = []
        model = self

        class Collect(cp_model.CpSolverSolutionCallback):
            def on_solution_callback(self):
                found.append(model._decode(self.Value, xs, ys, us))

        solver = self._solver(seconds, enumerate_all=True)
        status = solver.Solve(m, Collect())
        return found, status in (cp_model.OPTIMAL, cp_model.INFEASIBLE)
