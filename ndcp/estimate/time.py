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
from ..specs.run import FP32_BYTES, RunSpec
from ..schedules import schedule_named
from ..specs.recompute import HEAVIEST_FIRST, NO_RECOMPUTE
from ..specs.strategy import Strategy
from . import communication as comm
from ..specs.encoder import encoder_run, image_side
from .compute import (encoder_gemms, memory_seconds, model_flops_per_step, mtp_projection_gemm, output_layer_gemm,
                      total_flops)
from .data_parallel import Windows, data_parallel_seconds
from .fp8 import bf16_layer_kinds, bf16_run
from .gemm import gemm_seconds
from .keys import Degrees, LayerKey, StageKey
from .layer_time import ZERO_TIME, LayerTime, layer_time, tp_all_reduce_seconds
from .layout import stage_mode_counts
from .overlap import HIDDEN_KEYS, NO_OVERLAP, layer_overlaps, strategy_overlaps
from .trainers import loss_kernel

# The eager PyTorch loss (RunSpec.loss_kernel eager: torchtitan, and the PyTorch trainers' rows) as ndcp has priced it
# since before the per-kernel counts below (not recounted op by op): 3 forward passes over the fp32 logits (read for
# the max, read for the sum-exp, write the softmax) and 2 backward (read the softmax, write the logit gradient)
EAGER_LOSS_PASSES = (3, 2)
# A compiled loss (RunSpec.compile_loss; Inductor's kernels as checked in docs/formulas.md §5.6) on the 16-bit logits:
# forward one kernel reads them for the row max, then for the sum-exp and the target; backward one reads them and
# writes their gradient
COMPILED_LOSS_PASSES = (2, 2)
LOSS_ALL_REDUCES = 3  # vocab-parallel cross entropy: max, sum-exp and target logit over TP (Megatron cross_entropy.py)


def _embedding_time(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, tokens: float, tp: int,
                    sp: bool) -> LayerTime:
    """Vocab-parallel embedding lookup (memory-bound) and its output all-reduce (reduce-scatter with SP)."""
    device = cluster.device
    rows = memory_seconds(tokens * model.hidden * run.activation_bytes, device)
    bandwidth, latency = comm.tp_link(cluster, tp)
    nbytes = tokens * model.hidden * run.activation_bytes
    collective = comm.reduce_scatter_seconds if sp else comm.all_reduce_seconds
    return LayerTime(rows, rows, 0.0, collective(nbytes, tp, bandwidth, latency), 0.0, 0.0)


def _encoder_time(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, degrees: Degrees) -> LayerTime:
    """The vision encoder and projector, on the stage that embeds (docs/models.md §5): mbs x images_per_sample
    images through its bidirectional layers (TP and SP as the language model's; CP does not split an image, no
    recompute), and its patch-embedding and projector GEMMs."""
    images_run = encoder_run(model.encoder, run)
    if images_run is None:
        return ZERO_TIME
    images, tp = degrees.mbs * run.images_per_sample, degrees.tp
    layers = layer_time(model.encoder_model, cluster, images_run,
                        LayerKey("dense", NO_RECOMPUTE, Degrees(tp, 1, 1, 1, images, degrees.sp)))
    gemms = encoder_gemms(model, images, image_side(model.encoder, run), tp)
    linear = gemm_seconds(gemms, cluster.device, run.activation_bytes)
    return layers.scaled(model.encoder.layers) + LayerTime(linear, 2 * linear, 0.0, 0.0, 0.0, 0.0,
                                                           3 * total_flops(gemms), wgrad=linear)


def loss_bytes_per_logit(run: RunSpec) -> tuple[float, float]:
    """HBM bytes per logit (of the vocabulary shard) the loss moves, (forward, backward), by its kernel
    (RunSpec.loss_kernel, else the trainer's: TrainerBehaviour.loss_kernel; docs/formulas.md §3.5). `a` is the
    logits' dtype (the output GEMM writes them in the activation dtype); a cast to fp32 reads a and writes 4 bytes,
    the gradient's cast back reads 4 and writes a (autograd casts a custom Function's fp32 input gradient to its
    input's dtype). Counted from the code, one pass per op (a kernel of its own) unless fused:
    - unfused: Megatron-Core tensor_parallel/cross_entropy.py (core_r0.8.0; the same ops at d98e8a6)
      _VocabParallelCrossEntropy: forward `.float()` (a + 4), max (4), in-place subtract of the max (8), in-place
      exp (8), sum (4), in-place divide (8): a + 36; backward in-place multiply by the per-token output gradient (8)
      and the cast of the fp32 gradient (4 + a): 12 + a. 52 bytes in bf16 (13 fp32 passes).
    - native: Megatron-Core fusions/fused_cross_entropy.py (--cross-entropy-loss-fusion, impl native): the same ops in
      three `jit_fuser` functions forward, one backward, each one kernel reading its inputs and writing its outputs
      once: cast and max (a + 4), subtract, exp and sum (8), divide (8); backward the gradient written in bf16 (4 +
      a): 28 bytes in bf16.
    - te: Transformer Engine pytorch/triton/cross_entropy.py (@d0067d0; Megatron's --cross-entropy-fusion-impl te):
      forward online_softmax_kernel reads the logits (a) and cross_entropy_kernel reads them again and writes the
      fp32 gradient (a + 4); backward element_mul_kernel scales it in place (8; Megatron's per-token output gradient
      is not the scalar 1 that skips it) and autograd's cast to the input dtype (4 + a): 22 bytes in bf16.
    - flash: flash-attn's fused cross entropy (flash_attn/ops/triton/cross_entropy.py @058ad35, what
      flash_attn.losses.cross_entropy.CrossEntropyLoss runs; llm-foundry's MPT loss_fn fused_crossentropy): forward
      cross_entropy_fwd_kernel reads the 16-bit logits once (online softmax: max and sum-exp together, a); backward
      cross_entropy_bwd_kernel reads them and writes the gradient in their dtype (2a): 6 bytes in bf16.
    - eager: EAGER_LOSS_PASSES over fp32 logits, 20 bytes (as priced before, not recounted).
    - compiled (RunSpec.compile_loss): COMPILED_LOSS_PASSES over the 16-bit logits, 8 bytes in bf16."""
    a = run.activation_bytes
    if run.compile_loss:
        return COMPILED_LOSS_PASSES[0] * a, COMPILED_LOSS_PASSES[1] * a
    f = FP32_BYTES
    rw = 2 * f  # an in-place pass over the fp32 logits: read and write
    cast, cast_back = a + f, f + a  # counted for fp32 logits too, where `.float()` copies nothing (an over-count)
    return {"unfused": (cast + f + rw + rw + f + rw, rw + cast_back),
            "native": (cast + rw + rw, cast_back),
            "te": (2 * a + f, rw + cast_back),
            "flash": (a, 2 * a),
            "eager": (EAGER_LOSS_PASSES[0] * f, EAGER_LOSS_PASSES[1] * f)}[loss_kernel(run)]


@lru_cache(maxsize=65536)  # shared by the MTP variants (ep, etp, overlaps) of _stage_extra_time
def _output_head_time(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, tokens: float, tp: int,
                      sp: bool) -> LayerTime:
    """Final norm, vocab-parallel output GEMM and the cross-entropy loss (memory-bound: loss_bytes_per_logit over
    the vocabulary shard's logits)."""
    device, dtype = cluster.device, run.activation_bytes
    norm_tokens = tokens / tp if sp else tokens
    norm = memory_seconds(2 * norm_tokens * model.hidden * dtype, device)
    logits_gemm = output_layer_gemm(model, tokens, tp)
    logits = gemm_seconds((logits_gemm,), device, dtype)
    forward_bytes, backward_bytes = loss_bytes_per_logit(run)
    shard = tokens * model.vocab / tp
    forward = norm + logits + memory_seconds(forward_bytes * shard, device)
    backward = 2 * (norm + logits) + memory_seconds(backward_bytes * shard, device)
    tp_comm = 0.0
    if tp > 1:
        bandwidth, latency = comm.tp_link(cluster, tp)
        tp_comm = (tp_all_reduce_seconds(cluster, tokens * model.hidden * dtype, tp)
                   + LOSS_ALL_REDUCES * comm.all_reduce_seconds(tokens * FP32_BYTES, tp, bandwidth, latency))
    return LayerTime(forward, backward, 0.0, tp_comm, 0.0, 0.0, 3 * logits_gemm.flops, wgrad=logits)


def _mtp_time(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, key: StageKey) -> LayerTime:
    """All MTP modules: 2h->h projection, one transformer layer and the shared output head each (DeepSeek-V3 §2.2)."""
    if not model.mtp_depth:
        return ZERO_TIME
    tp, tokens = key.degrees.tp, key.degrees.tokens(run.seq_len)
    block = (_mtp_projection_time(model, cluster, run, tokens, tp)
             + layer_time(model, cluster, run, key.layer(model.mtp_layer_kind, NO_RECOMPUTE))
             + _output_head_time(model, cluster, run, tokens, tp, key.degrees.sp))
    return block.scaled(model.mtp_depth)


@lru_cache(maxsize=65536)  # shared by the MTP variants (cp, mbs with the same tokens; ep, etp, overlaps)
def _mtp_projection_time(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, tokens: float, tp: int) -> LayerTime:
    """An MTP module's 2h->h projection of `tokens` tokens, TP-split."""
    projection_gemm = mtp_projection_gemm(model, tokens)
    projection = gemm_seconds((projection_gemm,), cluster.device, run.activation_bytes) / tp
    return LayerTime(projection, 2 * projection, 0.0, 0.0, 0.0, 0.0, 3 * projection_gemm.flops / tp, wgrad=projection)


def stage_extra_time(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, role: str, key: StageKey) -> LayerTime:
    """Work outside the body layers: "first" = embedding; "last" = final norm, output layer, loss and MTP modules;
    "only" (pp = 1) = both; anything else = nothing. The key's ep/etp (and its overlaps) shape the MTP module's MoE
    layer (only). Under fp8, the first and last body layers Megatron keeps in BF16 add what BF16 costs them over
    FP8 (bf16_layers_time) to the role whose virtual stage holds them."""
    if role == "only":
        return stage_extra_time(model, cluster, run, "first", key) + stage_extra_time(model, cluster, run, "last", key)
    if role not in ("first", "last"):
        return ZERO_TIME
    if any(run.bf16_layers):
        return bf16_layers_time(model, cluster, run, role, key) + _extra_time(model, cluster, run, role, key)
    return _extra_time(model, cluster, run, role, key)


def bf16_layers_time(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, role: str, key: StageKey) -> LayerTime:
    """What the body layers Megatron's --first-last-layers-bf16 keeps in BF16 (RunSpec.bf16_layers: the first N
    layers on the "first" role, the last M on the "last"; global layer numbers, Megatron-Core fp8_utils.py
    is_first_last_bf16_layer @d98e8a6, counted over a hybrid model's blocks) cost over the same layers in FP8, one
    micro-batch: each runs as its kind's layer in a BF16 run (get_fp8_context returns nullcontext for it: its
    GEMMs at the BF16 rate, no FP8 casts, no amax reductions, BF16 userbuffers) less that layer in the FP8 run
    (docs/formulas.md §3.1). Priced without recompute, on the stage of the embedding or the loss (the first and
    last virtual stages hold them while N fits there): what a recompute re-runs of them at the BF16 rate is
    bf16_rerun_time's, which knows the stage's plan. Unvalidated: no measured run keeps layers in BF16."""
    total, bf16 = ZERO_TIME, bf16_run(run)
    for kind, n in bf16_layer_kinds(model, run, role):
        layer = key.layer(kind, NO_RECOMPUTE)
        extra = layer_time(model, cluster, bf16, layer) + layer_time(model, cluster, run, layer).scaled(-1.0)
        total = total + extra.scaled(n)
    return total


def bf16_rerun_time(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, schedule: str, stage: int, pp: int,
                    key: StageKey, mode_counts) -> LayerTime:
    """What the body layers kept in BF16 (bf16_layers_time's) add when recomputed, one micro-batch on device stage
    `stage` whose plan is `mode_counts` (((kind, mode), layers) pairs): their re-run at the BF16 rate less the same
    re-run in the FP8 run (the `recompute` part of layer_time, every piece: full recompute's layer forward,
    selective's core, the modules' GEMMs, an offloaded layer's host copies). Megatron-LM d98e8a6 re-runs a fully
    recomputed layer in its own `get_fp8_context(config, layer.layer_number - 1)` (core/recompute.py
    checkpointed_forward custom_forward): nullcontext() for a BF16 layer; a module's re-run in Transformer Engine's
    checkpoint enters `autocast(enabled=ctx.fp8)` with the forward's FP8 state (TE 2.14, 71bbefbf,
    pytorch/distributed.py _CheckpointFunction.backward): off for it. The stage's modes are not placed per layer:
    each kind's BF16 layers take its heaviest modes first (bf16_layer_modes), as Megatron's block method recomputes
    a chunk's first layers; for the last layers an upper bound. Each layer's part is at least 0 (conservative where
    FP8's casts would make its re-run slower) and hides no data-parallel collective (_dp_windows): the per-layer
    plan's form, which prices the BF16 layers without recompute, stays a relaxation. Unvalidated: no measured run keeps layers in BF16 (docs/formulas.md §3.1)."""
    if not any(run.bf16_layers) or not any(mode != NO_RECOMPUTE for (_, mode), _ in mode_counts):
        return ZERO_TIME
    return _bf16_rerun_time(model, cluster, run, schedule_named(schedule).extra_roles(stage, pp), key, mode_counts)


@lru_cache(maxsize=4096)
def _bf16_rerun_time(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, roles: tuple, key: StageKey,
                     mode_counts) -> LayerTime:
    """bf16_rerun_time of a stage with the schedule's `roles` (Schedule.extra_roles), cached: a stage's time
    (_stage_time) and its data-parallel windows (_dp_windows) both ask for it."""
    total, left = ZERO_TIME, dict(mode_counts)
    for role, share in roles:
        for (kind, mode), n in bf16_layer_modes(model, run, role, left):
            rerun = _bf16_rerun_seconds(model, cluster, run, key.layer(kind, mode))
            total = total + LayerTime(0.0, 0.0, share * n * rerun, 0.0, 0.0, 0.0)
    return total


def bf16_layer_modes(model: ModelSpec, run: RunSpec, role: str, left: dict) -> tuple[tuple[tuple[str, str], int], ...]:
    """((kind, recompute mode), layers) of the BF16 layers a stage role holds (fp8.bf16_layer_kinds; "only" both
    ends), each kind's taking the heaviest modes first (specs/recompute.py HEAVIEST_FIRST) from `left` (the stage's
    (kind, mode) -> layers not yet taken, updated in place)."""
    out = []
    for end in (("first", "last") if role == "only" else (role,)):
        for kind, n in bf16_layer_kinds(model, run, end):
            for mode in HEAVIEST_FIRST:
                take = min(n, left.get((kind, mode), 0))
                if take:
                    out.append(((kind, mode), take))
                    left[(kind, mode)] -= take
                    n -= take
    return tuple(out)


@lru_cache(maxsize=4096)
def _bf16_rerun_seconds(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, key: LayerKey) -> float:
    """One BF16 layer's re-run less the same layer's in the FP8 run, at least 0 (bf16_rerun_time)."""
    return max(0.0, layer_time(model, cluster, bf16_run(run), key).recompute - layer_time(model, cluster, run,
                                                                                            key).recompute)


def _extra_time(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, role: str, key: StageKey) -> LayerTime:
    """stage_extra_time's embedding, output head and MTP modules, its key reduced to what they depend on."""
    degrees, cp_comm, hidden = key
    if not model.mtp_depth or role == "first":  # nothing else depends on ep, etp or overlaps: share the cached terms
        degrees = degrees.without_experts()
        hidden = NO_OVERLAP
    else:  # the MTP layer's own overlaps (as _mtp_time's layer_time reads them): the others change nothing here
        hidden = layer_overlaps(hidden, model.mtp_layer_kind, NO_RECOMPUTE)
    if not model.mtp_depth or degrees.cp == 1:
        cp_comm = "p2p"
    if degrees is not key.degrees or cp_comm != key.cp_comm or hidden != key.hidden:
        key = StageKey(degrees, cp_comm, hidden)
    return _stage_extra_time(model, cluster, run, role, key)


@lru_cache(maxsize=65536)
def _stage_extra_time(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, role: str, key: StageKey) -> LayerTime:
    degrees = key.degrees
    tokens, tp, sp = degrees.tokens(run.seq_len), degrees.tp, degrees.sp
    if role == "first":
        return _embedding_time(model, cluster, run, tokens, tp, sp) + _encoder_time(model, cluster, run, degrees)
    return _output_head_time(model, cluster, run, tokens, tp, sp) + _mtp_time(model, cluster, run, key)


def stage_extra(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, schedule: str, stage: int, pp: int,
                key: StageKey) -> LayerTime:
    """One micro-batch's work outside the body layers on device stage `stage`: the shares of the roles the
    schedule gives it (Schedule.extra_roles: the first stage embeds, the last computes the loss, unless the
    schedule places them otherwise)."""
    total = ZERO_TIME
    for role, share in schedule_named(schedule).extra_roles(stage, pp):
        part = stage_extra_time(model, cluster, run, role, key)
        total = total + (part if share == 1 else part.scaled(share))
    return total


def p2p_seconds(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, tp: int, cp: int, mbs: int, sp: bool,
                pp_link: comm.Link) -> float:
    """One activation (or gradient) send between pipeline stages over `pp_link`: b*s*h/(cp*tp) elements per rank
    (scatter/gather optimisation, Narayanan §4.1; already sharded under SP), re-gathered over the TP group without
    SP."""
    full = mbs * run.seq_len / cp * model.hidden * run.activation_bytes
    send = comm.p2p_seconds(full / tp, *pp_link)
    if tp > 1 and not sp:
        send += comm.all_gather_seconds(full, tp, *comm.tp_link(cluster, tp))
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
             "pp_comm", "bubble", "optimizer", "step_costs", "grad_passes")


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
    key = StageKey(Degrees.of_strategy(s), s.cp_comm, strategy_overlaps(run, s))
    total = (stage_extra(model, cluster, run, s.schedule, stage, s.pp, key)
             + bf16_rerun_time(model, cluster, run, s.schedule, stage, s.pp, key, mode_counts))
    for (kind, mode), n in mode_counts:
        total = total + layer_time(model, cluster, run, key.layer(kind, mode)).scaled(n)
    return total


def _p2p_sends(model, cluster, run, strategy: Strategy) -> float:
    s = strategy
    return pipeline_p2p_seconds(model, cluster, run, s.pp, s.vpp, Degrees.of_strategy(s),
                                pipeline_link(cluster, s.tp, s.cp, s.dp))


def p2p_per_microbatch(model, cluster, run, strategy: Strategy) -> float:
    """A stage's exposed sends per micro-batch: activation forward and gradient backward at each of its vpp
    chunks, none when the strategy overlaps them (estimate/overlap.py)."""
    return 0.0 if "p2p" in strategy_overlaps(run, strategy) else _p2p_sends(model, cluster, run, strategy)


def pipeline_link(cluster: ClusterSpec, tp: int, cp: int, dp: int) -> comm.Link:
    """The link between neighbouring pipeline stages (ranks ordered TP -> CP -> DP -> PP): scale-up when two
    stages' tp x cp x dp ranks share a scale-up domain, else scale-out (communication.link)."""
    return comm.link(cluster, 2 * tp * cp * dp)


@lru_cache(maxsize=65536)
def pipeline_p2p_seconds(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, pp: int, vpp: int, degrees: Degrees,
                         pp_link: comm.Link) -> float:
    """p2p_per_microbatch from the fields it depends on (shared by every dp with the same pipeline link)."""
    if pp == 1:
        return 0.0
    return 2 * vpp * p2p_seconds(model, cluster, run, degrees.tp, degrees.cp, degrees.mbs, degrees.sp, pp_link)


def stage_times(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, strategy: Strategy) -> list[LayerTime]:
    """Per device stage: one micro-batch's time by part (body layers and the stage's extra work, without p2p).
    Stages with the same extra work and layers share one computation (the middle stages of a deep pipeline)."""
    roles, pp = schedule_named(strategy.schedule).extra_roles, strategy.pp
    known: dict = {}
    out = []
    for i, counts in enumerate(stage_mode_counts(model, strategy)):
        key = (roles(i, pp), counts)
        if key not in known:
            known[key] = _stage_time(model, cluster, run, strategy, i, counts)
        out.append(known[key])
    return out


def overlap_windows(stages: list[LayerTime]) -> list[Windows]:
    """Each stage's DP overlap windows: one micro-batch's forward and backward wall time on it."""
    return [Windows(t.forward_window, t.backward_window) for t in stages]


def _dp_windows(model, cluster, run, strategy: Strategy, stages: list[LayerTime]) -> list[Windows]:
    """The stages' DP overlap windows (overlap_windows) less the BF16 layers' re-run at the BF16 rate
    (bf16_rerun_time): conservatively it hides no data-parallel collective, so the per-layer plan form, which leaves
    it out of its stage times and windows alike, stays a lower bound of this estimate (docs/solver.md §7)."""
    windows = overlap_windows(stages)
    if not any(run.bf16_layers):
        return windows
    s = strategy
    key = StageKey(Degrees.of_strategy(s), s.cp_comm, strategy_overlaps(run, s))
    return [Windows(w.forward, w.backward - bf16_rerun_time(model, cluster, run, s.schedule, stage, s.pp, key,
                                                              counts).recompute)
            for stage, (w, counts) in enumerate(zip(windows, stage_mode_counts(model, s)))]


def estimate_time(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, strategy: Strategy) -> TimeEstimate:
    """Step time = pipeline(slowest per-micro-batch stage time, sum of the stages' fills) + exposed DP sync +
    optimizer step + the step's fixed costs + FSDP's gradient passes; the communication overlapped with compute
    reported apart (TimeEstimate.hidden)."""
    s = strategy
    stages = stage_times(model, cluster, run, s)
    p2p = p2p_per_microbatch(model, cluster, run, s)
    totals = [t.total + p2p for t in stages]
    slowest = max(range(len(stages)), key=totals.__getitem__)
    stage_max = totals[slowest]
    pipeline = pipeline_seconds(s.schedule, sum(stage_fill(s.schedule, t, p2p) for t in stages), stage_max, s.mbn,
                                s.vpp, s.pp)
    worst = stages[slowest]
    dp_comm, optimizer, step_costs, grad_passes = data_parallel_seconds(model, cluster, run, s,
                                                                        _dp_windows(model, cluster, run, s, stages))
    step = pipeline + dp_comm + optimizer + step_costs + grad_passes

    parts = {"compute_forward": s.mbn * worst.forward, "compute_backward": s.mbn * worst.backward,
             "recompute": s.mbn * worst.recompute, "tp_comm": s.mbn * worst.tp_comm, "cp_comm": s.mbn * worst.cp_comm,
             "ep_comm": s.mbn * worst.ep_comm, "dp_comm": dp_comm, "pp_comm": s.mbn * p2p,
             "bubble": pipeline - s.mbn * stage_max, "optimizer": optimizer, "step_costs": step_costs,
             "grad_passes": grad_passes}

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


__all__ = ["stage_extra_time", "stage_extra", "bf16_layers_time", "bf16_rerun_time", "bf16_layer_modes",
           "p2p_seconds", "pipeline_seconds", "stage_fill", "TimeEstimate", "estimate_time", "stage_times",
           "overlap_windows", "stage_mode_counts", "PART_KEYS", "p2p_per_microbatch", "pipeline_link",
           "pipeline_p2p_seconds"]
