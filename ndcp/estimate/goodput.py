"""Goodput of a whole training run: failures, checkpoints and restarts priced on top of the proven step time
(docs/goodput.md).

A synchronous job (Megatron-LM, torchtitan) stops as a whole when any of its GPUs fails: the failure rate of the
job is its GPU count times the rate per GPU, and every GPU idles until the job restarts from its last checkpoint.
The expected wall-clock time of `ideal` seconds of work with a checkpoint every `interval` seconds, a checkpoint
costing `delta` seconds, a restart `restart` seconds and exponentially distributed failures of mean `mtbf` seconds
is Daly's complete model (Daly 2006, "A higher order estimate of the optimum checkpoint interval for restart
dumps", FGCS 22, §3): mtbf x e^(restart/mtbf) x (e^((interval + delta)/mtbf) - 1) x ideal / interval. Its optimum
interval has no closed form; for delta << mtbf it is Young's sqrt(2 x delta x mtbf) (Young 1974) and Daly's
higher-order estimate refines it. Here the interval is the exact optimum of the model (one root, found by
bisection), taken in whole optimizer steps, as trainers count it (Megatron --save-interval, torchtitan
checkpoint.interval).

The strategy feeds the checkpoint volume: a distributed checkpoint has each rank write its own shard, and the
replicas of a shard (data-parallel copies) split its writing (Megatron dist_checkpointing's fully parallel save,
torch.distributed.checkpoint's deduplication of replicated tensors), so the busiest rank writes its stage's
parameters and optimizer states divided by the ranks that hold them. Pure functions: no solver, no report.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..specs.model import ModelSpec
from ..specs.run import RunSpec
from ..specs.strategy import Strategy
from .memory import state_bytes_per_param
from .parameters import dense_shard_ranks, expert_data_parallel, stage_parameters

HOUR = 3600.0
# The Llama 3 report (Llama Team, "The Llama 3 Herd of Models", arXiv:2407.21783, §3.3.4): 419 unexpected
# interruptions in a 54-day snapshot of pre-training on 16,384 H100 (47 more were planned): about one every three
# hours for the job, 1.97e-5 per GPU-hour, a mean time between failures of 50,700 hours per GPU.
LLAMA3_INTERRUPTIONS, LLAMA3_DAYS, LLAMA3_GPUS = 419, 54, 16_384
DEFAULT_GPU_MTBF_HOURS = LLAMA3_DAYS * 24 * LLAMA3_GPUS / LLAMA3_INTERRUPTIONS
# Storage: the Llama 3 report §3.3.1: Meta's Tectonic file system sustains 2 TB/s (7 TB/s peak) for the checkpoints
# of the 16K-GPU job; one node's storage fabric: NVIDIA DGX SuperPOD (DGX H100) reference architecture, "a GDS-enabled
# application should be able to read data at over 40 GBps" per DGX.
DEFAULT_AGGREGATE_BANDWIDTH = 2e12
DEFAULT_NODE_BANDWIDTH = 40e9
# Restart: rescheduling, process start, communicator set-up and the first step; the checkpoint's read is added from
# its size (restart_seconds). Not measured by any source cited here (the Llama 3 report gives no restart time); ten
# minutes, conservative against the report's "higher than 90% effective training time" with 419 interruptions in
# 54 days (each interruption then costs at most 0.1 x 3.1 hours = 18.6 minutes in all). Unvalidated.
DEFAULT_RESTART_SECONDS = 600.0


@dataclass(frozen=True)
class CheckpointVolume:
    """What one checkpoint of a strategy holds, in bytes."""

    written_per_rank: float  # written by the busiest rank: its share of its stage's parameters and optimizer states
    total: float  # every rank's share: the checkpoint once, without replicas
    staged_per_rank: float  # held by the fullest rank (ZeRO-sharded): what an asynchronous save copies to the host


@dataclass(frozen=True)
class Storage:
    """Checkpoint storage: bandwidth per node (its storage network) and of the whole file system, bytes/s; the
    slower of the two paces a save and the read of a restart."""

    node_bandwidth: float = DEFAULT_NODE_BANDWIDTH
    aggregate_bandwidth: float = DEFAULT_AGGREGATE_BANDWIDTH


@dataclass(frozen=True)
class FailureSettings:
    """How the run fails and saves: mean time between failures of one GPU (hours of that GPU running; the job's is
    this divided by its GPUs), the storage, an asynchronous save (Megatron --async-save, torchtitan
    checkpoint.async_mode) and the fixed part of a restart (seconds)."""

    gpu_mtbf_hours: float = DEFAULT_GPU_MTBF_HOURS
    storage: Storage = Storage()
    asynchronous: bool = False
    restart_seconds: float = DEFAULT_RESTART_SECONDS


@dataclass(frozen=True)
class RankFacts:
    """What a save needs of the cluster: devices per node, the host link per device (bytes/s, the copy of a
    rank's states to host memory) and the host memory a rank can stage a checkpoint in (bytes)."""

    devices_per_node: int
    host_bandwidth: float
    staging_capacity: float


@dataclass(frozen=True)
class Goodput:
    """The run with failures: the fraction of the expected wall-clock time that is training (`goodput`), that
    time, the checkpoint interval, and what they follow from."""

    goodput: float
    expected_seconds: float
    interval_seconds: float
    interval_steps: int
    blocking_seconds: float  # the step loop stopped per checkpoint
    write_seconds: float  # until a checkpoint is on storage
    restart_seconds: float  # fixed part plus the read of the checkpoint
    job_mtbf_seconds: float
    expected_failures: float
    blast_radius_gpus: int  # GPUs one failure stops: the whole synchronous job
    asynchronous: bool  # the save used (False also when an asynchronous one does not fit host memory)


def checkpoint_volume(model: ModelSpec, run: RunSpec, strategy: Strategy) -> CheckpointVolume:
    """The checkpoint of `strategy`: per stage, a device's parameters at the trainer's storage dtype and its
    optimizer states (ZeRO shards them; the checkpoint holds them once), written in equal parts by the ranks that
    hold the same ones (dense: data x context parallel ranks; experts: the expert-data-parallel ranks). Staged:
    what the rank holds itself (torch.distributed.checkpoint's async_save copies its whole local state dict)."""
    checkpointed = lambda states: states["parameters"] + states["optimizer_states"]  # noqa: E731
    per_param = checkpointed(state_bytes_per_param(run, 0, 1))
    dense_held = checkpointed(state_bytes_per_param(run, strategy.zero, dense_shard_ranks(strategy)))
    expert_held = checkpointed(state_bytes_per_param(run, strategy.zero, expert_data_parallel(strategy)))
    stages = stage_parameters(model, strategy)
    written = [per_param * (p.dense / (strategy.dp * strategy.cp) + p.expert / expert_data_parallel(strategy))
               for p in stages]
    staged = [p.dense * dense_held + p.expert * expert_held for p in stages]
    ranks_per_stage = strategy.tp * strategy.cp * strategy.dp
    return CheckpointVolume(max(written), sum(written) * ranks_per_stage, max(staged))


def write_seconds(volume: CheckpointVolume, storage: Storage, devices_per_node: int) -> float:
    """Seconds to write (or read) one checkpoint: a node's ranks through its storage network (the busiest ranks
    placed together: conservative), all of them through the file system."""
    return max(devices_per_node * volume.written_per_rank / storage.node_bandwidth,
               volume.total / storage.aggregate_bandwidth)


def expected_seconds(ideal: float, interval: float, delta: float, restart: float, mtbf: float) -> float:
    """Daly's complete model (module docstring): the expected wall-clock time of `ideal` seconds of work."""
    try:
        return mtbf * math.exp(restart / mtbf) * math.expm1((interval + delta) / mtbf) * ideal / interval
    except OverflowError:  # failures far more often than a checkpoint: the run never ends
        return math.inf


def optimal_interval(delta: float, mtbf: float) -> float:
    """The interval minimising expected_seconds: the root of e^((t + delta)/mtbf) x (1 - t/mtbf) = 1 in (0, mtbf)
    (the derivative's zero; the left side falls from e^(delta/mtbf) > 1 at t = 0 to 0 at t = mtbf). Solved in
    logarithms, x = t/mtbf: delta/mtbf + x + log(1 - x) = 0, which keeps its digits where delta << mtbf (there
    e^(delta/mtbf) rounds to 1)."""
    low, high = 0.0, 1.0
    for _ in range(200):
        middle = (low + high) / 2
        if delta / mtbf + middle + math.log1p(-middle) > 0:
            low = middle
        else:
            high = middle
    return mtbf * (low + high) / 2


def _whole_steps(best: float, step: float, fewest: int, most: int, cost) -> int:
    """The step count nearest the continuous optimum on either side (the model is unimodal in the interval),
    within [fewest, most], the cheaper of the two."""
    below = min(max(fewest, math.floor(best / step)), most)
    above = min(max(fewest, math.ceil(best / step)), most)
    return min((below, above), key=lambda steps: (cost(steps * step), steps))


def run_goodput(ideal: float, step: float, gpus: int, volume: CheckpointVolume, settings: FailureSettings,
                facts: RankFacts) -> Goodput:
    """The run of `ideal` seconds (whole steps of `step` seconds) on `gpus` GPUs with failures and checkpoints.

    Synchronous save: the loop waits for the copy to host and the write. Asynchronous save (when the staged shard
    fits the host memory left to the rank): the loop waits for the copy only; the write runs behind the steps, so a
    failure loses that much more work (added to the restart), and the next save waits for it (the interval is at
    least the write)."""
    mtbf = settings.gpu_mtbf_hours * HOUR / gpus
    copy = volume.staged_per_rank / facts.host_bandwidth
    write = write_seconds(volume, settings.storage, facts.devices_per_node)
    restart = settings.restart_seconds + write  # the read of the checkpoint at the write's bandwidth
    asynchronous = settings.asynchronous and volume.staged_per_rank <= facts.staging_capacity
    delta, lost, fewest_seconds = (copy, restart + write, write) if asynchronous else (copy + write, restart, 0.0)
    steps_in_run = max(1, round(ideal / step))
    fewest = min(steps_in_run, max(1, math.ceil(fewest_seconds / step)))
    cost = lambda interval: expected_seconds(ideal, interval, delta, lost, mtbf)  # noqa: E731
    steps = _whole_steps(optimal_interval(delta, mtbf), step, fewest, steps_in_run, cost)
    expected = cost(steps * step)
    return Goodput(ideal / expected, expected, steps * step, steps, delta, write, restart, mtbf, expected / mtbf,
                   gpus, asynchronous)


__all__ = ["CheckpointVolume", "Storage", "FailureSettings", "RankFacts", "Goodput", "checkpoint_volume",
           "write_seconds", "expected_seconds", "optimal_interval", "run_goodput", "DEFAULT_GPU_MTBF_HOURS",
           "DEFAULT_AGGREGATE_BANDWIDTH", "DEFAULT_NODE_BANDWIDTH", "DEFAULT_RESTART_SECONDS"]
