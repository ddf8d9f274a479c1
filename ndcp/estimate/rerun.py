"""What the recompute modules re-run in backward (specs/recompute.py MODULES: Megatron-Core's, docs/formulas.md §5.2,
and MindFormers' select set, §5.4):
seconds and executed matmul FLOPs of each forward piece, for one body layer and one micro-batch on one device.

The whole-layer and attention-core pieces are priced with the layer itself (estimate/layer_time.py); these are the
module pieces: the pre-norms (memory-bound), the dense MLP (its GEMMs, activation and its half of the layer's TP
forward communication), the MoE block (router, routing work, experts and shared experts, activation, dispatch and
combine), the experts' activation alone, the dense MLP's activation alone, and MLA's up-projections. The norms
re-run are the ones Megatron-Core keeps as separate modules (specs/recompute.py attention_norm_fused): MLA's input
norm and a MoE layer's pre-MLP norm; a non-MLA attention's norm is fused into linear_qkv and a dense MLP's into fc1
(Transformer Engine LayerNormLinear), which re-runs with the MLP. torchtitan's `selective` is its own op-level
policy, priced here too (OP_LEVEL_SAC: every second mm of the block, its element-wise forward, never the attention
kernel; trainer_reruns, docs/formulas.md §5.7).

A hybrid model's layer of a kind is its blocks' average (ModelSpec.mixer_shares), and a piece re-runs on the blocks
its module acts on (specs/recompute.py RecomputeModule.block, from Megatron-Core's hybrid layer specs): the norms on
the MoE blocks only (one norm each; the Mamba-2, attention and dense MLP blocks fuse theirs into their first
linear), the dense MLP on the dense MLP blocks' share with their one TP pair, the MoE pieces on the MoE blocks (the
whole MoE kind); estimate/layer_time.py re-runs the attention blocks' cores, not the Mamba-2 scans.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..specs.device import ClusterSpec
from ..specs.model import ModelSpec
from ..specs.recompute import (ATTENTION_CORE, HOST_OFFLOAD, MLA_UP_PROJECTION, MLP_ACTIVATION, MLP_FORWARD,
                               MOE_ACTIVATION, MOE_FORWARD, NORMS, OP_LEVEL_SAC, attention_norm_fused)
from ..specs.run import RunSpec
from .activations import offloaded_layer_bytes, op_sac_recomputed_mms, torchtitan_modelled
from .compute import (block_projection_gemm, fp8_gemms, layer_gemms, memory_seconds, mla_up_projection_gemms,
                      mlp_gemms, moe_gemms, total_flops)
from .fp8 import layer_cast_bytes
from .fusion import layer_elementwise_bytes
from .gemm import weight_gemm_seconds
from .host_link import offload_copy_bandwidth
from .keys import LayerKey
from .moe import routing_bytes
from .trainers import trainer_behaviour

MODULE_PIECES = (NORMS, MLP_FORWARD, MLP_ACTIVATION, MOE_FORWARD, MOE_ACTIVATION, MLA_UP_PROJECTION, HOST_OFFLOAD,
                 OP_LEVEL_SAC)


@dataclass(frozen=True)
class LayerShape:
    """What every module piece reads of its layer: its key (kind, recompute option, degrees), local tokens, and the
    layer's own forward communication and compute."""

    key: LayerKey
    tokens: float  # local tokens of the micro-batch (mbs x seq / cp)
    tp_forward: float  # the layer's exposed forward TP communication (two collectives: attention's and the MLP's)
    ep_forward: float  # the layer's exposed forward dispatch + combine all-to-alls
    forward: float  # the layer's forward and backward compute, seconds (what host copies overlap with)
    backward: float
    core: float = 0.0  # the attention core's forward, seconds, and its matmul FLOPs
    core_flops: float = 0.0


def trainer_reruns(model: ModelSpec, run: RunSpec, kind: str, reruns: tuple[str, ...]) -> tuple[str, ...]:
    """An option's pieces as the run's trainer re-runs them: on the layers whose activations follow its op-level
    inventory (activations.py torchtitan_modelled, the condition layer_activation_bytes keeps them by), the
    attention core's piece is the trainer's own selective policy's (TrainerBehaviour.selective_reruns); elsewhere,
    and for Megatron-Core and MindFormers (ATTENTION_CORE), the option's own."""
    if ATTENTION_CORE not in reruns or not (trainer_behaviour(run).op_level_inventory
                                            and torchtitan_modelled(model, kind)):
        return reruns
    own = trainer_behaviour(run).selective_reruns
    return tuple(p for piece in reruns for p in (own if piece == ATTENTION_CORE else (piece,)))


def _op_level_sac(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, shape: LayerShape) -> tuple[float, float]:
    """(seconds, matmul FLOPs) of torchtitan's op-level SAC re-run (specs/trainer_behaviour.py TORCHTITAN
    selective_reruns; docs/formulas.md §5.7), priced with the forward's own helpers:
    - the forward GEMMs of every second mm of the block (activations.op_sac_recomputed_mms: 0.3.0's wo and w3; wk,
      wo and w3 with separate projections, RunSpec.qkv_projections), at the run's precision: torchao's Float8Linear is counted by the policy as aten.mm, so under FP8 the same ones;
    - the block's element-wise forward as the trainer runs it (fusion.py layer_elementwise_bytes, eager or
      compiled): PREFER_RECOMPUTE covers every op but the saved ones. Compiled, AOTAutograd's partitioner re-runs
      only what the backward reads (all of it but the last residual add): the whole is charged, an upper bound;
    - under FP8 the torchao casts (fp8.py layer_cast_bytes, forward): eager the checkpoint re-runs the whole
      forward, every linear's casts; compiled only the re-run mms' (their amax, saved by aten.max, charged again);
    - under TP the forward collectives the policy does not save and the backward reads, half the forward's
      collective time either way: with SP the all-gathers of norm 1's and norm 2's outputs, the inputs wqkv and w1
      save (the reduce-scatters are saved); without SP the all-reduce of wo's output, which the residual and norm 2
      read (w2's all-reduced output feeds only the block output, which no gradient reads);
    - without flash attention the math SDPA (not in the save list) re-runs whole: its core.
    The attention kernel's forward does not re-run (its output and logsumexp are saved). Context parallelism's
    exchanges inside the attention are not re-run here (not read: unpriced)."""
    kind, degrees, device = shape.key.kind, shape.key.degrees, cluster.device
    tokens, tp = shape.tokens, degrees.tp
    gemms = tuple(block_projection_gemm(model, name, tokens, tp) for name in op_sac_recomputed_mms(model, run))
    seconds = (weight_gemm_seconds(model, kind, gemms, tokens, device, run)
               + memory_seconds(layer_elementwise_bytes(model, run, kind, tokens, run.seq_len, tp, degrees.sp),
                                device))
    if run.fp8:
        cast = gemms if run.torch_compile else fp8_gemms(model, kind, layer_gemms(model, kind, tokens, tp), tokens)
        seconds += memory_seconds(layer_cast_bytes(run, device, cast)[0], device)
    seconds += shape.tp_forward / 2
    flops = total_flops(gemms)
    if not run.flash_attention:
        seconds, flops = seconds + shape.core, flops + shape.core_flops
    return seconds, flops


def _activation_seconds(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, rows: float, width: float) -> float:
    """An MLP activation over rows x width elements: reads its input(s), writes its output."""
    return memory_seconds(rows * width * (3 if model.gated else 2) * run.activation_bytes, cluster.device)


def _cast_seconds(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, kind: str, gemms, tokens: float) -> float:
    """The forward FP8 casts of re-run GEMMs (0 in a 16-bit run; the MoE router BF16): as a forward casts them
    (fp8.py layer_cast_bytes: the inputs, the weights only where they are cast every micro-batch). Megatron-Core
    re-runs the `mlp` and `moe` modules under FP8 through Transformer Engine's checkpoint (`te_checkpoint`,
    transformer_layer.py and moe/moe_layer.py @d98e8a6), which restores the forward's FP8 state."""
    if not run.fp8:
        return 0.0
    cast = layer_cast_bytes(run, cluster.device, fp8_gemms(model, kind, gemms, tokens))[0]
    return memory_seconds(cast, cluster.device)


def _norm_seconds(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, shape: LayerShape, norms: float) -> float:
    degrees = shape.key.degrees
    rows = shape.tokens / degrees.tp if degrees.sp else shape.tokens
    return memory_seconds(norms * 2 * rows * model.hidden * run.activation_bytes, cluster.device)


def rerun_cost(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, shape: LayerShape, piece: str,
               reruns: tuple[str, ...]) -> tuple[float, float]:
    """(seconds, matmul FLOPs) of one module piece of `reruns` (the option's pieces: the whole MLP covers its
    activation); (0, 0) when the piece does not act on this kind of layer."""
    tokens, tp, kind = shape.tokens, shape.key.degrees.tp, shape.key.kind
    if piece == OP_LEVEL_SAC:
        return _op_level_sac(model, cluster, run, shape)
    if piece == NORMS:  # the norms that are separate modules: MLA's input norm, a MoE layer's (block's) pre-MLP norm
        shares = model.mixer_shares(kind)
        attention = 0.0 if attention_norm_fused(model.mla is not None, model.hybrid_blocks) else shares.attention
        return _norm_seconds(model, cluster, run, shape, attention + (shares.mlp if kind == "moe" else 0.0)), 0.0
    if piece == MLP_FORWARD:
        if kind != "dense":
            return 0.0, 0.0
        gemms = mlp_gemms(model, model.ffn_hidden, tokens, tp)
        seconds = (weight_gemm_seconds(model, kind, gemms, tokens, cluster.device, run)
                   + _cast_seconds(model, cluster, run, kind, gemms, tokens)
                   + _activation_seconds(model, cluster, run, tokens, model.ffn_hidden / tp)
                   + _norm_seconds(model, cluster, run, shape, 1))
        if model.hybrid_blocks:  # the dense MLP blocks' share of the kind, each with the block's one TP pair
            share = model.mixer_shares(kind).mlp
            return share * (seconds + shape.tp_forward), share * total_flops(gemms)
        return seconds + shape.tp_forward / 2, total_flops(gemms)
    if piece == MLP_ACTIVATION:  # elementwise, as the experts' activation below: memory-bound, no matmul FLOPs
        if kind != "dense" or MLP_FORWARD in reruns:  # the whole MLP re-runs it already
            return 0.0, 0.0
        share = model.mixer_shares(kind).mlp if model.hybrid_blocks else 1.0  # a hybrid kind's dense MLP blocks
        return share * _activation_seconds(model, cluster, run, tokens, model.ffn_hidden / tp), 0.0
    if kind != "moe" and piece in (MOE_FORWARD, MOE_ACTIVATION):
        return 0.0, 0.0
    if piece == MOE_FORWARD:
        m = model.moe
        etp = shape.key.degrees.etp
        gemms = moe_gemms(model, tokens, tp, shape.key.degrees.ep, etp, imbalance=run.moe_load_imbalance)
        width = (m.expert_ffn_hidden * m.top_k * (m.capacity_factor or 1.0) + m.shared_hidden * m.shared_experts)
        routing = memory_seconds(routing_bytes(model, run, tokens, tp, shape.key.degrees.ep, etp).forward,
                                 cluster.device)  # routes again
        seconds = (weight_gemm_seconds(model, kind, gemms, tokens, cluster.device, run) + routing
                   + _cast_seconds(model, cluster, run, kind, gemms, tokens)
                   + _activation_seconds(model, cluster, run, tokens, width / tp) + shape.ep_forward)
        return seconds, total_flops(gemms)
    if piece == MOE_ACTIVATION:
        m = model.moe
        width = m.expert_ffn_hidden * m.top_k * (m.capacity_factor or 1.0)
        return _activation_seconds(model, cluster, run, tokens, width / tp), 0.0
    if piece == MLA_UP_PROJECTION:
        if model.mla is None:
            return 0.0, 0.0
        gemms = mla_up_projection_gemms(model, tokens, tp)
        return (weight_gemm_seconds(model, kind, gemms, tokens, cluster.device, run)
                + _cast_seconds(model, cluster, run, kind, gemms, tokens), total_flops(gemms))
    if piece == HOST_OFFLOAD:
        # The activations a layer would keep, less its input, cross the host link each way: to the host while the
        # next layer runs its forward, back while the layer after it (in backward order) runs its backward (the
        # prefetch); only what outlasts that compute is exposed, at the bandwidth the host links leave a device
        # (estimate/host_link.py; docs/formulas.md §5.3).
        moved = offloaded_layer_bytes(model, run, kind, shape.key.mode, shape.key.degrees)
        copy = moved / offload_copy_bandwidth(cluster)
        return max(0.0, copy - shape.forward) + max(0.0, copy - shape.backward), 0.0
    raise ValueError(f"no time model for recompute piece {piece!r}")


__all__ = ["LayerShape", "MODULE_PIECES", "rerun_cost", "trainer_reruns"]
