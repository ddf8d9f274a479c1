"""One sweep point as an independent proven search, and what the sweep derives from its answer.

`solve_job` is a top-level function of plain, picklable arguments, so the same call runs in this process, in a
spawned worker process or in a Ray task, and gives the same answer everywhere: one CP-SAT worker and a fixed seed
(the search's determinism, docs/solver.md §9).

Derived, per point (docs/sweep.md): tokens per step = global batch x sequence length; steps = ceil(tokens to train
/ tokens per step) (whole optimizer steps); time to train = steps x step time; GPU-hours = GPUs x time to train /
3600; cost = price per GPU-hour x GPU-hours. Each also as a band [low, high]: the same products of the winner's
step-time band at the run's confidence (estimate/evidence.py; docs/confidence.md §4).
"""
from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass

from ..estimate.evidence import plan_evidence
from ..report.plots import strategy_label
from ..space import SearchSpace, SpaceOptions
from ..specs.device import ClusterSpec
from ..specs.model import ModelSpec
from ..specs.run import RunSpec
from ..specs.strategy_text import strategy_text
from .points import SweepPoint


@dataclass(frozen=True)
class Job:
    """Everything one point's search needs (validated specs, built in the main process)."""

    point: SweepPoint
    model: ModelSpec
    cluster: ClusterSpec
    run: RunSpec
    space_options: SpaceOptions
    method: str = "per-layer"
    time_limit: float = 60.0
    seed: int = 0

    def key(self) -> str:
        """The problem's identity (its specs and search settings, not the executor): a resumed sweep reuses an
        answer only for the very same problem."""
        text = repr((self.model, self.cluster, self.run, self.space_options, self.method, self.time_limit, self.seed))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def solve_job(job: Job) -> dict:
    """The point's search answer: the point (the device by its name, also for a device file), its key, status,
    the best strategy (one line, and the short label the table shows), step seconds, MFU, tokens per second (whole
    cluster) and the seconds the search took."""
    from ..solve.search import SearchOptions, search  # OR-Tools: imported where a search runs

    started = time.perf_counter()
    space = SearchSpace(job.model, job.cluster, job.run, job.space_options)
    result = search(space, job.method, SearchOptions(top=1, time_limit=job.time_limit, seed=job.seed, workers=1))
    best = result.best
    answer = {"device": job.cluster.device.name, "gpus": job.point.gpus, "global_batch": job.point.global_batch,
              "seq_len": job.point.seq_len, "key": job.key(), "status": result.status,
              "strategy": None, "label": None, "step_seconds": None, "mfu": None, "tokens_per_second": None,
              "explanation": result.explanation or None}
    if best is not None:
        evidence = plan_evidence(job.model, job.cluster.device.name, job.run, best.strategy, job.run.confidence)
        answer.update(strategy=strategy_text(best.strategy), label=strategy_label(best.strategy),
                      step_seconds=best.step_seconds, mfu=best.time.mfu,
                      tokens_per_second=job.point.global_batch * job.point.seq_len / best.step_seconds,
                      step_seconds_band=list(evidence.step_seconds_band(best.step_seconds)))
    answer["solve_seconds"] = time.perf_counter() - started
    return answer


def derive(answer: dict, tokens: int, price_per_gpu_hour: float | None) -> dict:
    """The answer with steps, time to train, GPU-hours and cost (None where nothing fits or no price is given)."""
    row = dict(answer)
    step = answer.get("step_seconds")
    if step is None:
        row.update(steps=None, time_to_train_seconds=None, gpu_hours=None, cost=None, time_to_train_seconds_band=None,
                   gpu_hours_band=None, cost_band=None)
        return row
    steps = math.ceil(tokens / (answer["global_batch"] * answer["seq_len"]))
    seconds, gpu_hours, cost = _totals(steps, step, answer["gpus"], price_per_gpu_hour)
    row.update(steps=steps, time_to_train_seconds=seconds, gpu_hours=gpu_hours, cost=cost)
    # the step time's band at the run's confidence (docs/evidence.md), carried through the same products; an answer
    # logged before bands existed has none (its step time as both edges)
    edges = [_totals(steps, edge, answer["gpus"], price_per_gpu_hour)
             for edge in answer.get("step_seconds_band") or (step, step)]
    row.update(time_to_train_seconds_band=[e[0] for e in edges], gpu_hours_band=[e[1] for e in edges],
               cost_band=None if price_per_gpu_hour is None else [e[2] for e in edges])
    return row


def _totals(steps: int, step_seconds: float, gpus: int, price_per_gpu_hour: float | None
            ) -> tuple[float, float, float | None]:
    """(time to train in seconds, GPU-hours, cost or None) of `steps` steps of `step_seconds` on `gpus` GPUs."""
    seconds = steps * step_seconds
    gpu_hours = gpus * seconds / 3600
    return seconds, gpu_hours, None if price_per_gpu_hour is None else price_per_gpu_hour * gpu_hours


__all__ = ["Job", "solve_job", "derive"]
