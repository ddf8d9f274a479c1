"""Hybrid layers in the estimators (estimate/mixers.py, docs/formulas.md §2.7): each mixer's FLOPs against a hand
count, attention cost growing with the context only on the full-attention layers, and the activations a scan keeps
instead of a KV-sized score path."""
import dataclasses

import pytest

from ndcp.estimate.activations import layer_activation_bytes
from ndcp.estimate.compute import layer_forward_flops, mixer_core_flops
from ndcp.estimate.keys import Degrees
from ndcp.estimate.layer_time import _layer_passes, tp_all_reduce_seconds
from ndcp.estimate.communication import all_to_all_seconds, cp_link
from ndcp.estimate.mixers import gated_deltanet_core_flops, mamba_cp_seconds, ssd_core_flops
from ndcp.specs import ClusterSpec, device_preset
from ndcp.specs.library import load_model
from ndcp.specs.run import RunSpec

QWEN3_NEXT = load_model("qwen3-next-80b-a3b")
NEMOTRON_H = load_model("nemotron-h-8b")
S = 131072  # a 128k context


def _attention_layer(model):
    """The same model with softmax attention on every layer (what ndcp priced before mixers)."""
    return dataclasses.replace(model, layer_mixers="", linear_attention=None, mamba=None, hybrid_blocks=False)


def test_each_mixer_core_against_a_hand_count():
    # Gated DeltaNet, per token and value head (chunk 64, K = V = 128): 4 x 64 x 256 + 6 x 128 x 128
    assert gated_deltanet_core_flops(QWEN3_NEXT, S, 1) == S * 32 * (65536 + 98304)
    assert gated_deltanet_core_flops(QWEN3_NEXT, S, 4) == S * 8 * (65536 + 98304)
    # Mamba-2 SSD, per token and head (chunk 128, N = 128, P = 64): 2 x 128 x 192 + 4 x 128 x 64
    assert ssd_core_flops(NEMOTRON_H, S, 1) == S * 128 * (49152 + 32768)
    # causal attention core of a full-attention layer: 2 s (s/2) heads (d_qk + d_v); a quarter of Qwen3-Next's layers
    attention = 2 * S * (S / 2) * 16 * (256 + 256)
    assert mixer_core_flops(QWEN3_NEXT, "moe", S, S, 1, causal=True) == pytest.approx(
        attention / 4 + 0.75 * gated_deltanet_core_flops(QWEN3_NEXT, S, 1))


def test_each_layer_kind_against_a_hand_count():
    h, s = 2048, S
    gdn = 2 * s * (h * (2 * 2048 + 2 * 4096 + 64) + 4096 * h) + gated_deltanet_core_flops(QWEN3_NEXT, s, 1)
    attention = 2 * s * (h * (2 * 4096 + 2 * 512) + 4096 * h) + 2 * s * (s / 2) * 16 * 512
    moe = 2 * s * (h * 512 + 10 * 3 * h * 512 + 3 * h * 512)  # router, 10 routed experts, the shared expert
    assert layer_forward_flops(QWEN3_NEXT, "moe", s, "causal") == pytest.approx((3 * gdn + attention) / 4 + moe)
    # Nemotron-H: a layer is a Mamba-2, an attention or an MLP block; the dense kind averages the 52 of them
    h = 4096
    mamba = 2 * s * (h * (2 * 8192 + 2048 + 128) + 8192 * h) + ssd_core_flops(NEMOTRON_H, s, 1)
    attention = 2 * s * (h * 48 * 128 + 4096 * h) + 2 * s * (s / 2) * 32 * 256
    mlp = 2 * s * 2 * h * 21504
    assert layer_forward_flops(NEMOTRON_H, "dense", s, "causal") == pytest.approx(
        (24 * mamba + 4 * attention + 24 * mlp) / 52)


def test_attention_cost_grows_with_the_context_only_on_full_attention_layers():
    def growth(model, kind):  # per-token mixer-core FLOPs at 128k over those at 4k
        return (mixer_core_flops(model, kind, S, S, 1, True) / S) / (mixer_core_flops(model, kind, 4096, 4096, 1,
                                                                                       True) / 4096)
    full = growth(_attention_layer(QWEN3_NEXT), "moe")
    assert full == pytest.approx(32.0)  # every layer's core grows with the keys: 128k / 4k
    hybrid = growth(QWEN3_NEXT, "moe")
    scan = 0.75 * gated_deltanet_core_flops(QWEN3_NEXT, 1, 1)
    quarter = 2 * (4096 / 2) * 16 * 512 / 4  # the full-attention quarter's per-token core at 4k
    assert hybrid == pytest.approx((scan + 32 * quarter) / (scan + quarter))
    assert 1 < hybrid < full
    # the whole-layer forward at 128k: the hybrid model costs a fraction of the same model with attention everywhere
    assert layer_forward_flops(QWEN3_NEXT, "moe", S, "causal") < 0.35 * layer_forward_flops(
        _attention_layer(QWEN3_NEXT), "moe", S, "causal")


def test_a_scan_keeps_no_score_sized_activations():
    run = RunSpec(global_batch=8, seq_len=S, flash_attention=False)
    degrees = Degrees(1, 1, 1, 1, 1, False)
    hybrid = layer_activation_bytes(NEMOTRON_H, run, "dense", "none", degrees)
    attention = layer_activation_bytes(_attention_layer(NEMOTRON_H), run, "dense", "none", degrees)
    scores = 2 * 32 * S * S  # the unfused softmax output of one attention layer
    assert hybrid < scores / 10 < attention  # only 4 of 52 layers keep scores: the average is a thirteenth
    assert layer_activation_bytes(NEMOTRON_H, run, "dense", "full", degrees) == 2 * S * 4096


def test_a_hybrid_block_has_one_tensor_parallel_reduction_a_layer_two():
    cluster, run = ClusterSpec(device_preset("h100"), 8), RunSpec(global_batch=8, seq_len=8192)
    degrees = Degrees(8, 1, 1, 1, 1, True)
    one = tp_all_reduce_seconds(cluster, 8192 * 4096 * run.activation_bytes, 8)
    block = _layer_passes(NEMOTRON_H, cluster, run, "dense", degrees, "p2p", frozenset())
    layer = _layer_passes(_attention_layer(NEMOTRON_H), cluster, run, "dense", degrees, "p2p", frozenset())
    assert block.tp_total == pytest.approx(one + max(0.0, one - block.linear))
    assert layer.tp_total == pytest.approx(2 * one + max(0.0, 2 * one - layer.linear))


def test_mamba_context_parallelism_is_two_all_to_alls_each_way_on_its_share_of_the_layers():
    cluster, run = ClusterSpec(device_preset("h100"), 8), RunSpec(global_batch=8, seq_len=S)
    degrees = Degrees(2, 4, 1, 1, 1, True)
    tokens, link = S / 4, cp_link(cluster, 2, 4)
    # z, x (8192 each), B and C (8 groups of 128, 4 per TP rank: no repeat at cp 4), dt (128), over tp 2; the output
    into = (2 * 8192 + 2 * 8 * 128 + 128) / 2
    expected = sum(all_to_all_seconds(tokens * w * 2, 4, *link) for w in (into, 8192 / 2))
    assert mamba_cp_seconds(NEMOTRON_H, cluster, run, degrees) == pytest.approx(expected)
    p = _layer_passes(NEMOTRON_H, cluster, run, "dense", degrees, "p2p", frozenset())
    attention_only = _layer_passes(_attention_layer(NEMOTRON_H), cluster, run, "dense", degrees, "p2p", frozenset())
    assert p.cp_forward == pytest.approx(24 / 52 * expected + 4 / 52 * attention_only.cp_forward)
    # B and C repeated over the CP ranks that share a group: 8 groups at tp 8 leave one per rank, cp 4 repeats it
    wide = Degrees(8, 4, 1, 1, 1, True)
    repeated = (2 * 8192 + 2 * 8 * 128 * 4 + 128) / 8
    assert mamba_cp_seconds(NEMOTRON_H, cluster, run, wide) == pytest.approx(sum(
        all_to_all_seconds(tokens * w * 2, 4, *cp_link(cluster, 8, 4)) for w in (repeated, 8192 / 8)))
