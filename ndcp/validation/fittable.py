"""The device fields `ndcp calibrate` may fit, with their bounds and prior (docs/calibration.md §8). Apart from
fit.py so that the command line lists them without importing numpy."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Parameter:
    """A fitted device field: bounds on the fitted value; `relative`: the value is a fraction of the start device's
    field (a link efficiency: achieved / datasheet bandwidth), else the field itself. `spread`: how far from the
    start value one MFU point of misfit is worth (the prior's scale, below)."""

    field: str
    low: float
    high: float
    spread: float
    relative: bool = False


# Bounds: wide around the published efficiencies; links may run at 30-100 % of the datasheet. Prior (docs/
# calibration.md §8): each parameter also pays ((value - start) / spread)^2, as one more residual, i.e. ridge
# regression towards the start device (Tikhonov; Hastie, Tibshirani & Friedman, Elements of Statistical Learning,
# 2nd ed., §3.4.1). Without it the attention and link knobs, which few runs constrain, run to their bounds and the
# leave-one-source-out error more than doubles (docs/calibration.md §8).
FITTABLE = {p.field: p for p in (
    Parameter("compute_efficiency", 0.30, 0.95, spread=0.05),
    Parameter("flash_forward_efficiency", 0.20, 0.90, spread=0.05),
    Parameter("flash_backward_efficiency", 0.20, 0.90, spread=0.05),
    Parameter("fp8_compute_efficiency", 0.30, 0.95, spread=0.05),  # fitted on the device's FP8 runs
    Parameter("intra_node_bandwidth", 0.30, 1.00, spread=0.2, relative=True),
    Parameter("inter_node_bandwidth", 0.30, 1.00, spread=0.2, relative=True),
)}
# Fitted unless --parameters says otherwise: the compute knobs. The links are fitted on request: on the H100 runs
# they raise the leave-one-source-out error (docs/calibration.md §8) and make the fit ~15x slower.
DEFAULT_PARAMETERS = ("compute_efficiency", "flash_forward_efficiency", "flash_backward_efficiency")
