"""One sweep point as an independent proven search, and what the sweep derives from its answer.

`solve_job` is a top-level function of plain, picklable arguments, so the same call runs in this process, in a
spawned worker process or in a Ray task, and gives the same answer everywhere: one CP-SAT worker and a fixed seed
(the search's determinism, docs/solver.md §9).

Derived, per point (docs/sweep.md): tokens per step = global batch x sequence length; steps = ceil(tokens to train
/ tokens per step) (whole optimizer steps); ideal time to train = steps x step time; the expected time to train
with failures, checkpoints and restarts = ideal / goodput (estimate/goodput.py, docs/goodput.md); GPU-hours = GPUs
x time to train / 3600; cost = price per GPU-hour x GPU-hours, each ideal and expected. Each of the
expected ones also as a band [low, high]: the same figures at the edges of the winner's step-time band at the
run's confidence (estimate/evidence.py; docs/confidence.md §4).
"""
from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass

from ..estimate.evidence import plan_evidence
from ..estimate.goodput import CheckpointVolume, FailureSettings, RankFacts, checkpoint_volume, run_goodput
from ..report.plots import strategy_label
from ..space import SearchSpace, SpaceOptions
from ..specs.device import ClusterSpec
from ..specs.model import ModelSpec
from ..specs.run import RunSpec
from ..specs.strategy_text import strategy_text
from .journal import FAILED
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
    cluster), what its checkpoint needs (`checkpoint`: derive prices the failures from it) and the seconds the
    search took."""
    from ..solve.search import SearchOptions, search  # OR-Tools: imported where a search runs

    started = time.perf_counter()
    space = SearchSpace(job.model, job.cluster, job.run, job.space_options)
    result = search(space, job.method, SearchOptions(top=1, time_limit=job.time_limit, seed=job.seed, workers=1))
    best = result.best
    answer = _planless(job, result.status, result.explanation or None)
    if best is not None:
        evidence = plan_evidence(job.model, job.cluster.device.name, job.run, best.strategy, job.run.confidence)
        answer.update(strategy=strategy_text(best.strategy), label=strategy_label(best.strategy),
                      step_seconds=best.step_seconds, mfu=best.time.mfu,
                      tokens_per_second=job.point.global_batch * job.point.seq_len / best.step_seconds,
                      checkpoint=_checkpoint_facts(job, best),
                      step_seconds_band=list(evidence.step_seconds_band(best.step_seconds)))
    answer["solve_seconds"] = time.perf_counter() - started
    return answer


def _planless(job: Job, status: str, explanation: str | None) -> dict:
    """The answer's keys for `job`, no plan in them."""
    return {"device": job.cluster.device.name, "gpus": job.point.gpus, "global_batch": job.point.global_batch,
            "seq_len": job.point.seq_len, "key": job.key(), "status": status, "strategy": None, "label": None,
            "step_seconds": None, "mfu": None, "tokens_per_second": None, "explanation": explanation, "checkpoint": None}


def failed_answer(job: Job, why: str) -> dict:
    """The answer of a point no search answered (its worker process died on each try; executors): status
    `failed`, `why` as its explanation."""
    return {**_planless(job, FAILED, why), "solve_seconds": 0.0}


def _checkpoint_facts(job: Job, best) -> dict:
    """What pricing the best strategy's checkpoints needs (estimate/goodput.py), in bytes and bytes/s: its volume,
    the node's devices, the host link, and the host memory a rank may stage an asynchronous save in (its share of
    the node's, specs.device.offered_host_memory, less what offload already takes)."""
    device = job.cluster.device
    volume = checkpoint_volume(job.model, job.run, best.strategy)
    return {"written_per_rank": volume.written_per_rank, "total": volume.total,
            "staged_per_rank": volume.staged_per_rank, "devices_per_node": device.devices_per_node,
            "host_bandwidth": device.host_bandwidth,
            "staging_capacity": device.host_memory_bytes + device.memory_bytes - best.memory.host_peak_bytes}


DERIVED_KEYS = ("steps", "ideal_time_to_train_seconds", "ideal_gpu_hours", "ideal_cost", "goodput",
                "time_to_train_seconds", "gpu_hours", "cost", "checkpoint_interval_seconds",
                "checkpoint_interval_steps", "checkpoint_mode", "checkpoint_bytes_per_rank", "checkpoint_write_seconds",
                "checkpoint_blocking_seconds", "restart_seconds", "job_mtbf_seconds", "expected_failures",
                "blast_radius_gpus")
BAND_KEYS = ("time_to_train_seconds_band", "gpu_hours_band", "cost_band")  # [low, high] of the expected figures


def derive(answer: dict, tokens: int, price_per_gpu_hour: float | None,
           failures: FailureSettings = FailureSettings()) -> dict:
    """The answer with steps, the ideal time to train, GPU-hours and cost (no failure), the goodput with
    `failures` and the expected ones, the checkpoint interval and what it follows from (None where nothing fits;
    the costs None without a price)."""
    row = dict(answer, **dict.fromkeys(DERIVED_KEYS + BAND_KEYS))
    step = answer.get("step_seconds")
    if step is None:
        return row
    row.update(_figures(answer, step, tokens, price_per_gpu_hour, failures))
    # the step time's band at the run's confidence (docs/evidence.md), carried through the same figures; an answer
    # logged before bands existed has none (its step time as both edges)
    edges = [_figures(answer, edge, tokens, price_per_gpu_hour, failures)
             for edge in answer.get("step_seconds_band") or (step, step)]
    for band, key in zip(BAND_KEYS, ("time_to_train_seconds", "gpu_hours", "cost")):
        row[band] = None if any(e[key] is None for e in edges) else [e[key] for e in edges]
    return row


def _figures(answer: dict, step: float, tokens: int, price_per_gpu_hour: float | None,
             failures: FailureSettings) -> dict:
    """The DERIVED_KEYS of `answer` if its step were `step` seconds long (the expected ones None for an answer of an
    older ndcp, without its checkpoint facts)."""
    steps = math.ceil(tokens / (answer["global_batch"] * answer["seq_len"]))
    def price(hours: float) -> float | None:
        return None if price_per_gpu_hour is None else price_per_gpu_hour * hours
    ideal_hours = answer["gpus"] * steps * step / 3600
    out = dict.fromkeys(DERIVED_KEYS)
    out.update(steps=steps, ideal_time_to_train_seconds=steps * step, ideal_gpu_hours=ideal_hours,
               ideal_cost=price(ideal_hours))
    facts = answer.get("checkpoint")
    if facts is None:
        return out
    volume = CheckpointVolume(facts["written_per_rank"], facts["total"], facts["staged_per_rank"])
    rank = RankFacts(facts["devices_per_node"], facts["host_bandwidth"], facts["staging_capacity"])
    run = run_goodput(steps * step, step, answer["gpus"], volume, failures, rank)
    expected = run.expected_seconds if math.isfinite(run.expected_seconds) else None  # never ends: no number
    hours = None if expected is None else answer["gpus"] * expected / 3600
    out.update(goodput=run.goodput, time_to_train_seconds=expected, gpu_hours=hours,
               cost=None if hours is None else price(hours), checkpoint_interval_seconds=run.interval_seconds,
               checkpoint_interval_steps=run.interval_steps,
               checkpoint_mode="async" if run.asynchronous else "sync",
               checkpoint_bytes_per_rank=volume.written_per_rank, checkpoint_write_seconds=run.write_seconds,
               checkpoint_blocking_seconds=run.blocking_seconds, restart_seconds=run.restart_seconds,
               job_mtbf_seconds=run.job_mtbf_seconds,
               expected_failures=None if expected is None else run.expected_failures,
               blast_radius_gpus=run.blast_radius_gpus)
    return out


__all__ = ["Job", "solve_job", "failed_answer", "derive", "DERIVED_KEYS", "BAND_KEYS"]
