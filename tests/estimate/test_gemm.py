"""GEMM and attention-kernel time (estimate/gemm.py, docs/formulas.md §3): what the shape model promises."""
from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from ndcp.estimate.attention_kernels import TRITON_SLOWDOWN, kernel_efficiencies
from ndcp.estimate.compute import FLASH_BACKWARD_RATIO, Gemm
from ndcp.estimate.gemm import (UNFUSED_BACKWARD_RATIO, attention_core_seconds, gemm_efficiency, gemm_pass_seconds,
                                gemm_seconds, training_gemm_seconds)
from ndcp.estimate.keys import Degrees, LayerKey
from ndcp.estimate.layer_time import layer_time
from ndcp.specs import ClusterSpec, ModelSpec, RunSpec, device_preset
from ndcp.specs.fields import SpecError

H100 = device_preset("h100")
# the same chip with HBM out of the way, to look at the compute side (tiles, waves, K loop) alone
COMPUTE_ONLY = replace(H100, hbm_bandwidth=1e30)
PRESETS = [device_preset(n) for n in ("a100-80g", "h100", "h200", "h800", "b200", "mi300x", "ascend-910b")]


def seconds(m, n, k, count=1, device=COMPUTE_ONLY):
    return gemm_pass_seconds(m, n, k, count, device, 2)


def test_one_tile_more_than_the_sms_takes_two_waves():
    tm, tn = H100.gemm_tile_m, H100.gemm_tile_n
    assert (tm, tn) == (128, 256) and H100.sm_count == 132
    full_wave = (12 * tm, 11 * tn)  # 132 tiles: one wave
    one_more = (7 * tm, 19 * tn)  # 133 tiles (either orientation): a second, nearly empty wave
    flops_ratio = one_more[0] * one_more[1] / (full_wave[0] * full_wave[1])
    assert flops_ratio == pytest.approx(1.0076, abs=1e-4)
    assert seconds(*one_more, 8192) / seconds(*full_wave, 8192) == pytest.approx(2.0, rel=1e-12)
    ceiling = H100.compute_efficiency * 8192 / (8192 + k0(COMPUTE_ONLY))
    assert gemm_efficiency(Gemm(full_wave[0], 8192, full_wave[1]), COMPUTE_ONLY, 2) == pytest.approx(ceiling)
    assert gemm_efficiency(Gemm(one_more[0], 8192, one_more[1]), COMPUTE_ONLY, 2) == pytest.approx(
        ceiling * 133 / 264)


def test_rows_are_padded_to_whole_tiles():
    # 129 rows occupy two 128-row tiles: as long as 256 rows, and longer than 128 rows once the tiles fill waves
    n, k = 132 * 256, 4096
    assert seconds(129, n, k) == seconds(256, n, k)
    assert seconds(129, n, k) == pytest.approx(2 * seconds(128, n, k))


def test_skinny_gemms_run_at_memory_speed():
    skinny = Gemm(8, 8192, 8192)  # 8 tokens: the time is reading the weight once
    assert gemm_pass_seconds(8, 8192, 8192, 1, H100, 2) == pytest.approx(skinny.bytes_moved(2) / H100.hbm_bandwidth)
    assert gemm_efficiency(skinny, H100, 2) < 0.05  # ~8 FLOP per byte: far below the ridge point


def test_few_tokens_per_expert_run_slower_than_one_large_gemm_of_the_same_flops():
    grouped = Gemm(16, 4096, 1408, count=64)  # 64 local experts, 16 tokens each
    dense = Gemm(16 * 64, 4096, 1408)
    assert grouped.flops == dense.flops
    assert gemm_seconds([grouped], H100, 2) > 2 * gemm_seconds([dense], H100, 2)
    # all groups share the waves: 64 experts x 6 tiles (128 tokens, 1408 columns) = 384 tiles fill 3 waves of 132
    assert seconds(128, 1408, 4096, count=64) == pytest.approx(3 * seconds(132 * 128, 256, 4096))


def k0(device, dtype_bytes=2):
    """A tile's write-back in K-loop steps: the ridge point (estimate/gemm.py), H100 bf16 about 200."""
    return dtype_bytes * device.peak_flops * device.compute_efficiency / (2 * device.hbm_bandwidth)


def test_short_k_loops_pay_the_tile_write_back():
    assert 150 < k0(H100) < 250 and 80 < k0(device_preset("a100-80g")) < 140
    # one full wave (12 x 11 tiles of 128 x 256), compute-bound at both depths on a real H100
    short, long = (gemm_efficiency(Gemm(12 * 128, k, 11 * 256), H100, 2) for k in (512, 8192))
    c = k0(H100)
    assert short / long == pytest.approx((512 / (512 + c)) / (8192 / (8192 + c)))


def test_gemm_seconds_charges_a_third_of_forward_input_and_weight_gradients():
    # estimate/time.py charges forward + 2 x forward per layer: that must add up to the three GEMMs of training
    g = Gemm(4096, 768, 6144)
    forward, dgrad, wgrad = training_gemm_seconds(g, H100, 2)
    assert dgrad == gemm_pass_seconds(4096, 768, 6144, 1, H100, 2)  # (m x n) @ (n x k)
    assert wgrad == gemm_pass_seconds(768, 6144, 4096, 1, H100, 2)  # (k x m) @ (m x n)
    assert 3 * gemm_seconds([g], H100, 2) == pytest.approx(forward + dgrad + wgrad)


DIMS = st.integers(1, 40000)


@settings(max_examples=200, deadline=None)
@given(DIMS, DIMS, DIMS, st.integers(1, 256), st.sampled_from(PRESETS), st.floats(0.1, 10.0))
def test_efficiency_never_exceeds_the_ceiling(m, n, k, count, device, bandwidth_scale):
    device = replace(device, hbm_bandwidth=device.hbm_bandwidth * bandwidth_scale)
    g = Gemm(m, k, n, count)
    assert 0 < gemm_efficiency(g, device, 2) <= device.compute_efficiency * (1 + 1e-12)
    assert g.flops / (gemm_seconds([g], device, 2) * device.peak_flops) <= device.compute_efficiency * (1 + 1e-12)


@settings(max_examples=200, deadline=None)
@given(DIMS, DIMS, DIMS, st.integers(1, 64), st.integers(0, 3), st.integers(1, 3000), st.sampled_from(PRESETS))
def test_time_never_falls_when_a_dimension_grows(m, n, k, count, which, extra, device):
    before = [m, n, k, count]
    after = list(before)
    after[which] += extra
    assert gemm_pass_seconds(*after[:3], after[3], device, 2) >= gemm_pass_seconds(*before[:3], before[3], device, 2)


@pytest.mark.parametrize("device", PRESETS, ids=lambda d: d.name)
def test_flash_backward_is_slower_per_flop_than_forward(device):
    flops = 1e12
    forward, backward = attention_core_seconds(flops, device, flash=True)
    assert forward == pytest.approx(flops / (device.peak_flops * min(device.flash_forward_efficiency,
                                                                      device.compute_efficiency)))
    assert backward / (FLASH_BACKWARD_RATIO * flops) > forward / flops


def test_flash_kernels_never_beat_the_gemm_ceiling():
    # FlashAttention-2's standalone 73 % on A100 does not carry over above the in-run GEMM ceiling
    a100 = replace(device_preset("a100-80g"), compute_efficiency=0.6)
    assert a100.flash_forward_efficiency == 0.73
    forward, _ = attention_core_seconds(1e12, a100, flash=True)
    assert forward == pytest.approx(1e12 / (a100.peak_flops * a100.compute_efficiency))
    assert kernel_efficiencies(replace(H100, compute_efficiency=0.3), "fused") == (0.3, 0.3)


def test_unfused_core_runs_at_its_measured_efficiency_and_its_backward_twice():
    a100 = device_preset("a100-80g")
    forward, backward = attention_core_seconds(1e12, a100, flash=False)
    assert forward == pytest.approx(1e12 / (a100.peak_flops * a100.unfused_attention_efficiency))
    assert backward == UNFUSED_BACKWARD_RATIO * forward == 2 * forward
    slow_chip = replace(a100, compute_efficiency=0.2)  # never above the GEMM ceiling
    assert attention_core_seconds(1e12, slow_chip, flash=False)[0] == pytest.approx(1e12 / (a100.peak_flops * 0.2))


def test_hopper_flash_efficiencies_are_the_published_cudnn_figures():
    # FlashAttention-3 paper (Shah et al. 2024) §4.1, H100 SXM5, head dim 128, 4k tokens: cuDNN causal forward 518,
    # backward 499 TFLOP/s (docs/formulas.md §3)
    for name in ("h100", "h200", "h800"):
        d = device_preset(name)
        assert d.flash_forward_efficiency * 989.4 == pytest.approx(518, abs=1)
        assert d.flash_backward_efficiency * 989.4 == pytest.approx(499, abs=1)


def test_korthikanti_table4_forward_within_10_percent():
    # Korthikanti 2022 Table 4 (examples/published_runs.yaml layer_benchmarks): 22B, A100, TP 8, s 2048, b 4, no
    # flash attention, no recompute: forward of one layer 7.7 ms, its two TP all-reduces included
    gpt_22b = ModelSpec("gpt-22b", 48, 6144, 64, 24576, 51200, activation="gelu", position_embedding="learned",
                        norm="layernorm", linear_bias=True, tied_embeddings=True, max_positions=2048)
    cluster = ClusterSpec(device_preset("a100-80g"), 8)
    t = layer_time(gpt_22b, cluster, RunSpec(global_batch=4, seq_len=2048, flash_attention=False),
                   LayerKey("dense", "none", Degrees(8, 1, 1, 1, 4, False)))
    assert t.forward + t.tp_comm == pytest.approx(7.7e-3, rel=0.10)


def test_korthikanti_table4_selective_rerun_is_one_unfused_core_forward():
    # Korthikanti 2022 Table 4: selective recompute adds 20.9 - 19.6 = 1.3 ms per layer (20.3 - 19.0 with SP): one
    # forward of the unfused core, its two batched GEMMs and its score-matrix passes
    gpt_22b = ModelSpec("gpt-22b", 48, 6144, 64, 24576, 51200, activation="gelu", position_embedding="learned",
                        norm="layernorm", linear_bias=True, tied_embeddings=True, max_positions=2048)
    cluster = ClusterSpec(device_preset("a100-80g"), 8)
    run = RunSpec(global_batch=4, seq_len=2048, flash_attention=False)
    for sp in (False, True):
        t = layer_time(gpt_22b, cluster, run, LayerKey("dense", "selective", Degrees(8, 1, 1, 1, 4, sp)))
        assert t.recompute == pytest.approx(1.3e-3, rel=0.05)


@pytest.mark.parametrize("field,value", [("sm_count", 0), ("gemm_tile_m", 0), ("gemm_tile_n", 4096),
                                         ("flash_forward_efficiency", 0.0),
                                         ("flash_backward_efficiency", 1.5), ("unfused_attention_efficiency", -0.1)])
def test_device_kernel_fields_are_validated(field, value):
    with pytest.raises(SpecError, match=field):
        replace(H100, **{field: value})


def test_triton_attention_runs_slower_than_flashattention2_by_the_published_ratio():
    # Dao 2023 (FlashAttention-2) §4.1: FA2 is 1.3-2.5x faster than FlashAttention in Triton; the Triton kernel
    # (llm-foundry attn_impl triton) is priced at the geometric middle, 1.8x slower than FlashAttention-2 in both
    # passes (estimate/attention_kernels.py); on A100, FlashAttention-2 is the fused kernel, so 1.8x the fused time
    a100 = device_preset("a100-80g")
    for device in (a100, H100):
        flash2 = attention_core_seconds(1e12, device, flash=True, kernel="flash2")
        triton = attention_core_seconds(1e12, device, flash=True, kernel="triton")
        assert triton == pytest.approx(tuple(TRITON_SLOWDOWN * t for t in flash2))
    assert attention_core_seconds(1e12, a100, flash=True, kernel="triton") == pytest.approx(
        tuple(TRITON_SLOWDOWN * t for t in attention_core_seconds(1e12, a100, flash=True)))
    assert 1.3 <= TRITON_SLOWDOWN <= 2.5
    # the unfused core ignores the fused kernel's name
    assert attention_core_seconds(1e12, H100, flash=False, kernel="triton") == attention_core_seconds(
        1e12, H100, flash=False)


def test_attention_kernel_is_validated():
    with pytest.raises(SpecError, match="attention_kernel"):
        RunSpec(global_batch=8, seq_len=128, attention_kernel="flash9")


# Azure AI-benchmarking-guide cuBLASLt FP8 GEMMs (M = N = K), TFLOP/s: ND_GB200_v6, ND_H100_v5 and ND_H200_v5 results
# (docs/formulas.md §9). The Blackwell ceiling is the GB200 16384^3 figure over the peak; the Hopper one was fitted on
# training runs. Below 8192 the 128 x 256 tiles' wave quantisation on 148 SMs makes the model slower than cuBLAS's
# Blackwell kernels (4096^3 on GB200: 2309 against 2834.6), so the check starts there.
AZURE_FP8_GEMMS = {"gb200-nvl72": {8192: 2876.6, 16384: 2906.9, 32768: 2825.6},
                   "h100": {8192: 1290.1, 16384: 1377.3, 32768: 1382.2},
                   "h200": {8192: 1300.6, 16384: 1366.3, 32768: 1349.5}}


@pytest.mark.parametrize("name", list(AZURE_FP8_GEMMS))
def test_large_fp8_gemms_run_at_the_published_benchmark_rate(name):
    device = device_preset(name)
    for size, published in AZURE_FP8_GEMMS[name].items():
        modelled = 2 * size**3 / gemm_pass_seconds(size, size, size, 1, device, 2, fp8=True) / 1e12
        assert modelled == pytest.approx(published, rel=0.07), size
