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
from ..specs.strategy import Strategy, cp_a2a_size
from . import communication as comm
from .compute import (FLASH_BACKWARD_RATIO, attention_core_flops, elementwise_bytes, layer_gemms, memory_seconds,
                      model_flops_per_step, mtp_projection_gemm, output_layer_gemm, router_gemm, total_flops)
from .data_parallel import Windows, data_parallel_seconds
from .fp8 import cast_bytes_per_element
from .gemm import attention_core_seconds, gemm_seconds
from .layout import stage_mode_counts

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

    @property
    def total(self) -> float:
        return self.forward + self.backward + self.recompute + self.tp_comm + self.cp_comm + self.ep_comm

    @property
    def forward_window(self) -> float:
        """Wall time of this work's forward pass (compute and its exposed communication): what a data-parallel
        collective on the other link can hide behind during the forward."""
        return self.forward + self.tp_comm + self.cp_comm + self.ep_comm - self.backward_comm

    @property
    def backward_window(self) -> float:
        """Wall time of this work's backward pass: backward, recompute and the communication exposed in it."""
        return self.backward + self.recompute + self.backward_comm

    def __add__(self, other: "LayerTime") -> "LayerTime":
        return LayerTime(self.forward + other.forward, self.backward + other.backward,
                         self.recompute + other.recompute, self.tp_comm + other.tp_comm,
                         self.cp_comm + other.cp_comm, self.ep_comm + other.ep_comm, self.flops + other.flops,
                         self.backward_comm + other.backward_comm)

    def scaled(self, factor: float) -> "LayerTime":
        return LayerTime(self.forward * factor, self.backward * factor, self.recompute * factor,
                         self.tp_comm * factor, self.cp_comm * factor, self.ep_comm * factor, self.flops * factor,
                         self.backward_comm * factor)


ZERO_TIME = LayerTime(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


def _tp_collective(cluster: ClusterSpec, nbytes: float, tp: int) -> float:
    """One Megatron TP all-reduce (or its SP reduce-scatter + all-gather pair: same volume, Korthikanti §4.2.2)."""
    bandwidth, latency = comm.link(cluster.device, comm.group_span(("tp",), {"tp": tp}))
    return comm.all_reduce_seconds(nbytes, tp, bandwidth, latency)


def cp_bytes(model: ModelSpec, run: RunSpec, tokens: float, tp: int) -> tuple[float, float, float]:
    """Bytes per rank of this rank's local K+V, Q and attention output (its tokens, its tp share of the heads)."""
    if model.mla is not None:
        qk = model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim
        kv, q, out = model.heads * (qk + model.mla.v_head_dim), model.heads * qk, model.heads * model.mla.v_head_dim
    else:
        kv, q, out = 2 * model.num_kv_heads * model.dim_per_head, model.heads * model.dim_per_head, model.hidden
    return tuple(tokens * width / tp * run.activation_bytes for width in (kv, q, out))


def _cp_link(cluster: ClusterSpec, tp: int, cp: int) -> tuple[float, float]:
    return comm.link(cluster.device, comm.group_span(("cp",), {"tp": tp, "cp": cp}))


# Each --cp-comm-type (Megatron-Core / Transformer Engine context parallelism, docs/formulas.md §7): exposed seconds
# (forward, backward) of one layer's CP communication, given the attention core's forward and backward it may hide
# behind. kv, q, out: this rank's bytes of K+V, Q and the attention output (cp_bytes).
def _cp_p2p(cluster, tp, cp, kv, q, out, core, core_backward):
    """Ring: cp-1 passes of the K/V chunk, each overlapping an attention block; backward K/V again plus dK/dV."""
    return _ring(_cp_link(cluster, tp, cp), cp, kv, core, core_backward)


def _ring(link: tuple[float, float], n: int, kv: float, core: float, core_backward: float) -> tuple[float, float]:
    ring = (n - 1) * comm.p2p_seconds(kv, *link)
    return max(0.0, ring - core), max(0.0, 2 * ring - core_backward)


def _cp_allgather(cluster, tp, cp, kv, q, out, core, core_backward):
    """All-gather the sequence's K/V before attention (Llama 3 §3.3.2), not overlapped; the backward gathers it
    again and reduce-scatters dK/dV (TE AttnFuncWithCPAndKVAllGather)."""
    bandwidth, latency = _cp_link(cluster, tp, cp)
    gather = comm.all_gather_seconds(cp * kv, cp, bandwidth, latency)
    return gather, gather + comm.reduce_scatter_seconds(cp * kv, cp, bandwidth, latency)


def _a2a_pass(cluster, tp, n, span, kv, q, out):
    """One Ulysses pass over n ranks: all-to-alls of Q, K+V and the output (backward: dO, dQ, dK+dV)."""
    bandwidth, latency = comm.link(cluster.device, span)
    return sum(comm.all_to_all_seconds(b, n, bandwidth, latency) for b in (q, kv, out))


def _cp_a2a(cluster, tp, cp, kv, q, out, core, core_backward):
    """DeepSpeed-Ulysses: sequence-sharded Q/K/V become head-sharded over cp, attention runs on whole sequences, the
    output goes back; none of it overlapped (the attention needs all of it)."""
    a2a = _a2a_pass(cluster, tp, cp, tp * cp, kv, q, out)
    return a2a, a2a


def _cp_a2a_p2p(cluster, tp, cp, kv, q, out, core, core_backward):
    """Hierarchical: Ulysses over the a CP ranks of a node, then the p2p ring over the cp/a node groups, whose K/V
    chunk (a x tokens, heads/a) has the same bytes as kv."""
    a = cp_a2a_size(cluster.device.devices_per_node, tp, cp)
    a2a = _a2a_pass(cluster, tp, a, tp * a, kv, q, out) if a > 1 else 0.0
    ring_forward, ring_backward = _ring(_cp_link(cluster, tp, cp), cp // a, kv, core, core_backward)
    return a2a + ring_forward, a2a + ring_backward


CP_COMM_TIME = {"p2p": _cp_p2p, "allgather": _cp_allgather, "a2a": _cp_a2a, "a2a+p2p": _cp_a2a_p2p}


def cp_comm_seconds(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, tokens: float, tp: int, cp: int,
                    cp_comm: str, core: float, core_backward: float) -> tuple[float, float]:
    """Exposed (forward, backward) seconds of one layer's context-parallel communication, one micro-batch."""
    if cp <= 1:
        return 0.0, 0.0
    return CP_COMM_TIME[cp_comm](cluster, tp, cp, *cp_bytes(model, run, tokens, tp), core, core_backward)


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
               ep: int, etp: int, mbs: int, sp: bool, cp_comm: str = "p2p") -> LayerTime:
    """One body layer of `kind` under recompute `mode` (see _layer_time); a dense layer does not depend on ep/etp,
    so its cached terms are shared across them (nor on cp_comm without CP)."""
    if kind == "dense":
        ep = etp = 1
    if cp == 1:
        cp_comm = "p2p"
    return _layer_time(model, cluster, run, kind, mode, tp, cp, ep, etp, mbs, sp, cp_comm)


@lru_cache(maxsize=131072)
def _layer_time(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, kind: str, mode: str, tp: int, cp: int,
                ep: int, etp: int, mbs: int, sp: bool, cp_comm: str = "p2p") -> LayerTime:
    """One body layer of `kind` under recompute `mode` for one micro-batch of mbs sequences of local length seq/cp.

    recompute: the mode's extra forward (full: the layer forward with its TP/CP/EP forward communication;
    selective: the attention core). tp_comm: 2 forward all-reduces (SP: reduce-scatter + all-gather, same volume)
    plus whatever of the 2 backward ones outlasts the weight-gradient GEMMs. cp_comm: the exposed part of
    the cp_comm variant's traffic (cp_comm_seconds). ep_comm: dispatch + combine all-to-alls, forward and backward
    (MoE only)."""
    device, dtype = cluster.device, run.activation_bytes
    tokens, keys = mbs * run.seq_len / cp, run.seq_len
    flash = run.flash_attention
    gemms = layer_gemms(model, kind, tokens, tp, ep, etp)
    linear = gemm_seconds(gemms, device, dtype)
    cast_forward = cast_backward = 0.0
    if run.fp8:  # docs/formulas.md §3.1: weight GEMMs in FP8 but the router; casts at HBM bandwidth
        router = router_gemm(model, tokens) if kind == "moe" else None
        low = tuple(g for g in gemms if g != router)
        linear = gemm_seconds(low, device, dtype, fp8=True) + (gemm_seconds((router,), device, dtype) if router
                                                                 else 0.0)
        per_element = cast_bytes_per_element(run, device)
        cast_forward = memory_seconds(per_element * sum((g.m + g.n) * g.k * g.count for g in low), device)
        cast_backward = memory_seconds(per_element * sum(g.m * g.n * g.count for g in low), device)
    core_flops = attention_core_flops(model, tokens, keys, tp, causal=flash)
    core, core_backward = attention_core_seconds(core_flops, device, flash)
    linear_flops = total_flops(gemms)
    core_backward_flops = core_flops * (FLASH_BACKWARD_RATIO if flash else 2.0)
    executed = 3 * linear_flops + core_flops + core_backward_flops  # dgrad + wgrad per GEMM
    elementwise = memory_seconds(elementwise_bytes(model, kind, tokens, keys, tp, sp, flash, dtype), device)
    forward = linear + core + elementwise + cast_forward
    backward = 2.0 * (linear + elementwise) + core_backward + cast_backward  # dgrad + wgrad per GEMM (Narayanan §5.1)

    tp_forward = 2 * _tp_collective(cluster, tokens * model.hidden * dtype, tp) if tp > 1 else 0.0  # docs/formulas.md §7
    # backward: each input-gradient all-reduce runs behind its layer's weight-gradient GEMM (Megatron
    # LinearWithGradAccumulationAndAsyncCommunication), which costs one forward of the linear layers
    tp_backward = max(0.0, tp_forward - linear)
    cp_forward, cp_backward = cp_comm_seconds(model, cluster, run, tokens, tp, cp, cp_comm, core, core_backward)
    a2a = _ep_all_to_all(model, cluster, run, tokens, tp, ep, etp) if kind == "moe" else 0.0

    recompute = 0.0
    for piece in recompute_option(mode).reruns:  # the forward pieces the recompute option re-runs (specs/recompute.py)
        if piece == LAYER_FORWARD:
            recompute += forward + tp_forward + cp_forward + 2 * a2a
            executed += linear_flops + core_flops
        elif piece == ATTENTION_CORE:  # the core, and without flash attention its score-matrix elementwise passes
            executed += core_flops
            recompute += core + (0.0 if flash else memory_seconds(
                elementwise_bytes(model, kind, tokens, keys, tp, sp, flash, dtype)
                - elementwise_bytes(model, kind, tokens, keys, tp, sp, True, dtype), device))
        else:
            raise ValueError(f"no time model for recompute piece {piece!r}")
    return LayerTime(forward, backward, recompute, tp_forward + tp_backward, cp_forward + cp_backward, 4 * a2a,
                     executed, tp_backward + cp_backward + 2 * a2a)


def _embedding_time(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, tokens: float, tp: int,
                    sp: bool) -> LayerTime:
    """Vocab-parallel embedding lookup (memory-bound) and its output all-reduce (reduce-scatter with SP)."""
    device = cluster.device
    rows = memory_seconds(tokens * model.hidden * run.activation_bytes, device)
    bandwidth, latency = comm.link(device, tp)
    nbytes = tokens * model.hidden * run.activation_bytes
    collective = comm.reduce_scatter_seconds if sp else comm.all_reduce_seconds
    return LayerTime(rows, rows, 0.0, collective(nbytes, tp, bandwidth, latency), 0.0, 0.0)


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
    return LayerTime(forward, backward, 0.0, tp_comm, 0.0, 0.0, 3 * logits_gemm.flops)


def _mtp_time(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, tp: int, cp: int, mbs: int, sp: bool, ep: int,
              etp: int, cp_comm: str = "p2p") -> LayerTime:
    """All MTP modules: 2h->h projection, one transformer layer and the shared output head each (DeepSeek-V3 §2.2)."""
    if not model.mtp_depth:
        return ZERO_TIME
    tokens = mbs * run.seq_len / cp
    projection_gemm = mtp_projection_gemm(model, tokens)
    projection = gemm_seconds((projection_gemm,), cluster.device, run.activation_bytes) / tp
    kind = "moe" if model.moe is not None else "dense"
    block = (LayerTime(projection, 2 * projection, 0.0, 0.0, 0.0, 0.0, 3 * projection_gemm.flops / tp)
             + layer_time(model, cluster, run, kind, NO_RECOMPUTE, tp, cp, ep, etp, mbs, sp, cp_comm)
             + _output_head_time(model, cluster, run, tokens, tp, sp))
    return block.scaled(model.mtp_depth)


def stage_extra_time(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, role: str, tp: int, cp: int, mbs: int,
                     sp: bool, *, ep: int = 1, etp: int = 1, cp_comm: str = "p2p") -> LayerTime:
    """Work outside the body layers: "first" = embedding; "last" = final norm, output layer, loss and MTP modules;
    "only" (pp = 1) = both; anything else = nothing. ep/etp shape the MTP module's MoE layer (only)."""
    if role == "only":
        return (stage_extra_time(model, cluster, run, "first", tp, cp, mbs, sp, ep=ep, etp=etp, cp_comm=cp_comm)
                + stage_extra_time(model, cluster, run, "last", tp, cp, mbs, sp, ep=ep, etp=etp, cp_comm=cp_comm))
    if role not in ("first", "last"):
        return ZERO_TIME
    if not model.mtp_depth:
        ep = etp = 1  # nothing else depends on them: share the cached terms
    if not model.mtp_depth or cp == 1:
        cp_comm = "p2p"
    return _stage_extra_time(model, cluster, run, role, tp, cp, mbs, sp, ep, etp, cp_comm)


@lru_cache(maxsize=65536)
def _stage_extra_time(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, role: str, tp: int, cp: int, mbs: int,
                      sp: bool, ep: int, etp: int, cp_comm: str = "p2p") -> LayerTime:
    tokens = mbs * run.seq_len / cp
    if role == "first":
        return _embedding_time(model, cluster, run, tokens, tp, sp)
    return _output_head_time(model, cluster, run, tokens, tp, sp) + _mtp_time(model, cluster, run, tp, cp, mbs, sp,
                                                                             ep, etp, cp_comm)


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


def pipeline_seconds(schedule: str, stage_sum, stage_max, mbn, vpp):
    """The schedule's critical path (ndcp/schedules) from per-micro-batch stage times. Plain arithmetic: works on
    floats and numpy arrays alike."""
    return schedule_named(schedule).pipeline_seconds(stage_sum, stage_max, mbn, vpp)


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

    def as_dict(self) -> dict:
        return {"step_seconds": self.step_seconds, "mfu": self.mfu, "mfu_convention": self.mfu_convention,
                "hfu": self.hfu,
                "tokens_per_second_per_gpu": self.tokens_per_second_per_gpu, "parts": dict(self.parts)}


def stage_role(stage: int, pp: int) -> str:
    """Which extra work a device stage does: "only" (pp = 1), "first", "last" or "middle"."""
    if pp == 1:
        return "only"
    return "first" if stage == 0 else "last" if stage == pp - 1 else "middle"


def _stage_time(model, cluster, run, strategy: Strategy, stage: int, mode_counts) -> LayerTime:
    """One micro-batch through one device stage (all its chunks): body layers plus the stage's extra work."""
    s = strategy
    total = stage_extra_time(model, cluster, run, stage_role(stage, s.pp), s.tp, s.cp, s.mbs, s.sp, ep=s.ep, etp=s.etp,
                             cp_comm=s.cp_comm)
    for (kind, mode), n in mode_counts:
        total = total + layer_time(model, cluster, run, kind, mode, s.tp, s.cp, s.ep, s.etp, s.mbs, s.sp,
                                   s.cp_comm).scaled(n)
    return total


def p2p_per_microbatch(model, cluster, run, strategy: Strategy) -> float:
    """A stage's sends per micro-batch: activation forward and gradient backward at each of its vpp chunks."""
    s = strategy
    return pipeline_p2p_seconds(model, cluster, run, s.pp, s.vpp, s.tp, s.cp, s.mbs, s.sp,
                                p2p_crosses_node(cluster, s.tp, s.cp, s.dp))


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
    """Step time = pipeline(sum and max of per-micro-batch stage times) + exposed DP sync + optimizer step."""
    s = strategy
    stages = stage_times(model, cluster, run, s)
    p2p = p2p_per_microbatch(model, cluster, run, s)
    totals = [t.total + p2p for t in stages]
    slowest = max(range(len(stages)), key=totals.__getitem__)
    stage_max, stage_sum = totals[slowest], sum(totals)
    pipeline = pipeline_seconds(s.schedule, stage_sum, stage_max, s.mbn, s.vpp)
    worst = stages[slowest]
    dp_comm, optimizer = data_parallel_seconds(model, cluster, run, s, overlap_windows(stages))
    step = pipeline + dp_comm + optimizer

    parts = {"compute_forward": s.mbn * worst.forward, "compute_backward": s.mbn * worst.backward,
             "recompute": s.mbn * worst.recompute, "tp_comm": s.mbn * worst.tp_comm, "cp_comm": s.mbn * worst.cp_comm,
             "ep_comm": s.mbn * worst.ep_comm, "dp_comm": dp_comm, "pp_comm": s.mbn * p2p,
             "bubble": pipeline - s.mbn * stage_max, "optimizer": optimizer}

    model_flops = model_flops_per_step(model, run.seq_len, s.global_batch, run.mfu_convention)
    # every device of a stage executes its stage's FLOPs for each of the mbn micro-batches
    hardware_flops = s.mbn * sum(t.flops for t in stages) * (s.devices // s.pp)
    capacity = s.devices * cluster.device.utilisation_peak(run.fp8) * step  # FP8 runs: of the FP8 peak
    tokens = s.global_batch * run.seq_len
    return TimeEstimate(step, model_flops / capacity, hardware_flops / capacity, tokens / (step * s.devices), parts,
                        model_flops, hardware_flops, run.mfu_convention)


__all__ = ["LayerTime", "layer_time", "stage_extra_time", "p2p_seconds", "pipeline_seconds",
           "TimeEstimate", "estimate_time", "stage_times", "overlap_windows", "stage_mode_counts", "PART_KEYS",
           "p2p_per_microbatch", "p2p_crosses_node", "pipeline_p2p_seconds", "stage_role"]
