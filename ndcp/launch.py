"""What the user launches: a plan's --emit configuration, read back as `ndcp estimate --strategy-from FILE` reads it
and estimated, so the file is checked to run the plan (same step time, same peak) and to fit before it is written.

`check_launch` writes the trainer's configuration (ndcp.trainers.emit), reads the text back through the same path as
`--strategy-from` (a temporary file, the same run options, `--trainer KIND`), and estimates what it reads. The
command line writes the file only when `LaunchCheck.ok` (or under --emit-anyway) and exits 1 otherwise, saying why:
a file that is not the plan, or that does not fit, is no answer.

Its first line states the problem it was planned for (`problem_line`: the model, cluster and run as `ndcp` words, a
comment every trainer ignores), so `ndcp replan FILE --gpus N` plans the same run on another GPU count from the file
alone (`stated_problem` reads it back).
"""
from __future__ import annotations

import argparse
import copy
import math
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .estimate.memory import estimate_memory
from .estimate.time import estimate_time
from .options import CLUSTER_OPTIONS, RUN_OPTIONS, stated_words
from .policy import build_problem, build_strategy, strategy_values
from .specs.device import ClusterSpec
from .specs.fields import SpecError
from .specs.model import ModelSpec
from .specs.run import RunSpec
from .specs.strategy import Strategy
from .specs.units import GIB
from .trainers import emit


PROBLEM_LINE = "# ndcp problem: "


def _located(text: str) -> str:
    """A file named by a relative path as an absolute one (the configuration may be read from elsewhere); a
    library name or a preset as it is."""
    path = Path(text).expanduser()
    return str(path.resolve()) if path.is_file() else text


def problem_line(values: argparse.Namespace) -> str:
    """The comment line stating the problem the options `values` describe: the model, then the cluster and run
    options that are not their defaults, as `ndcp` command-line words (files by absolute path)."""
    words = [_located(str(values.model))] + stated_words(values, CLUSTER_OPTIONS + RUN_OPTIONS)
    at = words.index("--device") + 1
    words[at] = _located(words[at])
    return PROBLEM_LINE + shlex.join(words) + "\n"


def stated_problem(text: str) -> list[str] | None:
    """The words of a configuration's problem line (problem_line), or None when it has none."""
    line = next((line for line in text.splitlines() if line.startswith(PROBLEM_LINE)), None)
    if line is None:
        return None
    try:
        return shlex.split(line[len(PROBLEM_LINE):])
    except ValueError as error:
        raise SpecError(f"the line {PROBLEM_LINE.strip()!r} cannot be split into words: {error}") from None


@dataclass(frozen=True)
class ReadBack:
    """The emitted configuration as ndcp reads it back: the strategy and its estimate."""

    strategy: Strategy
    step_seconds: float
    peak_bytes: int
    capacity_bytes: int
    fit_bytes: int  # the largest peak that fits at the run's confidence (MemoryEstimate.fit_bytes)

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.fit_bytes


@dataclass(frozen=True)
class LaunchCheck:
    """One plan's configuration for one trainer, and whether it is the plan and fits."""

    trainer: str
    text: str
    """the configuration (its notes as comments at the top)"""
    notes: tuple[str, ...]
    """what the trainer changed, or what the user must know (ndcp.trainers Emitted.notes)"""
    read_back: ReadBack | None
    """None: ndcp cannot read the file back (`reasons` says why)"""
    same_as_plan: bool
    """the file read back has the plan's step time and peak memory"""
    missing: tuple[str, ...]
    """what the file lacks to launch beyond the user's placeholders (ndcp.trainers Emitted.missing)"""
    reasons: tuple[str, ...]
    """why the file is not the plan or does not fit (empty when it is and does)"""

    @property
    def fits(self) -> bool:
        return self.read_back is not None and self.read_back.fits

    @property
    def ok(self) -> bool:
        """The file is an answer: it runs the plan, fits, and lacks nothing but the user's placeholders."""
        return self.same_as_plan and self.fits and not self.missing

    def document(self) -> dict:
        """The `emitted` block of `search --json` (sizes in bytes, times in seconds; None where not read back)."""
        back = self.read_back
        return {"trainer": self.trainer, "step_seconds": back and back.step_seconds,
                "peak_bytes": back and back.peak_bytes, "fits": self.fits, "same_as_plan": self.same_as_plan,
                "launchable": not self.missing, "reasons": list(self.reasons)}


def read_back(text: str, values: argparse.Namespace, trainer: str, ran: RunSpec | None = None) -> ReadBack:
    """The configuration `text` as `ndcp estimate --strategy-from FILE --trainer TRAINER` with the run options of
    `values` reads and estimates it, with the loss kernel the file runs (`ran`, Emitted.run: e.g. Megatron-LM's
    native fused loss for a plan on Transformer Engine's) where the emitter changed it. Raises SpecError when it
    cannot be read back."""
    with tempfile.TemporaryDirectory(prefix="ndcp-emit-") as folder:
        path = Path(folder) / "emitted"
        path.write_text(text, encoding="utf-8")
        given = copy.copy(values)
        given.strategy_from, given.strategy, given.strategy_file, given.trainer = str(path), "", None, trainer
        given.overlap = None  # the file's overlaps, as `--strategy-from` reads them without --overlap
        given.fsdp_version = "trainer"  # the trainer's own FSDP: what every emitted file runs (RunSpec.fsdp_version)
        given.loss_kernel = ran.loss_kernel if ran is not None else given.loss_kernel
        model, cluster, run = build_problem(given)
        strategy = build_strategy(model, cluster, run, strategy_values(given, model, run))
    memory, time = estimate_memory(model, cluster, run, strategy), estimate_time(model, cluster, run, strategy)
    return ReadBack(strategy, time.step_seconds, memory.peak_bytes, memory.capacity_bytes, memory.fit_bytes)


def _differences(plan_step: float, plan_peak: int, back: ReadBack) -> list[str]:
    out = []
    if not math.isclose(back.step_seconds, plan_step, rel_tol=1e-9, abs_tol=0.0):
        change = (back.step_seconds / plan_step - 1) * 100
        out.append(f"the file runs a {back.step_seconds:.3f} s step, the plan {plan_step:.3f} s ({change:+.1f} %)")
    if back.peak_bytes != plan_peak:
        out.append(f"the file peaks at {back.peak_bytes / GIB:.2f} GiB, the plan at {plan_peak / GIB:.2f} GiB")
    return out


def check_launch(kind: str, values: argparse.Namespace, problem: tuple[ModelSpec, ClusterSpec, RunSpec],
                 strategy: Strategy) -> LaunchCheck:
    """`kind`'s configuration for the plan `strategy` of the problem the options `values` describe, read back and
    compared with the plan's own estimate."""
    model, cluster, run = problem
    emitted = emit(kind, model, run, strategy, cluster.domain_ranks)
    text = problem_line(values) + emitted.text
    plan_step = estimate_time(model, cluster, run, strategy).step_seconds
    plan_peak = estimate_memory(model, cluster, run, strategy).peak_bytes
    reasons = [] if emitted.same_as_plan else list(emitted.notes)
    if run.trainer != kind:
        reasons.append(f"planned with {run.trainer}'s behaviour, emitted for {kind}: plan with --trainer {kind}")
    try:
        back = read_back(text, values, kind, emitted.run)
    except SpecError as error:
        return LaunchCheck(kind, text, tuple(emitted.notes), None, False, emitted.missing,
                           tuple(reasons + [f"ndcp cannot read the {kind} file back: {error}"]) + emitted.missing)
    mismatch = _differences(plan_step, plan_peak, back)
    problems = mismatch + ([] if back.fits else [f"the file does not fit: {back.peak_bytes / GIB:.2f} GiB of "
                                                  f"{back.capacity_bytes / GIB:.2f} GiB"])
    problems += list(emitted.missing)
    return LaunchCheck(kind, text, tuple(emitted.notes), back, not mismatch, emitted.missing,
                       tuple(reasons + problems) if problems else ())


__all__ = ["LaunchCheck", "ReadBack", "check_launch", "read_back", "problem_line", "stated_problem", "PROBLEM_LINE"]
