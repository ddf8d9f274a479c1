"""The CP-SAT searches and their optimality certificates (docs/solver.md §6), importable from here:

- `cpsat_search` (uniform.py): uniform recompute; the relaxation's points verified band by band in objective order.
- `plan_search` (plans.py): per-layer recompute and partitions; plan sub-models solved in item-bound order, seeded
  with the proven uniform optimum.
- items.py: what both share (the batch items' bounds and their tightening levels, why nothing fits); result.py
  finishes every search's result.
"""
from __future__ import annotations

from .plans import PLAN_TOLERANCE, plan_search
from .uniform import cpsat_search

__all__ = ["PLAN_TOLERANCE", "cpsat_search", "plan_search"]
