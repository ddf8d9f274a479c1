"""One body layer's time for one micro-batch on one device (`layer_time`): its GEMMs, attention core, elementwise
passes, exposed TP/CP/EP communication and what its recompute option re-runs. `LayerTime` keeps the parts apart, so
stages (estimate/time.py) and the solver's coefficients add them up.
"""
from __future__ import annotations

from functools import lru_cache
from operator import add
from typing import NamedTuple

from ..specs.device import ClusterSpec
from ..specs.model import ModelSpec
from ..specs.recompute import ATTENTION_CORE, LAYER_FORWARD, recompute_option
from ..specs.run import RunSpec
from . import communication as comm
from .compute import (FLASH_BACKWARD_RATIO, attention_core_flops, elementwise_bytes, fp8_gemms, layer_gemms,
                      memory_seconds, mixer_gemms, separate_qkv_gemms, total_flops)
from .fusion import layer_elementwise_bytes
from .fp8 import amax_reduction_seconds, layer_cast_bytes
from .gemm import attention_core_seconds, training_gemm_seconds, weight_gemm_seconds
from .keys import Degrees, LayerKey
from .mixers import mixer_cp_seconds, scan_core_flops, scan_core_seconds
from .moe import dispatch_seconds, routing_bytes
from .overlap import (EP_COMM_SMS, PIPELINE, UB_COMPUTE_STREAMS, MoEPasses, UbBlock, ep_overlapped, layer_overlaps,
                      sm_held, sp_backward_exposed, tp_overlapped)
from .rerun import MODULE_PIECES, LayerShape, rerun_cost, trainer_reruns
from .trainers import trainer_behaviour


class LayerTime(NamedTuple):
    """One body layer (or a stage's extra work), one micro-batch, seconds on one device, exposed time; and the
    matmul FLOPs that work executes on the device (the HFU numerator: masked halves skipped, recompute and expert
    padding included). A named tuple: the bounds build hundreds of thousands of them, and a tuple is built several
    times faster than a frozen dataclass; `+` adds the parts (it does not concatenate)."""

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

    def __add__(self, other: "LayerTime") -> "LayerTime":  # type: ignore[override]
        return LayerTime._make(map(add, self, other))

    def scaled(self, factor: float) -> "LayerTime":
        return LayerTime._make([x * factor for x in self])


ZERO_TIME = LayerTime(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


def tp_all_reduce_seconds(cluster: ClusterSpec, nbytes: float, tp: int) -> float:
    """One Megatron TP all-reduce (or its SP reduce-scatter + all-gather pair: same volume, Korthikanti §4.2.2)."""
    return comm.all_reduce_seconds(nbytes, tp, *comm.tp_link(cluster, tp))


def layer_time(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, key: LayerKey) -> LayerTime:
    """One body layer of `key` (see _layer_time); a dense layer does not depend on ep/etp, so its cached terms are
    shared across them (nor on cp_comm without CP), and only the overlaps inside the layer count
    (estimate/overlap.py layer_overlaps)."""
    kind, mode, degrees, cp_comm, hidden = key
    inside = layer_overlaps(hidden, kind, mode)
    if kind == "dense":
        degrees = degrees.without_experts()
    if degrees.cp == 1:
        cp_comm = "p2p"
    if degrees is not key.degrees or cp_comm != key.cp_comm or inside != hidden:
        key = LayerKey(kind, mode, degrees, cp_comm, inside)
    return _layer_time(model, cluster, run, key)


@lru_cache(maxsize=65536)
def _layer_compute(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, kind: str, tp: int, ep: int, etp: int,
                   tokens: float, layout_copies: bool = False) -> tuple[float, ...]:
    """The GEMM work of one body layer for one micro-batch of `tokens` tokens per device (mbs x seq / cp), shared by
    its SP, overlap and cp_comm variants and by the (cp, mbs) pairs with the same tokens: seconds of the weight GEMMs
    (one pass), their FLOPs, the FP8 casts forward and backward, the mixer cores' forward and backward seconds (the
    attention core, its queries against the whole sequence's keys, on the kind's attention layers; the chunked
    scans on its linear-attention and Mamba-2 layers), the cores' FLOPs, and the attention core's seconds alone
    (what context-parallel attention hides its exchange behind), and its FLOPs alone (what core_attn re-runs)."""
    device = cluster.device
    gemms = layer_gemms(model, kind, tokens, tp, ep, etp, imbalance=run.moe_load_imbalance)
    # torchtitan before 0.3.0: wq, wk, wv apart (RunSpec.qkv_projections); their one input cast under FP8 is priced
    # as the fused GEMM's, as w1's and w3's (the compiled graph casts a shared input once: docs/formulas.md §5.7)
    run_gemms = separate_qkv_gemms(model, kind, gemms, tokens, tp) if run.qkv_projections == "separate" else gemms
    linear = weight_gemm_seconds(model, kind, run_gemms, tokens, device, run)
    cast_forward = cast_backward = 0.0
    if run.fp8:  # docs/formulas.md §3.1: weight GEMMs in FP8 but the router; casts at HBM bandwidth, as the
        # trainer casts (estimate/fp8.py layer_cast_bytes)
        forward_bytes, backward_bytes = layer_cast_bytes(run, device, fp8_gemms(model, kind, gemms, tokens))
        cast_forward, cast_backward = memory_seconds(forward_bytes, device), memory_seconds(backward_bytes, device)
    share = model.mixer_shares(kind).attention
    attention = share * attention_core_flops(model, tokens, run.seq_len, tp, causal=run.flash_attention)
    core, core_backward = attention_core_seconds(attention, device, run.flash_attention, run.attention_kernel)
    scan = scan_core_flops(model, kind, tokens, tp)  # linear-attention and Mamba-2 cores (estimate/mixers.py)
    scan_forward, scan_backward = (scan_core_seconds(model, kind, tokens, tp, device, run.activation_bytes,
                                                     layout_copies) if scan else (0.0, 0.0))
    return (linear, total_flops(gemms), cast_forward, cast_backward, core + scan_forward, core_backward + scan_backward,
            attention + scan, core, core_backward, attention)


class _Passes(NamedTuple):
    """One body layer's forward and backward with no recompute (_layer_passes): what every recompute option adds to."""

    forward: float
    backward: float
    linear: float  # the weight GEMMs, one pass
    linear_flops: float
    core: float  # the attention core, forward (a hybrid kind's attention share: not its scan cores)
    core_flops: float  # the mixer cores' FLOPs, forward (attention and scans)
    attention_flops: float  # the attention core's alone
    executed: float  # FLOPs of the forward and backward
    tp_forward: float  # exposed TP communication, forward and backward, and all of it before overlap
    tp_backward: float
    tp_total: float
    cp_forward: float
    cp_backward: float
    a2a: float  # one EP token dispatch (or combine), under the run's dispatcher (estimate/moe.py)
    ep_forward: float
    ep_backward: float


@lru_cache(maxsize=131072)
def _layer_time(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, key: LayerKey) -> LayerTime:
    """One body layer of key.kind under recompute key.mode for one micro-batch of mbs sequences of local length
    seq/cp.

    recompute: the mode's extra forward (full: the layer forward with its TP/CP/EP forward communication;
    selective: the attention core, or the trainer's own op-level policy: estimate/rerun.py trainer_reruns).
    tp_comm: the layer's forward TP pairs (_tp_collectives; SP: reduce-scatter + all-gather, an all-reduce's
    volume) plus the backward's exposed share (_tp_backward: without SP what outlasts the
    weight-gradient GEMMs; with SP the output-gradient all-gathers and what of the rest outlasts the column-parallel
    GEMMs). cp_comm: the exposed part of the cp_comm variant's traffic (cp_comm_seconds). ep_comm: dispatch +
    combine all-to-alls, forward and backward (MoE only). wgrad: the weight-gradient GEMMs (one forward of the
    linear layers). `hidden` overlaps move TP or EP time from exposed to tp_hidden / ep_hidden
    (estimate/overlap.py)."""
    p = _layer_passes(model, cluster, run, key.kind, key.degrees, key.cp_comm, key.hidden)
    executed, recompute = p.executed, 0.0
    # the forward pieces the recompute option re-runs (specs/recompute.py), as the trainer re-runs them (rerun.py)
    reruns = trainer_reruns(model, run, key.kind, recompute_option(key.mode).reruns)
    for piece in reruns:
        if piece in MODULE_PIECES:  # recompute modules and torchtitan's op-level SAC (estimate/rerun.py)
            shape = LayerShape(key, key.degrees.tokens(run.seq_len), p.tp_forward, p.ep_forward, p.forward,
                               p.backward, p.core, p.attention_flops)
            seconds, flops = rerun_cost(model, cluster, run, shape, piece, reruns)
            recompute += seconds
            executed += flops
        elif piece == LAYER_FORWARD:
            recompute += p.forward + p.tp_forward + p.cp_forward + p.ep_forward
            executed += p.linear_flops + p.core_flops
        elif piece == ATTENTION_CORE:  # the attention core (a hybrid kind's attention blocks', not its scans), and
            # without flash attention its score-matrix elementwise passes
            executed += p.attention_flops
            recompute += p.core + (0.0 if run.flash_attention else _unfused_core_elementwise(model, cluster, run,
                                                                                             key.kind, key.degrees))
        else:
            raise ValueError(f"no time model for recompute piece {piece!r}")
    tp_exposed = p.tp_forward + p.tp_backward
    return LayerTime(p.forward, p.backward, recompute, tp_exposed, p.cp_forward + p.cp_backward,
                     p.ep_forward + p.ep_backward, executed, p.tp_backward + p.cp_backward + p.ep_backward, p.linear,
                     p.tp_total - tp_exposed, 4 * p.a2a - p.ep_forward - p.ep_backward)


@lru_cache(maxsize=65536)
def _layer_passes(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, kind: str, degrees: Degrees, cp_comm: str,
                  hidden: frozenset) -> _Passes:
    """_layer_time's forward and backward with no recompute, shared by the recompute options with the same
    overlaps."""
    device, dtype = cluster.device, run.activation_bytes
    tp, cp, ep, etp, _, sp = degrees
    tokens, keys = degrees.tokens(run.seq_len), run.seq_len
    flash = run.flash_attention
    (linear, linear_flops, cast_forward, cast_backward, core, core_backward, core_flops, attention,
     attention_backward, attention_flops) = _layer_compute(model, cluster, run, kind, tp, ep, etp, tokens,
                                          model.mamba is not None and degrees.mbs > 1)
    core_backward_flops = core_flops * (FLASH_BACKWARD_RATIO if flash else 2.0)
    executed = 3 * linear_flops + core_flops + core_backward_flops  # dgrad + wgrad per GEMM
    # as the trainer runs it: torchtitan's eager ops or their torch.compile fusion (fusion.py), else Megatron's kernels
    elementwise = memory_seconds(layer_elementwise_bytes(model, run, kind, tokens, keys, tp, sp), device)
    # MoE routing work at HBM speed, forward and backward op by op (estimate/moe.py; docs/formulas.md §3.2)
    routed = routing_bytes(model, run, tokens, tp, ep, etp) if kind == "moe" else None
    routing, routing_backward, around = ((memory_seconds(routed.forward, device),
                                          memory_seconds(routed.backward, device),
                                          memory_seconds(routed.around_dispatch, device)) if routed else (0.0,) * 3)
    serial = tuple(memory_seconds(b, device) for b in routed.comm_stream) if routed else (0.0, 0.0)
    forward = linear + core + elementwise + cast_forward + routing
    backward = (2.0 * (linear + elementwise) + core_backward + cast_backward  # dgrad + wgrad (Narayanan §5.1)
                + routing_backward)

    # docs/formulas.md §7: one TP collective pair per row-parallel output (_tp_collectives)
    collectives = _tp_collectives(model, kind)
    tp_forward = collectives * tp_all_reduce_seconds(cluster, tokens * model.hidden * dtype, tp) if tp > 1 else 0.0
    tp_backward = _tp_backward(model, cluster, run, kind, degrees, tp_forward, linear) if tp > 1 else 0.0
    tp_total = tp_forward + tp_backward
    if "tp" in hidden:
        tp_forward, tp_backward = _tp_userbuffers(model, cluster, run, kind, tp, tokens, tp_forward, linear)
    # FP8 current scaling: each pair's sequence-parallel input cast (forward) and output-gradient cast (backward)
    # all-reduces its amax over the TP group first, exposed (estimate/fp8.py amax_reduction_seconds)
    amax = collectives * amax_reduction_seconds(run, cluster, tp, sp)
    tp_forward, tp_backward, tp_total = tp_forward + amax, tp_backward + amax, tp_total + 2 * amax
    cp_forward, cp_backward = mixer_cp_seconds(model, cluster, run, kind, degrees, cp_comm, attention,
                                               attention_backward)
    a2a = dispatch_seconds(model, cluster, run, tokens, tp, ep, etp) if kind == "moe" else 0.0
    ep_forward = ep_backward = 2 * a2a  # dispatch + combine each way
    if "ep" in hidden:
        ep_forward, ep_backward = ep_overlapped(a2a, _moe_passes(model, cluster, run, kind, tp, tokens, forward,
                                                                 backward, core, core_backward, around, serial,
                                                                 linear),
                                                sm_held(EP_COMM_SMS, device.sm_count), run.delay_wgrad_compute)
    return _Passes(forward, backward, linear, linear_flops, attention, core_flops, attention_flops, executed,
                   tp_forward, tp_backward, tp_total, cp_forward, cp_backward, a2a, ep_forward, ep_backward)


def _moe_passes(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, kind: str, tp: int, tokens: float,
                forward: float, backward: float, core: float, core_backward: float, routing: float,
                serial: tuple[float, float] = (0.0, 0.0), linear: float = 0.0) -> MoEPasses:
    """A MoE layer's compute split as the EP overlap schedules it (overlap.ep_overlapped): before the dispatch its
    mixer's GEMMs and core and the router (`routing`: its passes with the permute and unpermute,
    moe.RoutingBytes.around_dispatch); the rest (experts, element-wise work, casts, the dispatcher's other copies)
    the MLP's. `serial` (forward, backward) is left out of both: the flex dispatcher's permute, unpermute and
    metadata scans (moe.flex_kernel_bytes), which HybridEP runs on the communication stream with grids that fill
    the device, so nothing runs beside them and they hide no all-to-all. They stay in the layer's forward and
    backward, so the phases add them whole (ep_overlapped's exposed = phases less the passes). The weight gradients
    (what delay_wgrad_compute runs apart): one pass of each part's weight GEMMs, the mixer's and the rest of the
    layer's `linear` (shared experts included, which Megatron-Core runs in the pre-dispatch node: an approximation)."""
    mixer = _ub_linear(model, cluster, run, kind, tp, tokens)  # the mixer's weight GEMMs, one pass
    forward, backward = max(0.0, forward - serial[0]), max(0.0, backward - serial[1])
    attention_forward = min(forward, mixer + core + routing)
    attention_backward = min(backward, 2.0 * mixer + core_backward + routing)
    mlp_backward = backward - attention_backward
    return MoEPasses(attention_forward, attention_backward, forward - attention_forward, mlp_backward,
                     min(mixer, attention_backward), min(max(0.0, linear - mixer), mlp_backward))


def _tp_backward(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, kind: str, degrees: Degrees,
                 tp_forward: float, linear: float) -> float:
    """Exposed backward TP seconds without userbuffers (docs/formulas.md §7). Plain TP: each column-parallel layer's
    input-gradient all-reduce runs behind its weight-gradient GEMM (Megatron-LM core/tensor_parallel/layers.py
    @d98e8a6 LinearWithGradAccumulationAndAsyncCommunication), which costs one forward of the linear layers.
    Sequence parallelism: the collectives of the GEMMs userbuffers would pair (_ub_share: a dense layer's all, a MoE
    layer's mixer's) as the trainer runs them (estimate/overlap.py sp_backward_exposed: the output-gradient
    all-gathers exposed, the input re-gathers and input-gradient reduce-scatters behind the column-parallel GEMMs);
    the rest (a MoE layer's shared experts) as plain TP, as _tp_userbuffers leaves it."""
    if not degrees.sp:
        return _behind_weight_gradients(tp_forward, linear)
    paired, rest, covered = _ub_split(model, cluster, run, kind, degrees.tp, degrees.tokens(run.seq_len), tp_forward)
    exposed = sp_backward_exposed(paired, covered, trainer_behaviour(run).sp_backward_async)
    return exposed + _behind_weight_gradients(rest, linear - covered)


def _behind_weight_gradients(seconds: float, linear: float) -> float:
    """Plain TP's backward collectives of `seconds` run behind the weight-gradient GEMMs (one forward of the `linear`
    seconds of GEMMs, Megatron's LinearWithGradAccumulationAndAsyncCommunication): what outlasts them."""
    return max(0.0, seconds - linear)


def _ub_split(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, kind: str, tp: int, tokens: float,
              tp_forward: float) -> tuple[float, float, float]:
    """A layer's TP seconds split into those of Transformer Engine's linear layers (_ub_share), which userbuffers
    and Megatron's SP backward pair with their GEMMs, and the rest (priced as plain TP), with those GEMMs' seconds,
    one pass."""
    share = _ub_share(model, kind)
    covered = _ub_linear(model, cluster, run, kind, tp, tokens) if share else 0.0
    return tp_forward * share, tp_forward * (1.0 - share), covered


def _tp_collectives(model: ModelSpec, kind: str) -> int:
    """Row-parallel outputs of a layer reduced over the TP group (SP: a reduce-scatter, and an all-gather of the
    next input): the mixer's and the MLP's; one in a hybrid block (a mixer or an MLP alone). A MoE block has none of
    its own: Megatron-Core's token dispatchers move the routed tokens over the expert-TP x EP ranks
    (megatron/core/transformer/moe/token_dispatcher.py @d98e8a6: MoEAlltoAllTokenDispatcher gathers and
    reduce-scatters only over the expert-TP group `expt_tp`, when etp > 1; the all-gather and flex dispatchers over
    `tp_ep`), which estimate/moe.py dispatch_seconds prices (tokens x etp / tp a rank); its shared experts are a
    tensor-parallel MLP over the TP group (SharedExpertMLP): one."""
    if kind != "moe":
        return 1 if model.hybrid_blocks else 2
    shared = 1 if model.moe.shared_experts else 0
    return shared + (0 if model.hybrid_blocks else 1)


def _ub_share(model: ModelSpec, kind: str) -> float:
    """The share of a layer's TP collectives that belongs to Transformer Engine's (userbuffers-capable) linear
    layers: a dense layer's all; a MoE layer's mixer's (its shared experts' stay as without overlap); none in a
    hybrid model's MoE block."""
    if kind != "moe":
        return 1.0
    collectives = _tp_collectives(model, kind)
    return 0.0 if model.hybrid_blocks or not collectives else 1.0 / collectives


def _tp_userbuffers(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, kind: str, tp: int, tokens: float,
                    tp_forward: float, linear: float) -> tuple[float, float]:
    """Exposed (forward, backward) TP seconds under userbuffers (estimate/overlap.py tp_overlapped). It covers
    Transformer Engine's linear layers: all of a dense layer's GEMMs; on a MoE layer the mixer's only (the experts'
    TP traffic goes through the token dispatcher, and TE's grouped linear has no userbuffers), whose collective is
    one of the layer's two (none in a hybrid model's MoE block); the rest stays as without overlap."""
    paired, rest, covered = _ub_split(model, cluster, run, kind, tp, tokens, tp_forward)
    blocks = _ub_blocks(model, cluster, run, kind, tp, tokens) if paired else ()
    forward, backward = tp_overlapped(blocks, cluster.device.sm_count, tp)
    return forward + rest, backward + _behind_weight_gradients(rest, linear - covered)


def _ub_gemms_of(model: ModelSpec, kind: str, tokens: float, tp: int) -> tuple:
    """The GEMMs userbuffers pairs with collectives: a dense layer's all, a MoE layer's mixer projections."""
    return layer_gemms(model, kind, tokens, tp) if kind != "moe" else mixer_gemms(model, kind, tokens, tp)


@lru_cache(maxsize=65536)
def _ub_linear(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, kind: str, tp: int, tokens: float) -> float:
    """Seconds of _ub_gemms_of, one pass."""
    return weight_gemm_seconds(model, kind, _ub_gemms_of(model, kind, tokens, tp), tokens, cluster.device, run)


def _ub_block_gemms(model: ModelSpec, kind: str, tokens: float, tp: int) -> tuple[tuple, ...]:
    """_ub_gemms_of per collective pair: the mixer's and the MLP's on a dense layer (one pair each), the mixer's on a
    MoE layer; a hybrid model's block (one pair, a mixer or an MLP: the average layer's shares) as one."""
    mixer = mixer_gemms(model, kind, tokens, tp)
    if kind == "moe":
        return (mixer,)
    mlp = layer_gemms(model, kind, tokens, tp)[len(mixer):]
    return (mixer + mlp,) if model.hybrid_blocks else (mixer, mlp)


@lru_cache(maxsize=65536)
def _ub_blocks(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, kind: str, tp: int,
               tokens: float) -> tuple[UbBlock, ...]:
    """The layer's userbuffers blocks (estimate/overlap.py UbBlock): per collective pair its all-gather and
    reduce-scatter and its own GEMMs, the row-parallel ones those that write the hidden size (their output is
    reduce-scattered), the others column-parallel (their input is all-gathered). Under fp8 the all-gathers move FP8:
    Megatron creates the userbuffers with UserBufferQuantizationMode.FP8 (Megatron-Bridge
    src/megatron/bridge/training/initialize.py @39b4a5b4 _initialize_tp_communicators) and TE gives every all-gather
    overlap an FP8 buffer (`fp8_buf`: qkv_fprop, fc1_fprop, proj_dgrad, fc2_dgrad and the dgrad re-gathers; TE
    v2.12 pytorch/module/base.py @5671fd3 initialize_ub), into which it casts the input or output gradient before the
    exchange (fill_userbuffers_buffer_for_all_gather); the reduce-scatters move the GEMM's BF16 output. The split
    GEMMs are priced by the tile model (estimate/gemm.py), `tokens / splits` rows each, UB_COMPUTE_STREAMS chunks at a
    time sharing the waves; the weight-gradient GEMMs are never split."""
    device, dtype = cluster.device, run.activation_bytes
    bandwidth, latency = comm.tp_link(cluster, tp)
    gather = comm.all_gather_seconds(tokens * model.hidden * (1 if run.fp8 else dtype), tp, bandwidth, latency)
    scatter = comm.reduce_scatter_seconds(tokens * model.hidden * dtype, tp, bandwidth, latency)
    low = set(fp8_gemms(model, kind, _ub_gemms_of(model, kind, tokens, tp), tokens)) if run.fp8 else set()

    def passes(gemms: tuple, which: int, splits: int = 1) -> float:
        streams = min(UB_COMPUTE_STREAMS, splits)
        return sum(splits / streams * training_gemm_seconds(g._replace(m=g.m / splits, count=g.count * streams),
                                                           device, dtype, g in low)[which] for g in gemms)

    blocks = []
    for gemms in _ub_block_gemms(model, kind, tokens, tp):
        row = tuple(g for g in gemms if g.n == model.hidden)
        column = tuple(g for g in gemms if g.n != model.hidden)
        blocks.append(UbBlock(gather, scatter, tuple(passes(column, i) for i in range(3)),
                              tuple(passes(row, i) for i in range(3)), passes(column, 0, tp),
                              passes(row, 0, PIPELINE.num_splits), passes(row, 1, tp)))
    return tuple(blocks)


def _unfused_core_elementwise(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, kind: str,
                              degrees: Degrees) -> float:
    """Without flash attention, the score matrix's elementwise passes a re-run attention core repeats."""
    tokens, dtype, tp, sp = degrees.tokens(run.seq_len), run.activation_bytes, degrees.tp, degrees.sp
    return memory_seconds(elementwise_bytes(model, kind, tokens, run.seq_len, tp, sp, False, dtype)
                          - elementwise_bytes(model, kind, tokens, run.seq_len, tp, sp, True, dtype), cluster.device)


__all__ = ["LayerTime", "ZERO_TIME", "layer_time", "tp_all_reduce_seconds"]
