"""Data-parallel sync (gradients, ZeRO parameter gathers) and the optimizer step of one strategy, per device stage.

Which collectives run every micro-batch and which once per step is the trainer's and the run's choice
(trainers.data_parallel_sync). Every term here is one collective on one device, before overlap;
`DataParallelTerms.exposed` says how much of a step's worth of them the stage's compute windows hide.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple
from functools import lru_cache

from ..schedules import default_schedule
from ..specs.device import ClusterSpec
from ..specs.model import ModelSpec
from ..specs.run import FP32_BYTES, RunSpec
from ..specs.strategy import RecomputePlan, Strategy
from . import communication as comm
from .compute import memory_seconds
from .host_link import host_copy_bandwidth
from .keys import PlacementKey
from .overlap import beside_seconds, sm_held
from .parameters import expert_data_parallel, optimizer_shard, stage_parameters
from .step_costs import step_cost_seconds
from .trainers import data_parallel_sync, fsdp_version

# A collective hides behind the compute it overlaps, and all data-parallel collectives of one window share the device's
# one link, so their sum hides behind it (docs/formulas.md §7); HSDP's all-reduce across replicas under PyTorch FSDP
# runs on its own stream and link beside the shard group's (DataParallelTerms.sync_window, §7.3). Gradient syncs and
# ZeRO-3's backward re-gathers overlap a micro-batch's backward (Megatron --overlap-grad-reduce; FSDP2 and ZeRO-3
# backward prefetch); parameter gathers for a forward (ZeRO-3 every micro-batch; ZeRO-1/2 once per step, before the next
# step's first forward: Megatron --overlap-param-gather) overlap that forward. A window is the wall time of the pass on
# the stage, its exposed TP/CP/EP communication included (the DP link is idle-free then too), so more compute never
# hides more than it adds: a step never gets shorter when work is added.
# Hiding is not free: NCCL runs one CTA per channel, each holding a whole SM that compute kernels cannot share
# ("NCCL CTAs won't share an SM with compute kernels"), and uses the fewest SMs that reach the platform's bandwidth,
# 16 on a DGX with 8 NICs (NVIDIA's S. Jeaugey, NVIDIA/nccl issue #689). While a collective runs the compute beside
# it gets the other SMs: a window W with C seconds of collectives lasts max(C, W + C x n/S), so at least C x n/S of
# them shows (overlap.sm_held and overlap.beside_seconds, as TE's userbuffers and the EP all-to-alls are priced,
# docs/formulas.md §7.1); the last bucket, which has no
# compute beside it, shows whole on top of that (DataParallelTerms.unhidden). Unvalidated as a separate term: no
# measured pair of runs differs by the overlap alone.
NCCL_SMS = 16
# A collective also takes HBM bandwidth from the compute beside it: what arrives over the link is stored to memory
# and read back, "at least 2x" the link rate, 3x with the reads and writes of the user buffers (NVIDIA's S. Jeaugey,
# NVIDIA/nccl issue #1428, answering an A100 profile whose GEMMs ran 1.18 -> 2.08 ms and attention 0.18 -> 0.33 ms
# beside an all-gather). Memory-bound kernels beside a ring at bandwidth B then lose 2B/HBM of their speed,
# compute-bound ones the SMs above; the window's split between the two is not tracked, so it loses the larger
# share (DataParallelTerms.hbm_share). Its cost, X x 2B/HBM = 2 x bytes / HBM, is the collective's bytes through
# HBM, whatever the link. Below the profile's slowdowns (1.8x): unvalidated as a separate term.
NCCL_HBM_PASSES = 2


class Windows(NamedTuple):
    """One micro-batch's forward and backward wall time on a device stage, seconds (estimate.layer_time.LayerTime)."""

    forward: float
    backward: float


@dataclass(frozen=True)
class DataParallelTerms:
    """One device stage's data-parallel work, before overlap (seconds)."""

    gradients: float  # one gradient sync: all-reduce (ZeRO-0) or reduce-scatter
    grads_per_microbatch: bool  # after every micro-batch's backward, else once, after the last
    backward_gather: float  # ZeRO-3 re-gathering the parameters for each micro-batch's backward, else 0
    forward_gather: float  # one gather of the parameters before a forward (0 with ZeRO-0)
    gathers_per_microbatch: bool  # before every micro-batch's forward, else once per step
    last_bucket: float  # share of a window's sync that waits for the stage's last layer and never overlaps
    optimizer: float  # Adam step and gradient clipping over the local (sharded) states, and the step's fixed costs
    step_costs: float = 0.0  # the share of `optimizer` that is the step's fixed costs (estimate/step_costs.py)
    sm_share: float = 0.0  # the device's SMs NCCL's kernels hold while a collective runs (sm_held of NCCL_SMS)
    hbm_share: float = 0.0  # the HBM bandwidth a collective's traffic takes (NCCL_HBM_PASSES x its ring's / HBM)
    microbatch_passes: float = 0.0  # FSDP's passes over the stage's gradients every micro-batch (gradient_pass_bytes)
    sync_passes: float = 0.0  # FSDP's passes over the stage's gradients before every gradient sync
    across: float = 0.0  # HSDP: the replicas' all-reduce of one sync on its own link beside `gradients`, else 0
    across_share: float = 0.0  # the SMs or HBM bandwidth that all-reduce takes from the compute beside it

    def gradient_passes(self, mbn: int) -> float:
        """FSDP's passes over the gradients in a step of `mbn` micro-batches, seconds: never hidden (they take the
        HBM bandwidth the backward beside them needs; gradient_pass_bytes)."""
        return mbn * self.microbatch_passes + (mbn if self.grads_per_microbatch else 1) * self.sync_passes

    def per_step(self, mbn: int) -> float:
        """What the stage adds to a step of `mbn` micro-batches besides its exposed collectives: the optimizer step,
        the step's fixed costs and FSDP's gradient passes (the plan model's `optimizer` term prices the same)."""
        return self.optimizer + self.gradient_passes(mbn)

    @property
    def unhidden(self) -> float:
        """The share of a window's collectives that shows however long the window: the last bucket's, which runs
        with no compute beside it (FSDP's first all-gather of a forward, the last layer's re-gather opening a
        backward and the first layer's reduce-scatter closing it), plus what the compute loses to the other buckets
        while they run beside it, the SMs they hold or the HBM bandwidth they take, whichever is more:
        b + (1 - b) x c. Both at once, not the larger (docs/formulas.md §7).
        exposed() = b X + max((1 - b) X - W, (1 - b) X c) = max(X - W, X x unhidden)."""
        return self.last_bucket + (1.0 - self.last_bucket) * max(self.sm_share, self.hbm_share)

    def windows(self, mbn: int) -> tuple[tuple[float, int, str], ...]:
        """(seconds of communication in one window, such windows per step, which pass the window is: "backward" or
        "forward"): backward windows carrying a gradient sync (and ZeRO-3's backward gather), backward windows
        carrying only that gather, forward windows carrying a parameter gather."""
        syncs = mbn if self.grads_per_microbatch else 1
        return ((self.sync_window(), syncs, "backward"),
                (self.backward_gather, mbn - syncs, "backward"),
                (self.forward_gather, mbn if self.gathers_per_microbatch else 1, "forward"))

    def sync_window(self) -> float:
        """Seconds of communication in a backward window that carries a gradient sync. On one link (the usual case,
        and HSDP under Megatron FSDP or with the shard group across domains) the sum of the window's collectives.
        HSDP under PyTorch FSDP (`across` > 0) runs the replicas' all-reduce on its own stream and process group, on
        the NICs, beside the shard group's reduce-scatter and re-gather on the scale-up link (FSDP1
        `_runtime_utils.py` `_reduce_grad`: `state._all_reduce_stream`, `state._inter_node_pg`, pytorch/pytorch
        #106080, in the nightlies after torch 2.2 that fms-fsdp ran and in torch 2.13; FSDP2 `foreach_reduce`'s
        `all_reduce_stream`): two queues, each behind the backward. Where the all-reduce's queue A is the longer by
        enough that its share of the compute covers what the shard group's S takes beside it, A (c - c_A) >= S c
        (c, c_A: the two rings' SM or HBM shares), the window holds A plus the last layer's S (that all-reduce waits
        for its reduce-scatter): A + b S; else, conservatively, the sum. Chosen per layout, not per layer count, so
        the window stays affine in the stage's layers as the plan model prices it. docs/formulas.md §7.3."""
        shard = self.gradients + self.backward_gather
        share = max(self.sm_share, self.hbm_share)
        if self.across <= 0 or self.across * (share - self.across_share) < shard * share:
            return shard + self.across
        return self.across + self.last_bucket * shard

    def exposed(self, windows: Windows, mbn: int) -> float:
        """Communication per step left after overlap, when a micro-batch's passes on this stage take `windows`
        seconds: in each window, what exceeds it, and never less than the unhidden share."""
        return self.exposed_at(windows.forward, windows.backward, mbn)

    def exposed_at(self, forward: float, backward: float, mbn: int) -> float:
        """exposed() with windows of `forward` and `backward` seconds (for hot loops: no Windows built; a loop
        over many windows of one stage takes `exposure` once)."""
        (grads, syncs, _), (gathers, others, _), (params, before, _) = self.windows(mbn)  # backward, backward, forward
        last = self.unhidden
        return (syncs * _exposed(grads, backward, last) + others * _exposed(gathers, backward, last)
                + before * _exposed(params, forward, last))

    def exposure(self, mbn: int) -> "Exposure":
        """What exposed() reads of these terms in a step of `mbn` micro-batches, computed once: callers that try
        many windows on one stage (the solver's bounds) call Exposure.at for each."""
        (grads, syncs, _), (gathers, others, _), (params, before, _) = self.windows(mbn)  # backward, backward, forward
        return Exposure(grads, syncs, gathers, others, params, before, self.unhidden)


class Exposure(NamedTuple):
    """A stage's collectives per window for one step (DataParallelTerms.exposure): seconds of one backward window's
    gradient sync and its count, of one backward window's gather alone and its count, of one forward gather and its
    count, and the share that never hides (DataParallelTerms.unhidden)."""

    grads: float
    syncs: int
    gathers: float
    others: int
    params: float
    before: int
    last: float

    def at(self, forward: float, backward: float) -> float:
        """DataParallelTerms.exposed_at with windows of `forward` and `backward` seconds (the same sum)."""
        last = self.last
        return (self.syncs * _exposed(self.grads, backward, last) + self.others * _exposed(self.gathers, backward, last)
                + self.before * _exposed(self.params, forward, last))


def _optimizer_bytes_per_parameter(run: RunSpec) -> float:
    """Adam step + grad-norm clipping: read param, grad and fp32 state, write param and state, read grad for norm."""
    return 2 * (run.param_bytes + run.optimizer_state_bytes) + 2 * run.grad_bytes


# Host-side optimizer (Megatron HybridDeviceOptimizer, offload fraction 1, param_update_in_fp32): the host keeps FP32
# master weights, the moments and an FP32 copy of the gradients; it sends FP32 parameters back.
HOST_GRAD_BYTES = FP32_BYTES
HOST_PARAM_BYTES = FP32_BYTES


def host_optimizer_bytes_per_parameter(run: RunSpec) -> float:
    """Host memory per local (sharded) parameter with the optimizer offloaded: its states and the gradient copy."""
    return run.optimizer_state_bytes + HOST_GRAD_BYTES


def host_optimizer_seconds(run: RunSpec, cluster: ClusterSpec, sharded: float) -> float:
    """The optimizer step on the host for `sharded` local parameters (docs/formulas.md §6.1): gradients down the
    host link, Adam over the host copies at the device's share of its socket's memory bandwidth (read and write the
    states, read the gradient), parameters back up; one after the other (Megatron's default,
    --overlap-cpu-optimizer-d2h-h2d off). Every device of the node copies at once, after the gradient sync and
    before the parameter gather, so the links are shared with the other devices but not with the NIC
    (estimate/host_link.py)."""
    link = sharded * (run.grad_bytes + HOST_PARAM_BYTES) / host_copy_bandwidth(cluster, network_busy=False)
    adam = sharded * (2 * run.optimizer_state_bytes + HOST_GRAD_BYTES) / cluster.device.host_memory_bandwidth
    return link + adam


class Group(NamedTuple):
    """A data-parallel group: its ranks and its ring's link (bandwidth bytes/s, latency s)."""

    ranks: int
    link: tuple[float, float]


NO_GROUP = Group(1, (1.0, 0.0))


def _collectives(run: RunSpec, zero: int, params: float, units: int, group: Group,
                 replicas: Group = NO_GROUP) -> tuple[float, float, float]:
    """(gradient sync over `group`, all-reduce across `replicas`, parameter gather) of `params` local parameters in
    `units` collectives each over a data-parallel `group`, seconds (ZeRO §7.2 volumes: all-reduce 2 Psi;
    reduce-scatter and all-gather Psi each; each collective pays its ring's latency); none without parameters (a
    dense model's expert group). HSDP (`replicas` > 1, docs/formulas.md §7.3): the sharded gradients are then
    all-reduced over the replicas, the rank's shard of them (FSDP1 HYBRID_SHARD and FSDP2 HSDP: reduce-scatter,
    then all-reduce across the replicate dimension)."""
    if group.ranks * replicas.ranks <= 1 or params <= 0:
        return 0.0, 0.0, 0.0
    n, (bandwidth, latency) = group
    # fp8: the parameters are gathered in FP8 (Megatron --fp8-param-gather; docs/formulas.md §3.1), half the volume
    grads, weights = params * run.grad_bytes / units, params * run.param_gather_bytes / units
    across = units * comm.all_reduce_seconds(grads / n, replicas.ranks, *replicas.link)
    if zero == 0:
        return units * comm.all_reduce_seconds(grads, n, bandwidth, latency), across, 0.0
    return (units * comm.reduce_scatter_seconds(grads, n, bandwidth, latency), across,
            units * comm.all_gather_seconds(weights, n, bandwidth, latency))


def data_parallel_terms(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, strategy: Strategy,
                        stages: tuple[int, ...] | None = None) -> tuple[DataParallelTerms, ...]:
    """Per device stage (of `stages` only, in that order, when given): its data-parallel sync and optimizer terms.
    Expert parameters sync over the expert-data-parallel group, the rest over data x context parallel ranks.
    Depends only on where parameters sit and how ZeRO shards them, so it is cached on those fields."""
    s = strategy
    return _data_parallel_terms(model, cluster, run, PlacementKey.of(s), s.zero, s.optimizer_offload, stages)


class _Placement(NamedTuple):
    """Where a strategy's parameters sit, whatever its ZeRO stage: a ZeRO-0 strategy of those degrees, each device
    stage's parameters and the data-parallel groups: the dense parameters' (under HSDP its shard group, and the
    replicas), the experts'."""

    strategy: Strategy
    stages: tuple
    dense: Group
    replicas: Group
    expert: Group
    devices: int  # of the whole job
    separate_links: bool  # HSDP with the shard group inside a scale-up domain and the replicas across domains


@lru_cache(maxsize=16384)
def _placement(model: ModelSpec, cluster: ClusterSpec, key: PlacementKey) -> _Placement:
    """_Placement, shared by the ZeRO stages (the solver's bounds ask for each of them)."""
    pp, vpp, layers_per_stage, tp, cp, dp, ep, etp, schedule, dp_shard = key
    # the schedule places parameters (a mirrored one holds two stages' worth: their gradients sync too)
    s = Strategy.trusted(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, vpp=vpp, mbs=1, mbn=1, zero=0, sp=False,
                         schedule=schedule or default_schedule(vpp), recompute=RecomputePlan(),
                         layers_per_stage=layers_per_stage, cp_comm="p2p", optimizer_offload=False, dp_shard=dp_shard)
    edp = expert_data_parallel(s)
    # HSDP's mesh (torchtitan ParallelDims: dp_replicate outside dp_shard outside cp): the shard group is consecutive
    shard, replicas = s.shard_ranks, s.dp_replicate
    degrees = {"tp": tp, "cp": cp, "dp": shard, "replicas": replicas}
    dense = Group(shard * cp, comm.ring_link(cluster, ("cp", "dp"), degrees, HSDP_RANK_ORDER))
    across = Group(replicas, comm.ring_link(cluster, ("replicas",), degrees, HSDP_RANK_ORDER))
    expert = Group(edp, comm.ring_link(cluster, ("edp",), {"etp": etp, "ep": ep, "edp": edp}, comm.EXPERT_RANK_ORDER))
    separate = replicas > 1 and comm.in_domain(cluster, comm.group_span(("cp", "dp"), degrees, HSDP_RANK_ORDER)) \
        and not comm.in_domain(cluster, comm.group_span(("replicas",), degrees, HSDP_RANK_ORDER))
    return _Placement(s, stage_parameters(model, s), dense, across, expert, s.devices, separate)


# the data-parallel ranks split into HSDP's shard group (inner) and its replicas (outer); without HSDP one replica
HSDP_RANK_ORDER = ("tp", "cp", "dp", "replicas", "pp")


@lru_cache(maxsize=65536)
def _data_parallel_terms(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, placement: PlacementKey, zero: int,
                         optimizer_offload: bool, stages: tuple[int, ...] | None) -> tuple[DataParallelTerms, ...]:
    indices = range(len(_placement(model, cluster, placement).stages)) if stages is None else stages
    return tuple(_stage_terms(model, cluster, run, placement, zero, optimizer_offload, i) for i in indices)


@lru_cache(maxsize=4096)
def _sharded(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, placement: PlacementKey, zero: int):
    """(_Placement, its ZeRO-0 strategy under `zero`, the trainer's sync): what every stage's terms share."""
    place = _placement(model, cluster, placement)
    return place, place.strategy.with_zero(zero), data_parallel_sync(run, zero, placement.pp)


@lru_cache(maxsize=262144)
def _stage_terms(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, placement: PlacementKey, zero: int,
                 optimizer_offload: bool, index: int) -> DataParallelTerms:
    """Device stage `index`'s DataParallelTerms, cached per stage: the solver's bounds ask for the end stages of a
    layout, then for every stage of its items (the same terms)."""
    place, sharding, sync = _sharded(model, cluster, run, placement, zero)
    params = place.stages[index]
    # ZeRO-3 gathers and reduces per layer (FSDP2 fully_shard per transformer block, torchtitan apply_fsdp;
    # DeepSpeed ZeRO-3 per module): one collective per layer, each with its latency; else one per stage
    units = max(params.layers, 1) if zero >= 3 else 1
    dense = _collectives(run, zero, params.dense, units, place.dense, place.replicas)
    expert = _collectives(run, zero, params.expert, units, place.expert)
    # HSDP's all-reduce beside the shard group's collectives where it runs on its own stream and link
    # (DataParallelTerms.sync_window), else in their sum
    across = dense[1] if place.separate_links and _pytorch_fsdp(run) else 0.0
    gradients, gather = dense[0] + dense[1] - across + expert[0], dense[2] + expert[2]
    sharded = optimizer_shard(sharding, params)
    fixed = step_cost_seconds(run, cluster, params.dense + params.expert, _cast_weights(model, run, place, index),
                              place.devices)
    reduced = (params.dense if place.dense.ranks * place.replicas.ranks > 1 else 0) + (
        params.expert if place.expert.ranks > 1 else 0)
    every_microbatch, every_sync = gradient_pass_bytes(run, zero)
    update = (host_optimizer_seconds(run, cluster, sharded) if optimizer_offload
              else memory_seconds(sharded * _optimizer_bytes_per_parameter(run), cluster.device))
    return DataParallelTerms(
        gradients=gradients, grads_per_microbatch=sync.grads_per_microbatch,
        backward_gather=gather if sync.gather == "forward-backward" else 0.0, forward_gather=gather,
        gathers_per_microbatch=sync.gather in ("microbatch", "forward-backward"),
        last_bucket=1.0 / max(params.layers, 1), sm_share=sm_held(NCCL_SMS, cluster.device.sm_count),
        hbm_share=_hbm_share(cluster, place, params),
        optimizer=update + fixed, step_costs=fixed,
        microbatch_passes=memory_seconds(reduced * every_microbatch, cluster.device),
        sync_passes=memory_seconds(reduced * every_sync, cluster.device), across=across,
        across_share=_across_share(cluster, place) if across else 0.0)


def _cast_weights(model: ModelSpec, run: RunSpec, place: _Placement, index: int) -> float:
    """The FP8 GEMMs' weights on one device of stage `index` (StageParameters.fp8_weights, the run's BF16 layers
    left out): what fp8.step_weight_cast_seconds casts once a step (0 in a 16-bit run)."""
    if not run.fp8:
        return 0.0
    return stage_parameters(model, place.strategy, run.bf16_layers)[index].fp8_weights


def _pytorch_fsdp(run: RunSpec) -> bool:
    """Whether the run's FSDP is PyTorch's (fsdp1 or fsdp2: the HSDP all-reduce on its own stream), not Megatron's."""
    return fsdp_version(run) in ("fsdp1", "fsdp2")


def _across_share(cluster: ClusterSpec, place: "_Placement") -> float:
    """What HSDP's all-reduce across the replicas takes from the compute beside it while it runs: its NCCL SMs or
    NCCL_HBM_PASSES x its own ring's bandwidth of HBM, whichever is more (docs/formulas.md §7)."""
    hbm = NCCL_HBM_PASSES * place.replicas.link[0] / cluster.device.hbm_bandwidth
    return min(1.0, max(sm_held(NCCL_SMS, cluster.device.sm_count), hbm))


def gradient_pass_bytes(run: RunSpec, zero: int) -> tuple[int, int]:
    """HBM bytes per local parameter that the run's FSDP (RunSpec.fsdp_version, "trainer": TrainerBehaviour.fsdp)
    moves over the unsharded gradients under ZeRO-2/3, in the parameter dtype p and the reduce dtype g: (every
    micro-batch, before every reduce-scatter); docs/formulas.md §7.3.
    fsdp1, torch 2.0-2.1 torch/distributed/fsdp: the unit's parameters are views of one flat parameter
    (flat_param.py FlatParamHandle._get_unflat_views: torch.split), so autograd concatenates their gradients into the
    flat gradient every micro-batch (read and write, 2p, on the compute stream); before each reduction
    _runtime_utils.py _post_backward_hook casts it to the reduce dtype when that differs (flat_param.grad.to
    (handle._reduce_dtype): p + g) and _reduce_grad divides it in place by the pre-divide factor (_div_if_needed; the
    default hook's _pre_divide in 2.0: 2g), on the post-backward stream beside the next layers' backward.
    fsdp2, torch 2.4+ _fully_shard/_fsdp_collectives.py foreach_reduce: the per-parameter gradients are copied into
    the reduce-scatter input in the reduce dtype (foreach_reduce_scatter_copy_in, torch._chunk_cat: p + g); no
    divide pass for fp32 or bf16 (ReduceOp.AVG: pytorch/pytorch #120919, #123362, before FSDP2's first release).
    Megatron's own (fsdp "none"): the weight-gradient GEMMs accumulate into the main-grad buffer it reduces: none.
    The passes over the 1/n shard after the reduction (post-divide, accumulation) are left out."""
    version = fsdp_version(run)
    p, g = run.param_bytes, run.grad_bytes
    if zero < 2 or version == "none":
        return 0, 0
    if version == "fsdp1":
        return 2 * p, (p + g if g != p else 0) + 2 * g
    return 0, p + g


class DataParallelTime(NamedTuple):
    """A step's data-parallel and optimizer time, seconds: the exposed collectives of the worst device stage, and
    the rest of the stage with the dearest DataParallelTerms.per_step; the four add up to what they add to the
    step."""

    communication: float  # exposed DP/ZeRO communication
    optimizer: float  # the optimizer's update of the local shard (on the device or the host)
    step_costs: float  # the step's fixed costs (estimate/step_costs.py) on the stage with the dearest optimizer
    gradient_passes: float  # FSDP's passes over the gradients (gradient_pass_bytes) on that stage


def data_parallel_seconds(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, strategy: Strategy,
                          overlap_windows: "list[Windows] | Windows") -> DataParallelTime:
    """DataParallelTime of `strategy`. `overlap_windows[stage]`: one micro-batch's forward and backward wall time on
    that stage (one Windows: the same for every stage)."""
    return data_parallel_time(data_parallel_terms(model, cluster, run, strategy), overlap_windows, strategy.mbn)


def data_parallel_time(terms: tuple[DataParallelTerms, ...], overlap_windows: "list[Windows] | Windows", mbn: int
                       ) -> DataParallelTime:
    """data_parallel_seconds from the strategy's DataParallelTerms (`terms`: the solver's exact tables take them
    once per ZeRO stage, for every SP setting and recompute option of an item: the terms do not depend on those)
    and its micro-batches `mbn`."""
    windows = [overlap_windows] * len(terms) if isinstance(overlap_windows, Windows) else overlap_windows
    dearest = max(terms, key=lambda t: t.per_step(mbn))
    return DataParallelTime(max(t.exposed(w, mbn) for t, w in zip(terms, windows)),
                            dearest.optimizer - dearest.step_costs, dearest.step_costs, dearest.gradient_passes(mbn))


def _hbm_share(cluster: ClusterSpec, place: _Placement, params) -> float:
    """The HBM bandwidth the stage's data-parallel collectives take while they run: NCCL_HBM_PASSES times the
    fastest ring among the groups that carry its parameters (the dense shard group, HSDP's replicas, the experts'),
    as a share of the device's HBM bandwidth."""
    groups = ([place.dense, place.replicas] if params.dense > 0 else []) + ([place.expert] if params.expert > 0
                                                                            else [])
    rings = [group.link[0] for group in groups if group.ranks > 1]
    return min(1.0, NCCL_HBM_PASSES * max(rings, default=0.0) / cluster.device.hbm_bandwidth)


def _exposed(seconds: float, window: float, unhidden: float) -> float:
    """Communication not hidden behind `window` seconds of compute; the `unhidden` share never is: what the pair
    (overlap.beside_seconds, the collectives holding `unhidden` of what the compute needs) takes beyond the window,
    max(seconds - window, seconds x unhidden)."""
    return beside_seconds(window, seconds, unhidden) - window


__all__ = ["DataParallelTerms", "DataParallelTime", "Exposure", "Windows", "data_parallel_terms",
           "data_parallel_seconds", "data_parallel_time", "gradient_pass_bytes"]
