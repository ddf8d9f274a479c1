"""Data-parallel sync (gradients, ZeRO parameter gathers) and the optimizer step of one strategy, per device stage.

Every term is per step or per micro-batch on one device, before overlap; `DataParallelTerms.exposed` says how much
of it the stage's compute windows hide.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..schedules import default_schedule
from ..specs.device import ClusterSpec
from ..specs.model import ModelSpec
from ..specs.run import RunSpec
from ..specs.strategy import RecomputePlan, Strategy
from . import communication as comm
from .compute import memory_seconds
from .parameters import expert_data_parallel, stage_parameters

# How many of a stage's backward windows each data-parallel collective can hide behind (DataParallelTerms.exposed;
# the CP-SAT plan model reads the same numbers, solve/recompute.py). Megatron-LM --overlap-grad-reduce overlaps the
# gradient reduce-scatter with the last micro-batch's backward; --overlap-param-gather overlaps the distributed
# optimizer's gather with the next step's first forward, about half a backward (Narayanan et al. 2021 §5.1: backward
# ~ 2 x forward); ZeRO-3 prefetches each micro-batch's parameter gathers behind its forward and backward, 1.5
# backward windows (Rajbhandari et al. 2020 §7.2.2). docs/formulas.md §7.
GRADIENT_OVERLAP_WINDOWS = 1.0
PARAMETER_GATHER_OVERLAP_WINDOWS = 0.5
ZERO3_GATHER_OVERLAP_WINDOWS = 1.5


@dataclass(frozen=True)
class _Sync:
    """Data-parallel communication of one stage: gradient sync and parameter gathers, seconds."""

    gradients: float = 0.0  # once per step, after the last micro-batch's backward
    gather_per_step: float = 0.0  # distributed optimizer: updated parameters, before the next step's forward
    gather_per_microbatch: float = 0.0  # ZeRO-3: forward and backward gathers of every micro-batch

    def __add__(self, other: "_Sync") -> "_Sync":
        return _Sync(self.gradients + other.gradients, self.gather_per_step + other.gather_per_step,
                     self.gather_per_microbatch + other.gather_per_microbatch)


def _sync_seconds(cluster: ClusterSpec, run: RunSpec, zero: int, params: float, n: int, span: int) -> _Sync:
    """Communication of `params` local parameters over an n-rank data-parallel group (ZeRO §7.2 volumes)."""
    if n <= 1:
        return _Sync()
    bandwidth, latency = comm.link(cluster.device, span)
    grads, weights = params * run.grad_bytes, params * run.param_bytes
    if zero == 0:
        return _Sync(gradients=comm.all_reduce_seconds(grads, n, bandwidth, latency))  # 2 Psi
    reduce = comm.reduce_scatter_seconds(grads, n, bandwidth, latency)
    gather = comm.all_gather_seconds(weights, n, bandwidth, latency)
    if zero == 3:
        return _Sync(gradients=reduce, gather_per_microbatch=2 * gather)  # forward and backward gathers
    return _Sync(gradients=reduce, gather_per_step=gather)  # Megatron distributed optimizer


def _optimizer_bytes_per_parameter(run: RunSpec) -> float:
    """Adam step + grad-norm clipping: read param, grad and fp32 state, write param and state, read grad for norm."""
    return 2 * (run.param_bytes + run.optimizer_state_bytes) + 2 * run.grad_bytes


@dataclass(frozen=True)
class DataParallelTerms:
    """One device stage's data-parallel work per step, before overlap (seconds)."""

    gradients: float  # once per step, after the last micro-batch's backward
    gather_per_step: float  # distributed optimizer: updated parameters, before the next step's forward
    gather_per_microbatch: float  # ZeRO-3: forward and backward gathers of every micro-batch
    last_bucket: float  # share of the sync that waits for the stage's last layer and never overlaps
    optimizer: float  # Adam step and gradient clipping over the local (sharded) states

    def exposed(self, window: float, mbn: int) -> float:
        """Communication left after overlapping with `window` seconds of this stage's backward (Megatron
        --overlap-grad-reduce / --overlap-param-gather): gradients behind the window, the parameter gather behind
        the next step's first forward (about half a backward), ZeRO-3 gathers prefetched behind each micro-batch's
        forward and backward (1.5 windows); the last bucket's share is always exposed."""
        return (_exposed(self.gradients, GRADIENT_OVERLAP_WINDOWS * window, self.last_bucket)
                + _exposed(self.gather_per_step, PARAMETER_GATHER_OVERLAP_WINDOWS * window, self.last_bucket)
                + mbn * _exposed(self.gather_per_microbatch, ZERO3_GATHER_OVERLAP_WINDOWS * window, self.last_bucket))


def data_parallel_terms(model: ModelSpec, cluster: ClusterSpec, run: RunSpec,
                        strategy: Strategy) -> tuple[DataParallelTerms, ...]:
    """Per device stage: its data-parallel sync and optimizer terms. Expert parameters sync over the
    expert-data-parallel group, the rest over data x context parallel ranks. Depends only on where parameters sit
    and how ZeRO shards them, so it is cached on those fields."""
    s = strategy
    return _data_parallel_terms(model, cluster, run, s.pp, s.vpp, s.layers_per_stage, s.tp, s.cp, s.dp, s.ep, s.etp,
                                s.zero)


@lru_cache(maxsize=65536)
def _data_parallel_terms(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, pp: int, vpp: int,
                         layers_per_stage: tuple[int, ...], tp: int, cp: int, dp: int, ep: int, etp: int,
                         zero: int) -> tuple[DataParallelTerms, ...]:
    s = Strategy.trusted(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, vpp=vpp, mbs=1, mbn=1, zero=zero, sp=False,
                         schedule=default_schedule(vpp), recompute=RecomputePlan(),
                         layers_per_stage=layers_per_stage)
    dense_group = s.dp * s.cp
    dense_span = comm.group_span(("cp", "dp"), {"tp": s.tp, "cp": s.cp, "dp": s.dp})
    edp = expert_data_parallel(s)
    expert_span = comm.group_span(("edp",), {"etp": s.etp, "ep": s.ep, "edp": edp}, comm.EXPERT_RANK_ORDER)
    out = []
    for params in stage_parameters(model, s):
        local_dense, local_expert, layers = params.dense, params.expert, params.layers
        sync = (_sync_seconds(cluster, run, s.zero, local_dense, dense_group, dense_span)
                + _sync_seconds(cluster, run, s.zero, local_expert, edp, expert_span))
        sharded = local_dense / dense_group + local_expert / edp if s.zero >= 1 else local_dense + local_expert
        optimizer = memory_seconds(sharded * _optimizer_bytes_per_parameter(run), cluster.device)
        out.append(DataParallelTerms(sync.gradients, sync.gather_per_step, sync.gather_per_microbatch,
                                     1.0 / max(layers, 1), optimizer))
    return tuple(out)


def data_parallel_seconds(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, strategy: Strategy,
                          overlap_windows) -> tuple[float, float]:
    """(exposed DP/ZeRO communication, optimizer step): the worst device stage of each. Each stage's sync overlaps
    its own last micro-batch backward, `overlap_windows[stage]` seconds (one number: the same for every stage)."""
    terms = data_parallel_terms(model, cluster, run, strategy)
    windows = overlap_windows if isinstance(overlap_windows, (list, tuple)) else [overlap_windows] * len(terms)
    return (max(t.exposed(w, strategy.mbn) for t, w in zip(terms, windows)), max(t.optimizer for t in terms))


def _exposed(seconds: float, window: float, last_bucket: float) -> float:
    """Communication not hidden behind `window` seconds of compute; the last bucket's share never is."""
    return max(seconds - window, seconds * last_bucket)



__all__ = ["DataParallelTerms", "data_parallel_terms", "data_parallel_seconds", "GRADIENT_OVERLAP_WINDOWS",
           "PARAMETER_GATHER_OVERLAP_WINDOWS", "ZERO3_GATHER_OVERLAP_WINDOWS"]
