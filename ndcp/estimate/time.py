"""Step time of one strategy: per-layer terms (cached), pipeline composition, data-parallel sync and optimizer.

Every per-layer term is for one micro-batch on one device and is exposed (not hidden behind other work) time.
The composition (`estimate_time`) only adds, multiplies and takes maxima of these terms, so the solver can build
CP-SAT coefficients from `layer_time`/`stage_extra_time` and `pipeline_seconds` works on numpy grids as well.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..specs.device import ClusterSpec
from ..specs.model import ModelSpec
from ..specs.run import RunSpec
from ..schedules import schedule_named
from ..specs.recompute import ATTENTION_CORE, LAYER_FORWARD, NO_RECOMPUTE, recompute_option
from ..specs.strategy import Strategy
from . import communication as comm
# cp_bytes: the context-parallel byte counts, read from here by tests/estimate/test_cp_comm.py
from .communication import cp_bytes, cp_comm_seconds  # noqa: F401
from ..specs.encoder import encoder_run, image_side
from .compute import (FLASH_BACKWARD_RATIO, attention_core_flops, elementwise_bytes, encoder_gemms, fp8_gemms,
                      layer_gemms, memory_seconds, model_flops_per_step, mtp_projection_gemm, output_layer_gemm,
                      total_flops)
from .data_parallel import Windows, data_parallel_seconds
from .fp8 import cast_bytes_per_element
from .gemm import attention_core_seconds, gemm_seconds, weight_gemm_seconds
from .layout import stage_mode_counts
from .rerun import MODULE_PIECES, LayerShape, rerun_cost
from .overlap import HIDDEN_KEYS, NO_OVERLAP, ep_overlapped, layer_overlaps, strategy_overlaps, tp_overlapped

LOSS_PASSES_FORWARD = 3  # fp32 logits: read for max, read for sum-exp, write softmax (vocab-parallel CE, Megatron)
LOSS_PASSES_BACKWARD = 2  # read softmax, write the logit gradient
LOSS_ALL_REDUCES = 3  # vocab-parallel cross entropy: max, sum-exp and target logit over TP (Megatron cross_entropy.py)


@dataclass(frozen=True)
class LayerTime:
    """One body layer (or a stage's extra work), one micro-batch, seconds on one device, exposed time; and the
    matmul FLOPs that work executes on the device (the HFU numerator: masked halves skipped, recompute and expert
    padding included)."""

    forward: float
    backward: float
    recompute: float
    tp_comm: float
    cp_comm: float
    ep_comm: float
    flops: float = 0.0
    backward_comm: float = 0.0  # the share of tp/cp/ep_comm that is exposed during the backward pass
    wgrad: float = 0.0  # the weight-gradient GEMMs within backward (what zero-bubble schedules defer, W)
    tp_hidden: float = 0.0  # TP communication overlapped with compute (not in tp_comm; estimate/overlap.py)
    ep_hidden: float = 0.0  # EP all-to-all overlapped with compute (not in ep_comm)

    @property
    def total(self) -> float:
        return self.forward + self.backward + self.recompute + self.tp_comm + self.cp_comm + self.ep_comm

    @property
    def forward_window(self) -> float:
        """Wall time of this work's forward pass (compute and its exposed communication): what a data-parallel
        collective on the other link can hide behind during the forward."""
        return self.forward + self.tp_comm + self.cp_comm + self.ep_comm - self.backward_comm

    @property
    def full_backward(self) -> float:
        """Input and weight gradients, recompute and the communication exposed in the backward (B of the
        pipeline schedules' tables)."""
        return self.backward + self.recompute + self.backward_comm

    @property
    def backward_window(self) -> float:
        """Wall time of this work's backward pass: backward, recompute and the communication exposed in it."""
        return self.backward + self.recompute + self.backward_comm

    def __add__(self, other: "LayerTime") -> "LayerTime":
        return LayerTime(self.forward + other.forward, self.backward + other.backward,
                         self.recompute + other.recompute, self.tp_comm + other.tp_comm,
                         self.cp_comm + other.cp_comm, self.ep_comm + other.ep_comm, self.flops + other.flops,
                         self.backward_comm + other.backward_comm, self.wgrad + other.wgrad,
                         self.tp_hidden + other.tp_hidden, self.ep_hidden + other.ep_hidden)

    def scaled(self, factor: float) -> "LayerTime":
        return LayerTime(self.forward * factor, self.backward * factor, self.recompute * factor,
                         self.tp_comm * factor, self.cp_comm * factor, self.ep_comm * factor, self.flops * factor,
                         self.backward_comm * factor, self.wgrad * factor, self.tp_hidden * factor,
                         self.ep_hidden * factor)


ZERO_TIME = LayerTime(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


def _tp_collective(cluster: ClusterSpec, nbytes: float, tp: int) -> float:
    """One Megatron TP all-reduce (or its SP reduce-scatter + all-gather pair: same volume, Korthikanti §4.2.2)."""
    bandwidth, latency = comm.link(cluster.device, comm.group_span(("tp",), {"tp": tp}))
    return comm.all_reduce_seconds(nbytes, tp, bandwidth, latency)


def _ep_all_to_all(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, tokens: float, tp: int, ep: int,
                   etp: int) -> float:
    """One token dispatch (or combine): top_k copies of each local token's hidden state, all-to-all over EP."""
    if ep <= 1:
        return 0.0
    nbytes = tokens * model.moe.top_k * model.hidden * run.activation_bytes * etp / tp
    bandwidth, latency = comm.link(cluster.device, comm.group_span(("ep",), {"etp": etp, "ep": ep},
                                                                   comm.EXPERT_RANK_ORDER))
    return comm.all_to_all_seconds(nbytes, ep, bandwidth, latency)


def layer_time(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, kind: str, mode: str, tp: int, cp: int,
               ep: int, etp: int, mbs: int, sp: bool, cp_comm: str = "p2p", hidden: frozenset = NO_OVERLAP
               ) -> LayerTime:
    """One body layer of `kind` under recompute `mode` (see _layer_time); a dense layer does not depend on ep/etp,
    so its cached terms are shared across them (nor on cp_comm without CP). `hidden`: the overlaps the strategy
    runs (estimate/overlap.py hidden_comms)."""
    if kind == "dense":
        ep = etp = 1
    if cp == 1:
        cp_comm = "p2p"
    return _layer_time(model, cluster, run, kind, mode, tp, cp, ep, etp, mbs, sp, cp_comm,
                       layer_overlaps(hidden, kind, mode))


@lru_cache(maxsize=65536)
def _layer_compute(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, kind: str, tp: int, cp: int, ep: int,
                   etp: int, mbs: int) -> tuple[float, ...]:
    """The GEMM work of one body layer for one micro-batch, shared by its SP, overlap and cp_comm variants: seconds
    of the weight GEMMs (one pass), their FLOPs, the FP8 casts forward and backward, the attention core forward and
    backward seconds, and the core's FLOPs."""
    device = cluster.device
    tokens = mbs * run.seq_len / cp
    gemms = layer_gemms(model, kind, tokens, tp, ep, etp)
    linear = weight_gemm_seconds(model, kind, gemms, tokens, device, run)
    cast_forward = cast_backward = 0.0
    if run.fp8:  # docs/formulas.md §3.1: weight GEMMs in FP8 but the router; casts at HBM bandwidth
        low = fp8_gemms(model, kind, gemms, tokens)
        per_element = cast_bytes_per_element(run, device)
        cast_forward = memory_seconds(per_element * sum((g.m + g.n) * g.k * g.count for g in low), device)
        cast_backward = memory_seconds(per_element * sum(g.m * g.n * g.count for g in low), device)
    core_flops = attention_core_flops(model, tokens, run.seq_len, tp, causal=run.flash_attention)
    core, core_backward = attention_core_seconds(core_flops, device, run.flash_attention)
    return linear, total_flops(gemms), cast_forward, cast_backward, core, core_backward, core_flops


@lru_cache(maxsize=131072)
def _layer_time(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, kind: str, mode: str, tp: int, cp: int,
                ep: int, etp: int, mbs: int, sp: bool, cp_comm: str = "p2p", hidden: frozenset = NO_OVERLAP
                ) -> LayerTime:
    """One body layer of `kind` under recompute `mode` for one micro-batch of mbs sequences of local length seq/cp.

    recompute: the mode's extra forward (full: the layer forward with its TP/CP/EP forward communication;
    selective: the attention core). tp_comm: 2 forward all-reduces (SP: reduce-scatter + all-gather, same volume)
    plus whatever of the 2 backward ones outlasts the weight-gradient GEMMs. cp_comm: the exposed part of
    the cp_comm variant's traffic (cp_comm_seconds). ep_comm: dispatch + combine all-to-alls, forward and backward
    (MoE only). wgrad: the weight-gradient GEMMs (one forward of the linear layers). `hidden` overlaps move TP or
    EP time from exposed to tp_hidden / ep_hidden (estimate/overlap.py)."""
    device, dtype = cluster.device, run.activation_bytes
    tokens, keys = mbs * run.seq_len / cp, run.seq_len
    flash = run.flash_attention
    linear, linear_flops, cast_forward, cast_backward, core, core_backward, core_flops = _layer_compute(
        model, cluster, run, kind, tp, cp, ep, etp, mbs)
    core_backward_flops = core_flops * (FLASH_BACKWARD_RATIO if flash else 2.0)
    executed = 3 * linear_flops + core_flops + core_backward_flops  # dgrad + wgrad per GEMM
    elementwise = memory_seconds(elementwise_bytes(model, kind, tokens, keys, tp, sp, flash, dtype), device)
    forward = linear + core + elementwise + cast_forward
    backward = 2.0 * (linear + elementwise) + core_backward + cast_backward  # dgrad + wgrad per GEMM (Narayanan §5.1)

    tp_forward = 2 * _tp_collective(cluster, tokens * model.hidden * dtype, tp) if tp > 1 else 0.0  # docs/formulas.md §7
    # backward: each input-gradient all-reduce runs behind its layer's weight-gradient GEMM (Megatron
    # LinearWithGradAccumulationAndAsyncCommunication), which costs one forward of the linear layers
    tp_backward = max(0.0, tp_forward - linear)
    tp_total = tp_forward + tp_backward
    if "tp" in hidden:
        tp_forward, tp_backward = tp_overlapped(tp_forward, linear)
    cp_forward, cp_backward = cp_comm_seconds(model, cluster, run, tokens, tp, cp, cp_comm, core, core_backward)
    a2a = _ep_all_to_all(model, cluster, run, tokens, tp, ep, etp) if kind == "moe" else 0.0
    ep_forward = ep_backward = 2 * a2a  # dispatch + combine each way
    if "ep" in hidden:
        ep_forward, ep_backward = ep_overlapped(4 * a2a, forward + backward)

    recompute = 0.0
    reruns = recompute_option(mode).reruns  # the forward pieces the recompute option re-runs (specs/recompute.py)
    for piece in reruns:
        if piece in MODULE_PIECES:  # Megatron-Core recompute modules (estimate/rerun.py)
            shape = LayerShape(kind, mode, tokens, tp, sp, ep, etp, tp_forward, ep_forward, cp, mbs, forward,
                               backward)
            seconds, flops = rerun_cost(model, cluster, run, shape, piece, reruns)
            recompute += seconds
            executed += flops
        elif piece == LAYER_FORWARD:
            recompute += forward + tp_forward + cp_forward + ep_forward
            executed += linear_flops + core_flops
        elif piece == ATTENTION_CORE:  # the core, and without flash attention its score-matrix elementwise passes
            executed += core_flops
            recompute += core + (0.0 if flash else memory_seconds(
                elementwise_bytes(model, kind, tokens, keys, tp, sp, flash, dtype)
                - elementwise_bytes(model, kind, tokens, keys, tp, sp, True, dtype), device))
        else:
            raise ValueError(f"no time model for recompute piece {piece!r}")
    tp_exposed = tp_forward + tp_backward
    return LayerTime(forward, backward, recompute, tp_exposed, cp_forward + cp_backward, ep_forward + ep_backward,
                     executed, tp_backward + cp_backward + ep_backward, linear, tp_total - tp_exposed,
                     4 * a2a - ep_forward - ep_backward)


def _embedding_time(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, tokens: float, tp: int,
                    sp: bool) -> LayerTime:
    """Vocab-parallel embedding lookup (memory-bound) and its output all-reduce (reduce-scatter with SP)."""
    device = cluster.device
    rows = memory_seconds(tokens * model.hidden * run.activation_bytes, device)
    bandwidth, latency = comm.link(device, tp)
    nbytes = tokens * model.hidden * run.activation_bytes
    collective = comm.reduce_scatter_seconds if sp else comm.all_reduce_seconds
    return LayerTime(rows, rows, 0.0, collective(nbytes, tp, bandwidth, latency), 0.0, 0.0)


def _encoder_time(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, tp: int, mbs: int, sp: bool) -> LayerTime:
    """The vision encoder and projector, on the stage that embeds (docs/models.md §5): mbs x images_per_sample
    images through its bidirectional layers (TP and SP as the language model's; CP does not split an image, no
    recompute), and its patch-embedding and projector GEMMs."""
    images_run = encoder_run(model.encoder, run)
    if images_run is None:
        return ZERO_TIME
    images = mbs * run.images_per_sample
    layers = layer_time(model.encoder_model, cluster, images_run, "dense", NO_RECOMPUTE, tp, 1, 1, 1, images, sp)
    gemms = encoder_gemms(model, images, image_side(model.encoder, run), tp)
    linear = gemm_seconds(gemms, cluster.device, run.activation_bytes)
    return layers.scaled(model.encoder.layers) + LayerTime(linear, 2 * linear, 0.0, 0.0, 0.0, 0.0,
                                                           3 * total_flops(gemms), wgrad=linear)


@lru_cache(maxsize=65536)  # shared by the MTP variants (ep, etp, overlaps) of _stage_extra_time
def _output_head_time(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, tokens: float, tp: int,
                      sp: bool) -> LayerTime:
    """Final norm, vocab-parallel output GEMM and fp32 cross-entropy loss (memory-bound)."""
    device, dtype = cluster.device, run.activation_bytes
    norm_tokens = tokens / tp if sp else tokens
    norm = memory_seconds(2 * norm_tokens * model.hidden * dtype, device)
    logits_gemm = output_layer_gemm(model, tokens, tp)
    logits = gemm_seconds((logits_gemm,), device, dtype)
    loss_bytes = tokens * model.vocab / tp * 4
    forward = norm + logits + memory_seconds(LOSS_PASSES_FORWARD * loss_bytes, device)
    backward = 2 * (norm + logits) + memory_seconds(LOSS_PASSES_BACKWARD * loss_bytes, device)
    tp_comm = 0.0
    if tp > 1:
        bandwidth, latency = comm.link(device, tp)
        tp_comm = (_tp_collective(cluster, tokens * model.hidden * dtype, tp)
                   + LOSS_ALL_REDUCES * comm.all_reduce_seconds(tokens * 4, tp, bandwidth, latency))
    return LayerTime(forward, backward, 0.0, tp_comm, 0.0, 0.0, 3 * logits_gemm.flops, wgrad=logits)


def _mtp_time(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, tp: int, cp: int, mbs: int, sp: bool, ep: int,
              etp: int, cp_comm: str = "p2p", hidden: frozenset = NO_OVERLAP) -> LayerTime:
    """All MTP modules: 2h->h projection, one transformer layer and the shared output head each (DeepSeek-V3 §2.2)."""
    if not model.mtp_depth:
        return ZERO_TIME
    tokens = mbs * run.seq_len / cp
    projection_gemm = mtp_projection_gemm(model, tokens)
    projection = gemm_seconds((projection_gemm,), cluster.device, run.activation_bytes) / tp
    block = (LayerTime(projection, 2 * projection, 0.0, 0.0, 0.0, 0.0, 3 * projection_gemm.flops / tp,
                       wgrad=projection)
             + layer_time(model, cluster, run, model.mtp_layer_kind, NO_RECOMPUTE, tp, cp, ep, etp, mbs, sp, cp_comm,
                          hidden)
             + _output_head_time(model, cluster, run, tokens, tp, sp))
    return block.scaled(model.mtp_depth)


def stage_extra_time(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, role: str, tp: int, cp: int, mbs: int,
                     sp: bool, *, ep: int = 1, etp: int = 1, cp_comm: str = "p2p", hidden: frozenset = NO_OVERLAP
                     ) -> LayerTime:
    """Work outside the body layers: "first" = embedding; "last" = final norm, output layer, loss and MTP modules;
    "only" (pp = 1) = both; anything else = nothing. ep/etp (and the overlaps `hidden`) shape the MTP module's MoE
    layer (only)."""
    if role == "only":
        return (stage_extra_time(model, cluster, run, "first", tp, cp, mbs, sp, ep=ep, etp=etp, cp_comm=cp_comm)
                + stage_extra_time(model, cluster, run, "last", tp, cp, mbs, sp, ep=ep, etp=etp, cp_comm=cp_comm,
                                   hidden=hidden))
    if role not in ("first", "last"):
        return ZERO_TIME
    if not model.mtp_depth or role == "first":
        ep, etp, hidden = 1, 1, NO_OVERLAP  # nothing else depends on them: share the cached terms
    else:  # the MTP layer's own overlaps (as _mtp_time's layer_time reads them): the others change nothing here
        hidden = layer_overlaps(hidden, model.mtp_layer_kind, NO_RECOMPUTE)
    if not model.mtp_depth or cp == 1:
        cp_comm = "p2p"
    return _stage_extra_time(model, cluster, run, role, tp, cp, mbs, sp, ep, etp, cp_comm, hidden)


@lru_cache(maxsize=65536)
def _stage_extra_time(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, role: str, tp: int, cp: int, mbs: int,
                      sp: bool, ep: int, etp: int, cp_comm: str = "p2p", hidden: frozenset = NO_OVERLAP) -> LayerTime:
    tokens = mbs * run.seq_len / cp
    if role == "first":
        return _embedding_time(model, cluster, run, tokens, tp, sp) + _encoder_time(model, cluster, run, tp, mbs, sp)
    return _output_head_time(model, cluster, run, tokens, tp, sp) + _mtp_time(model, cluster, run, tp, cp, mbs, sp,
                                                                             ep, etp, cp_comm, hidden)


def stage_extra(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, schedule: str, stage: int, pp: int, tp: int,
                cp: int, mbs: int, sp: bool, *, ep: int = 1, etp: int = 1, cp_comm: str = "p2p",
                hidden: frozenset = NO_OVERLAP) -> LayerTime:
    """One micro-batch's work outside the body layers on device stage `stage`: the shares of the roles the
    schedule gives it (Schedule.extra_roles: the first stage embeds, the last computes the loss, unless the
    schedule places them otherwise)."""
    total = ZERO_TIME
    for role, share in schedule_named(schedule).extra_roles(stage, pp):
        part = stage_extra_time(model, cluster, run, role, tp, cp, mbs, sp, ep=ep, etp=etp, cp_comm=cp_comm,
                                hidden=hidden)
        total = total + (part if share == 1 else part.scaled(share))
    return total


def p2p_seconds(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, tp: int, cp: int, mbs: int, sp: bool,
                pp_span_crosses_node: bool) -> float:
    """One activation (or gradient) send between pipeline stages: b*s*h/(cp*tp) elements per rank (scatter/gather
    optimisation, Narayanan §4.1; already sharded under SP), re-gathered over NVLink without SP."""
    device = cluster.device
    full = mbs * run.seq_len / cp * model.hidden * run.activation_bytes
    bandwidth, latency = ((device.inter_node_bandwidth, device.inter_node_latency) if pp_span_crosses_node
                          else (device.intra_node_bandwidth, device.intra_node_latency))
    send = comm.p2p_seconds(full / tp, bandwidth, latency)
    if tp > 1 and not sp:
        send += comm.all_gather_seconds(full, tp, device.intra_node_bandwidth, device.intra_node_latency)
    return send


def pipeline_seconds(schedule: str, fill_sum, stage_max, mbn, vpp, pp):
    """The schedule's critical path (ndcp/schedules) from the slowest stage's per-micro-batch time and the sum of
    the stages' fills (Schedule.fill; stage_fill). Plain arithmetic: works on floats and numpy arrays alike."""
    return schedule_named(schedule).pipeline_seconds(fill_sum, stage_max, mbn, vpp, pp)


def stage_fill(schedule: str, time: LayerTime, p2p: float) -> float:
    """What one stage (its per-micro-batch time `time` plus its exposed sends `p2p`) adds to the schedule's bubble."""
    return schedule_named(schedule).fill(time.total + p2p, time.full_backward, time.wgrad)


# -- composition --------------------------------------------------------------------------------------------------
PART_KEYS = ("compute_forward", "compute_backward", "recompute", "tp_comm", "cp_comm", "ep_comm", "dp_comm",
             "pp_comm", "bubble", "optimizer")


@dataclass(frozen=True)
class TimeEstimate:
    """One optimizer step: its time, utilisation and where the time goes (parts add up to step_seconds)."""

    step_seconds: float
    mfu: float
    hfu: float
    tokens_per_second_per_gpu: float
    parts: dict[str, float]
    model_flops: float  # per step, whole cluster, under mfu_convention
    hardware_flops: float  # per step, whole cluster: what the time model executes
    mfu_convention: str = "causal"  # how model FLOPs count causal attention (specs/run.py MFU_CONVENTIONS)
    # Communication overlapped with compute, per step on the slowest stage (not in parts; estimate/overlap.py)
    hidden: dict[str, float] | None = None

    def as_dict(self) -> dict:
        return {"step_seconds": self.step_seconds, "mfu": self.mfu, "mfu_convention": self.mfu_convention,
                "hfu": self.hfu,
                "tokens_per_second_per_gpu": self.tokens_per_second_per_gpu, "parts": dict(self.parts),
                "hidden_comm": dict(self.hidden or dict.fromkeys(HIDDEN_KEYS, 0.0))}


def _stage_time(model, cluster, run, strategy: Strategy, stage: int, mode_counts) -> LayerTime:
    """One micro-batch through one device stage (all its chunks): body layers plus the stage's extra work."""
    s = strategy
    hidden = strategy_overlaps(run, s)
    total = stage_extra(model, cluster, run, s.schedule, stage, s.pp, s.tp, s.cp, s.mbs, s.sp, ep=s.ep, etp=s.etp,
                        cp_comm=s.cp_comm, hidden=hidden)
    for (kind, mode), n in mode_counts:
        total = total + layer_time(model, cluster, run, kind, mode, s.tp, s.cp, s.ep, s.etp, s.mbs, s.sp,
                                   s.cp_comm, hidden).scaled(n)
    return total


def _p2p_sends(model, cluster, run, strategy: Strategy) -> float:
    s = strategy
    return pipeline_p2p_seconds(model, cluster, run, s.pp, s.vpp, s.tp, s.cp, s.mbs, s.sp,
                                p2p_crosses_node(cluster, s.tp, s.cp, s.dp))


def p2p_per_microbatch(model, cluster, run, strategy: Strategy) -> float:
    """A stage's exposed sends per micro-batch: activation forward and gradient backward at each of its vpp
    chunks, none when the strategy overlaps them (estimate/overlap.py)."""
    return 0.0 if "p2p" in strategy_overlaps(run, strategy) else _p2p_sends(model, cluster, run, strategy)


def p2p_crosses_node(cluster: ClusterSpec, tp: int, cp: int, dp: int) -> bool:
    """Whether neighbouring pipeline stages sit on different nodes (ranks ordered TP -> CP -> DP -> PP)."""
    return not comm.fits_in_node(2 * tp * cp * dp, cluster.device)


@lru_cache(maxsize=65536)
def pipeline_p2p_seconds(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, pp: int, vpp: int, tp: int, cp: int,
                         mbs: int, sp: bool, crosses_node: bool) -> float:
    """p2p_per_microbatch from the fields it depends on (shared by every dp with the same node crossing)."""
    if pp == 1:
        return 0.0
    return 2 * vpp * p2p_seconds(model, cluster, run, tp, cp, mbs, sp, crosses_node)


def stage_times(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, strategy: Strategy) -> list[LayerTime]:
    """Per device stage: one micro-batch's time by part (body layers and the stage's extra work, without p2p)."""
    return [_stage_time(model, cluster, run, strategy, i, counts)
            for i, counts in enumerate(stage_mode_counts(model, strategy))]


def overlap_windows(stages: list[LayerTime]) -> list[Windows]:
    """Each stage's DP overlap windows: one micro-batch's forward and backward wall time on it."""
    return [Windows(t.forward_window, t.backward_window) for t in stages]


def estimate_time(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, strategy: Strategy) -> TimeEstimate:
    """Step time = pipeline(slowest per-micro-batch stage time, sum of the stages' fills) + exposed DP sync +
    optimizer step; the communication overlapped with compute reported apart (TimeEstimate.hidden)."""
    s = strategy
    stages = stage_times(model, cluster, run, s)
    p2p = p2p_per_microbatch(model, cluster, run, s)
    totals = [t.total + p2p for t in stages]
    slowest = max(range(len(stages)), key=totals.__getitem__)
    stage_max = totals[slowest]
    pipeline = pipeline_seconds(s.schedule, sum(stage_fill(s.schedule, t, p2p) for t in stages), stage_max, s.mbn,
                                s.vpp, s.pp)
    worst = stages[slowest]
    dp_comm, optimizer = data_parallel_seconds(model, cluster, run, s, overlap_windows(stages))
    step = pipeline + dp_comm + optimizer

    parts = {"compute_forward": s.mbn * worst.forward, "compute_backward": s.mbn * worst.backward,
             "recompute": s.mbn * worst.recompute, "tp_comm": s.mbn * worst.tp_comm, "cp_comm": s.mbn * worst.cp_comm,
             "ep_comm": s.mbn * worst.ep_comm, "dp_comm": dp_comm, "pp_comm": s.mbn * p2p,
             "bubble": pipeline - s.mbn * stage_max, "optimizer": optimizer}

    model_flops = model_flops_per_step(model, run.seq_len, s.global_batch, run.mfu_convention, run.images_per_sample,
                                       image_side(model.encoder, run) if model.encoder else 0)
    # every device of a stage executes its stage's FLOPs for each of the mbn micro-batches
    hardware_flops = s.mbn * sum(t.flops for t in stages) * (s.devices // s.pp)
    capacity = s.devices * cluster.device.utilisation_peak(run.fp8) * step  # FP8 runs: of the FP8 peak
    tokens = s.global_batch * run.seq_len
    hidden = {"tp_comm": s.mbn * worst.tp_hidden, "ep_comm": s.mbn * worst.ep_hidden,
              "pp_comm": s.mbn * (_p2p_sends(model, cluster, run, s) - p2p)}
    return TimeEstimate(step, model_flops / capacity, hardware_flops / capacity, tokens / (step * s.devices), parts,
                        model_flops, hardware_flops, run.mfu_convention, hidden)


__all__ = ["LayerTime", "layer_time", "stage_extra_time", "stage_extra", "p2p_seconds", "pipeline_seconds",
           "stage_fill", "TimeEstimate", "estimate_time", "stage_times", "overlap_windows", "stage_mode_counts",
           "PART_KEYS", "p2p_per_microbatch", "p2p_crosses_node", "pipeline_p2p_seconds"]
