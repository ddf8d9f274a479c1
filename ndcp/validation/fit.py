"""Fitting device parameters to measured runs: `ndcp calibrate` and `scripts/calibrate.py` (docs/calibration.md §8).

The objective is the MFU error in points of each run `ndcp validate` compares (ndcp.validation.compare), estimated
through that same path with candidate parameter values put on the run's device. Two fits share the runs, the error
cache and the cross-validation:

- `fit_device` (`ndcp calibrate`): the efficiency knobs of one device (FITTABLE: the GEMM ceiling, the fused
  attention forward and backward efficiencies, and the scale-up / scale-out link efficiencies as fractions of the
  datasheet bandwidths) by bounded least squares on the MFU errors: Levenberg-Marquardt (Marquardt 1963; Nocedal &
  Wright, Numerical Optimization, 2nd ed., §10.3) with forward-difference Jacobians and every step projected onto
  the bounds.
- `grid_minimum` (`scripts/calibrate.py`): one GEMM ceiling per GPU generation (and one FP8 GEMM ceiling, on the
  FP8 runs), the exact minimum of the mean |MFU error| over a grid (steps of 0.01, then 0.005 around the best; ties
  to the smaller value).

Cross-validation is leave-one-source-out: runs are grouped by publication, a row's `source.group` or else the id
prefix before the first "_" (narayanan2021, mcore, dgxc, ..., megatron-bridge-performance, llm-foundry); each group
is held out in turn, the parameters fitted on the others and the held-out runs estimated with them.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..specs.device import ClusterSpec, DeviceSpec
from ..specs.fields import SpecError
from .compare import RunComparison, compare_row
from .fittable import DEFAULT_PARAMETERS, FITTABLE, Parameter
from .runs import MeasuredRun, SkipRun, read_rows




def source(row: MeasuredRun) -> str:
    """The publication a run comes from: its `source.group` (a YAML row), else its id before the first "_"."""
    return row.source or row.id.split("_", 1)[0]


def compared_runs(path: Path, keep: Callable[[MeasuredRun], bool] = lambda row: True) -> list[MeasuredRun]:
    """The runs of `path` that `ndcp validate` compares on time (a measured MFU or step) and `keep` accepts."""
    rows = []
    for _, build in read_rows(Path(path)):
        try:
            row = build()
        except (SkipRun, SpecError, ValueError, TypeError, KeyError):
            continue
        compared = compare_row(row) if keep(row) else None
        if compared is not None and (compared.mfu_error_points is not None or compared.measured_step):
            rows.append(row)
    return rows


def fitted(row: MeasuredRun, fp8: bool = False) -> bool:
    """Whether a compared run may fit device parameters: a run with a measured MFU, 16-bit unless `fp8`. FP8 runs
    fit only the FP8 GEMM ceiling `fp8_compute_efficiency` (docs/formulas.md §3.1): scripts/calibrate.py per GPU
    generation, `ndcp calibrate` when that parameter is asked for."""
    return (fp8 or not row.run.fp8) and compare_row(row).mfu_error_points is not None


def load_runs(path: Path, keep: Callable[[MeasuredRun], bool] = lambda row: True, fp8: bool = False
              ) -> list[MeasuredRun]:
    """The runs of `path` that `ndcp validate` compares on MFU, that may fit (`fitted`, FP8 ones too when `fp8`)
    and `keep` accepts."""
    return [row for row in compared_runs(path, keep) if fitted(row, fp8)]


class Errors:
    """The MFU error (points) of each run with some device fields replaced, each (run, values) computed once."""

    def __init__(self, rows: list[MeasuredRun]):
        self.rows, self.cache = rows, {}

    def comparison(self, i: int, values: dict[str, float]) -> RunComparison:
        """Run i compared with `values` put on its device (its step, MFU and memory errors)."""
        key = (i, tuple(sorted(values.items())))
        if key not in self.cache:
            row = self.rows[i]
            device = replace(row.cluster.device, **values)
            self.cache[key] = compare_row(replace(row, cluster=ClusterSpec(device, row.cluster.count)))
        return self.cache[key]

    def __call__(self, i: int, values: dict[str, float]) -> float:
        return self.comparison(i, values).mfu_error_points


def statistics(values: Sequence[float]) -> dict:
    values = [abs(v) for v in values]
    return {"runs": len(values), "mean": sum(values) / len(values) if values else None,
            "max": max(values) if values else None}


def leave_one_source_out(errors: Errors, runs: list[int], fit: Callable[[list[int]], dict],
                         evaluate: Callable[[dict, list[int]], dict[str, float]]) -> dict:
    """Each source held out in turn: `fit` on the other runs, `evaluate` (run id -> error) on the held-out ones.
    Returns the held-out statistics and the folds (sorted by source)."""
    folds, held_out = [], {}
    for name in sorted({source(errors.rows[i]) for i in runs}):
        test = [i for i in runs if source(errors.rows[i]) == name]
        parameters = fit([i for i in runs if i not in test])
        fold_errors = evaluate(parameters, test)
        held_out.update(fold_errors)
        folds.append({"source": name, "parameters": parameters, "errors": fold_errors,
                      **statistics(list(fold_errors.values()))})
    return {**statistics(list(held_out.values())), "folds": folds}


# -- the script's fit: a grid minimum of the mean |error| ----------------------------------------------------------
COARSE = tuple(round(0.50 + 0.01 * i, 3) for i in range(46))  # 0.50 ... 0.95
FINE_STEP = 0.005


def grid_minimum(cost: Callable[[float], float], coarse: Sequence[float] = COARSE, fine_step: float = FINE_STEP
                 ) -> float:
    """The value of `coarse` minimising `cost`, then refined by +-`fine_step` (ties to the smaller value)."""
    best = min((cost(c), c) for c in coarse)
    around = (round(best[1] - fine_step, 3), round(best[1] + fine_step, 3))
    return min([best] + [(cost(c), c) for c in around if 0.0 < c <= 1.0])[1]


# -- `ndcp calibrate`'s fit: bounded least squares ------------------------------------------------------------------
def bounded_least_squares(residuals: Callable[[np.ndarray], np.ndarray], x0: np.ndarray, low: np.ndarray,
                          high: np.ndarray, max_iterations: int = 60, step: float = 1e-3) -> np.ndarray:
    """argmin ||residuals(x)||^2 over low <= x <= high: Levenberg-Marquardt with forward differences (stepping
    inward at an upper bound), each trial point projected onto the box. Deterministic; stops when a step no
    longer lowers the sum of squares by 1e-9 relative or moves x by under 1e-7."""
    x = np.clip(np.asarray(x0, dtype=float), low, high)
    r = residuals(x)
    cost, damping = float(r @ r), 1e-3
    for _ in range(max_iterations):
        jacobian = np.empty((r.size, x.size))
        for k in range(x.size):
            h = step if x[k] + step <= high[k] else -step
            moved = x.copy()
            moved[k] += h
            jacobian[:, k] = (residuals(moved) - r) / h
        normal, gradient = jacobian.T @ jacobian, jacobian.T @ r
        improved = False
        while damping < 1e10:
            scaled = normal + damping * (np.diag(np.diag(normal)) + 1e-12 * np.eye(x.size))
            trial = np.clip(x - np.linalg.lstsq(scaled, gradient, rcond=None)[0], low, high)
            trial_r = residuals(trial)
            trial_cost = float(trial_r @ trial_r)
            if trial_cost < cost:
                moved_by, gain = float(np.max(np.abs(trial - x))), (cost - trial_cost) / max(cost, 1e-30)
                x, r, cost, damping, improved = trial, trial_r, trial_cost, max(damping / 3, 1e-9), True
                break
            damping *= 4
        if not improved or gain < 1e-9 or moved_by < 1e-7:
            break
    return x


def _device_values(start: DeviceSpec, names: Sequence[str], x: np.ndarray) -> dict[str, float]:
    """Device field values for the fitted vector (relative parameters times the start device's field)."""
    return {n: float(v) * getattr(start, n) if FITTABLE[n].relative else float(v) for n, v in zip(names, x)}


def _start_value(start: DeviceSpec, name: str) -> float:
    """The device's field; for fp8_compute_efficiency the FP8 ceiling in use (its 0 means "the 16-bit one")."""
    return start.fp8_ceiling if name == "fp8_compute_efficiency" else getattr(start, name)


def _start_vector(start: DeviceSpec, names: Sequence[str]) -> np.ndarray:
    return np.array([1.0 if FITTABLE[n].relative else _start_value(start, n) for n in names])


def fit_device(errors: Errors, runs: list[int], start: DeviceSpec, names: Sequence[str] = DEFAULT_PARAMETERS
               ) -> dict[str, float]:
    """The device field values minimising the sum of squared MFU errors over `runs` plus the prior, within
    FITTABLE's bounds, from `start`'s values."""
    low = np.array([FITTABLE[n].low for n in names])
    high = np.array([FITTABLE[n].high for n in names])
    x0, spread = _start_vector(start, names), np.array([FITTABLE[n].spread for n in names])

    def residuals(x: np.ndarray) -> np.ndarray:
        values = _device_values(start, names, np.round(x, 9))  # rounded: the error cache's keys repeat
        return np.concatenate([[errors(i, values) for i in runs], (x - x0) / spread])

    return _device_values(start, names, np.round(bounded_least_squares(residuals, x0, low, high), 9))


def calibrate_device(path: Path, start: DeviceSpec, names: Sequence[str] = DEFAULT_PARAMETERS) -> dict:
    """Fit `start`'s parameters on the runs of `path` on that device (by name): the fitted values, in-sample and
    leave-one-source-out errors, and the start values' errors for comparison. The fit minimises squared errors
    (plus the prior), so its sum of squares is at most the start's; the mean |error| usually drops too."""
    unknown = [n for n in names if n not in FITTABLE]
    if unknown or not names:
        raise SpecError(f"--parameters={','.join(names)} is not valid; valid: {', '.join(FITTABLE)}")
    fp8 = "fp8_compute_efficiency" in names  # FP8 runs fit only with the FP8 ceiling free (docs/formulas.md §3.1)
    errors = Errors(load_runs(path, lambda row: row.cluster.device.name == start.name, fp8))
    if not errors.rows:
        raise SpecError(f"{path}: no run on device {start.name!r} is compared on MFU (FP8 runs are fitted only with "
                        "--parameters naming fp8_compute_efficiency); the runs' gpu must name this device")
    runs = list(range(len(errors.rows)))

    def fit(subset: list[int]) -> dict:
        return fit_device(errors, subset, start, names) if subset else {n: _start_value(start, n) for n in names}

    def evaluate(values: dict, subset: list[int]) -> dict[str, float]:
        return {errors.rows[i].id: errors(i, values) for i in subset}

    parameters = fit(runs)
    start_values = {n: _start_value(start, n) for n in names}
    fitted, unfitted = evaluate(parameters, runs), evaluate(start_values, runs)
    return {"device": replace(start, **parameters, calibrated=True), "parameters": parameters,
            "in_sample": {**statistics(list(fitted.values())), "errors": fitted},
            "start": {**statistics(list(unfitted.values())), "parameters": start_values, "errors": unfitted},
            "leave_one_source_out": leave_one_source_out(errors, runs, fit, evaluate)}


__all__ = ["Parameter", "FITTABLE", "DEFAULT_PARAMETERS", "source", "compared_runs", "fitted", "load_runs", "Errors",
           "statistics", "leave_one_source_out", "grid_minimum", "bounded_least_squares", "fit_device",
           "calibrate_device"]
