"""Estimate each measured run and compare estimated with measured MFU, step time and memory: `validate_file`.

MFU basis: a row whose `tflops_basis` (or notes) states Narayanan's recompute-inclusive 96-coefficient formula is
compared on that basis: measured = its TFLOP/s / peak, estimated = those FLOPs (full recompute counted, full s^2
attention) / (GPUs x peak x estimated step). Every other row is compared on model FLOPs (MFU) counted in the row's
own convention (`run.mfu_convention`: causal or full attention, docs/formulas.md §2.6).

Memory: published peaks are the PyTorch caching allocator's, on the row's `memory_basis` (runs.py): `reserved`
(torch.cuda.max_memory_reserved, as torchtitan and NeMo log it, the default) is compared with the estimate's
`allocator_peak_bytes`, the peak without the CUDA context and NCCL buffers the allocator never holds; `allocated`
(torch.cuda.max_memory_allocated, the live tensors) with `allocated_peak_bytes`, which also leaves out the
fragmentation (docs/formulas.md §5.1).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..estimate.compute import model_flops_per_step, narayanan_flops_per_step
from ..estimate.memory import estimate_memory
from ..estimate.time import estimate_time
from ..specs.fields import SpecError
from ..specs.strategy_text import VALIDATION_FIELDS, strategy_text
from ..specs.units import GIB
from .runs import MeasuredRun, SkipRun, read_rows
from .statistics import ValidationSummary, summarise

NARAYANAN_BASIS = "narayanan-96"
MODEL_BASIS = "model"


@dataclass(frozen=True)
class RunComparison:
    """One measured run next to its estimate. MFU figures are fractions on `basis`; steps in seconds."""

    id: str
    device: str
    gpus: int
    strategy: str
    basis: str
    measured_mfu: float | None
    estimated_mfu: float
    measured_step: float | None
    estimated_step: float
    measured_memory_gib: float | None = None
    estimated_memory_gib: float | None = None
    assumptions: tuple[str, ...] = ()
    estimated_fits: bool = True  # the estimated peak fits the device (these runs really ran)
    searched: str = ""  # the knobs the source does not publish, as ndcp's pinned search filled them ("" if none)
    memory_basis: str | None = None  # the allocator figure both memory columns are (runs.MEMORY_BASES), if compared

    @property
    def mfu_error_points(self) -> float | None:
        return None if self.measured_mfu is None else 100 * (self.estimated_mfu - self.measured_mfu)

    @property
    def step_relative_error(self) -> float | None:
        return None if not self.measured_step else self.estimated_step / self.measured_step - 1

    @property
    def memory_relative_error(self) -> float | None:
        if not self.measured_memory_gib or self.estimated_memory_gib is None:
            return None
        return self.estimated_memory_gib / self.measured_memory_gib - 1

    def as_dict(self) -> dict:
        out = asdict(self)
        out.update(assumptions=list(self.assumptions), mfu_error_points=self.mfu_error_points,
                   step_relative_error=self.step_relative_error, memory_relative_error=self.memory_relative_error)
        return out


@dataclass(frozen=True)
class SkippedRun:
    """A run not compared, and why; `reached` False when the time limit ended the validation before it."""

    id: str
    reason: str
    reached: bool = True


@dataclass(frozen=True)
class ValidationResult:
    source: str
    runs: tuple[RunComparison, ...]
    skipped: tuple[SkippedRun, ...]
    summary: ValidationSummary
    notes: tuple[str, ...] = field(default=())

    @property
    def complete(self) -> bool:
        """Every run of the file was reached (no time limit ended the validation early)."""
        return all(s.reached for s in self.skipped)

    def as_dict(self) -> dict:
        return {"source": self.source, "complete": self.complete, "runs": [r.as_dict() for r in self.runs],
                "skipped": [asdict(s) for s in self.skipped], "summary": asdict(self.summary),
                "notes": list(self.notes)}


def compare_row(row: MeasuredRun) -> RunComparison:
    """Estimate one row and set measured and estimated figures on the same basis."""
    model, cluster, run, strategy = row.model, row.cluster, row.run, row.strategy
    estimate = estimate_time(model, cluster, run, strategy)
    peak = cluster.device.utilisation_peak(run.fp8) * cluster.count
    if row.narayanan_basis:
        basis, flops = NARAYANAN_BASIS, narayanan_flops_per_step(model, run.seq_len, strategy.global_batch)
    else:
        basis = f"{MODEL_BASIS}-{run.mfu_convention}"
        flops = model_flops_per_step(model, run.seq_len, strategy.global_batch, run.mfu_convention)
    measured_step = row.step_seconds
    if measured_step is None and row.tokens_per_second_per_gpu:
        measured_step = strategy.global_batch * run.seq_len / (row.tokens_per_second_per_gpu * cluster.count)
    if measured_step is None and row.tflops_per_gpu:
        measured_step = flops / (row.tflops_per_gpu * 1e12 * cluster.count)
    measured_mfu = row.mfu
    if measured_mfu is None and row.tflops_per_gpu:
        measured_mfu = row.tflops_per_gpu * 1e12 * cluster.count / peak
    if measured_mfu is None and measured_step:
        measured_mfu = flops / (peak * measured_step)
    assumptions = row.assumptions
    if not row.peak_known:  # its MFU and step time cannot be compared with a peak the source does not know
        measured_mfu = measured_step = None
        assumptions += ("time not compared: the source publishes no peak FLOP/s for this device",)
    memory = estimate_memory(model, cluster, run, strategy)
    estimated_peak = memory.allocated_peak_bytes if row.memory_basis == "allocated" else memory.allocator_peak_bytes
    label = strategy_text(strategy, VALIDATION_FIELDS, compact=True, above_one=("cp", "ep", "vpp"))
    return RunComparison(row.id, cluster.device.name, cluster.count, label, basis, measured_mfu,
                         flops / (peak * estimate.step_seconds), measured_step, estimate.step_seconds,
                         row.memory_gib, estimated_peak / GIB if row.memory_gib else None, assumptions,
                         memory.fits, row.searched, row.memory_basis if row.memory_gib else None)


def validate_file(path, time_limit: float | None = None) -> ValidationResult:
    """Estimate every run in a published-runs YAML or a measured-runs CSV and compare; a run that publishes only
    its peak memory is compared on memory; unrepresentable runs are listed in `skipped` with the reason.

    `time_limit` (seconds, None: none) bounds the whole validation: it is checked before each run, a run already
    started finishes (its pinned search, unknowns.PINNED_TIME_LIMIT at most), and the runs not reached are listed in
    `skipped` (`reached` False) with the summary of those compared."""
    path = Path(path)
    deadline = None if time_limit is None else time.perf_counter() + time_limit
    compared, skipped = [], []
    for run_id, build in read_rows(path):
        if deadline is not None and time.perf_counter() > deadline:
            skipped.append(SkippedRun(run_id, f"not reached: the time limit of {time_limit:g} s ran out", False))
            continue
        try:
            compared.append(compare_row(measured_row(build)))
        except SkipRun as reason:
            skipped.append(SkippedRun(run_id, str(reason)))
        except (SpecError, ValueError, TypeError, KeyError) as error:
            skipped.append(SkippedRun(run_id, f"cannot be represented: {error}"))
    runs = tuple(compared)
    unreached = sum(not s.reached for s in skipped)
    notes = (f"time limit of {time_limit:g} s reached: {unreached} of {len(compared) + len(skipped)} runs not "
             "reached (listed as skipped)",) if unreached else ()
    return ValidationResult(str(path), runs, tuple(skipped), summarise(runs), notes)


# the fields a row's measurements are read from (runs.py), named for a row that states none of them
NOTHING_MEASURED = ("no measured step time, MFU, TFLOP/s, tokens/s or peak memory (a YAML row's outcome: step_time_s, "
                    "mfu, tflops_per_gpu, tokens_per_s_per_gpu or memory_gib_per_gpu; a CSV's columns: step_seconds, "
                    "mfu or memory_gib)")


def measured_row(build) -> MeasuredRun:
    """A row's MeasuredRun from its builder (runs.read_rows); SkipRun when it states nothing to compare."""
    row = build()
    if row.step_seconds is None and row.mfu is None and not row.tflops_per_gpu \
            and not row.tokens_per_second_per_gpu and row.memory_gib is None:
        raise SkipRun(NOTHING_MEASURED)
    return row


__all__ = ["validate_file", "compare_row", "measured_row", "ValidationResult", "RunComparison", "SkippedRun",
           "NARAYANAN_BASIS", "MODEL_BASIS"]
