"""Attention kernels priced from their published benchmarks (estimate/attention_kernels.py, docs/formulas.md §3.3)."""
from dataclasses import replace

import pytest

from ndcp.estimate.attention_kernels import (PUBLISHED, TRITON_SLOWDOWN, is_published, kernel_basis,
                                             kernel_efficiencies, published_efficiencies)
from ndcp.estimate.gemm import attention_core_seconds
from ndcp.specs import RunSpec, device_preset
from ndcp.specs.device import ARCHITECTURES
from ndcp.specs.fields import SpecError
from ndcp.specs.run import ATTENTION_KERNELS

H100, A100, B200 = device_preset("h100"), device_preset("a100-80g"), device_preset("b200")
KERNELS = [k for k in ATTENTION_KERNELS if k != "fused"]


@pytest.mark.parametrize("kernel,forward,backward", [("flash2", 319, 310), ("cudnn", 518, 499), ("flash3", 579, 542)])
def test_hopper_kernels_run_at_the_flashattention3_papers_tflops(kernel, forward, backward):
    # Shah et al. 2024 (FlashAttention-3) §4.1, H100 SXM5 (989.4 TFLOP/s BF16 dense), head dim 128, 4k tokens:
    # Figure 5 causal forward, Figure 6 backward
    assert tuple(e * 989.4 for e in kernel_efficiencies(H100, kernel)) == pytest.approx((forward, backward), abs=0.5)


def test_ampere_flashattention2_is_the_papers_73_and_63_percent_under_the_gemm_ceiling():
    # Dao 2023 (FlashAttention-2) §4.1: forward up to 73 %, backward up to 63 % of A100's 312 TFLOP/s; the forward
    # runs at the fitted GEMM ceiling in a training step, as the fused kernel does
    assert published_efficiencies("ampere", "flash2") == pytest.approx((0.73, 0.63))
    assert kernel_efficiencies(A100, "flash2") == pytest.approx((A100.compute_efficiency, 0.63))
    assert kernel_efficiencies(A100, "flash2") == kernel_efficiencies(A100, "fused")


def test_triton_on_hopper_is_flashattention2s_hopper_figure_over_the_a100_ratio():
    # llm-foundry's Triton kernel (triton-pre-mlir, mma.sync like FlashAttention-2): 319 / 1.8 = 177 forward and
    # 310 / 1.8 = 172 backward TFLOP/s on H100, well under the fused (cuDNN) kernel's 518 / 499
    forward, backward = (e * 989.4 for e in kernel_efficiencies(H100, "triton"))
    assert (forward, backward) == pytest.approx((319 / TRITON_SLOWDOWN, 310 / TRITON_SLOWDOWN), abs=0.5)
    assert not is_published(H100, "triton")


def test_sdpa_is_priced_as_flashattention2():
    # PyTorch SDPA's flash backend is FlashAttention-2's code
    for device in (H100, A100, B200):
        assert kernel_efficiencies(device, "sdpa") == kernel_efficiencies(device, "flash2")


def test_fused_stays_the_devices_own_figures():
    # the trainer's default: existing inputs and answers do not move
    for device in (H100, A100, B200, device_preset("mi300x")):
        assert kernel_efficiencies(device, "fused") == (min(device.flash_forward_efficiency, device.compute_efficiency),
                                                        min(device.flash_backward_efficiency,
                                                            device.compute_efficiency))


def test_a_kernel_unpublished_on_a_generation_is_never_faster_than_its_best_published():
    # Ampere has only FlashAttention-2 published: cuDNN and FlashAttention-3 (which needs sm90) take its figures
    for kernel in ("cudnn", "flash3"):
        assert kernel_efficiencies(A100, kernel) == kernel_efficiencies(A100, "flash2")
        assert not is_published(A100, kernel)


@pytest.mark.parametrize("name", ["b200", "gb200-nvl72", "mi300x", "ascend-910b"])
def test_generations_without_figures_take_the_hopper_ratios_to_cudnn_never_above_fused(name):
    device = device_preset(name)
    fused = kernel_efficiencies(device, "fused")
    hopper_cudnn = PUBLISHED[("hopper", "cudnn")].efficiencies
    flash2 = kernel_efficiencies(device, "flash2")
    assert flash2 == pytest.approx(tuple(f * h / c for f, h, c in zip(fused, (319 / 989.4, 310 / 989.4),
                                                                         hopper_cudnn)))
    for kernel in KERNELS:
        assert all(k <= f + 1e-12 for k, f in zip(kernel_efficiencies(device, kernel), fused))
        assert not is_published(device, kernel)


@pytest.mark.parametrize("device", [H100, A100, B200], ids=lambda d: d.name)
@pytest.mark.parametrize("kernel", ATTENTION_KERNELS)
def test_every_kernel_stays_under_the_gemm_ceiling_and_prices_time_by_its_efficiency(device, kernel):
    forward, backward = kernel_efficiencies(device, kernel)
    assert 0 < forward <= device.compute_efficiency and 0 < backward <= device.compute_efficiency
    assert all(e <= 0.1 for e in kernel_efficiencies(replace(device, compute_efficiency=0.1), kernel))
    seconds = attention_core_seconds(1e12, device, flash=True, kernel=kernel)
    assert seconds == pytest.approx((1e12 / (device.peak_flops * forward), 2.5e12 / (device.peak_flops * backward)))


def test_on_hopper_the_kernels_rank_as_published():
    speed = {k: kernel_efficiencies(H100, k) for k in ATTENTION_KERNELS}
    for p in (0, 1):
        assert speed["triton"][p] < speed["flash2"][p] == speed["sdpa"][p] < speed["cudnn"][p] < speed["flash3"][p]


def test_kernel_and_architecture_are_validated():
    with pytest.raises(SpecError, match="attention_kernel"):
        RunSpec(global_batch=8, seq_len=128, attention_kernel="flash4")
    with pytest.raises(SpecError, match="architecture"):
        replace(H100, architecture="volta")
    assert {d.architecture for d in (H100, A100, B200)} == {"hopper", "ampere", "blackwell"}
    assert device_preset("mi300x").architecture == "other" and "other" in ARCHITECTURES


def test_the_assumptions_say_when_a_kernel_has_no_figure_of_its_own():
    assert kernel_basis(H100, "flash3") == "flash3" and kernel_basis(A100, "fused") == "fused"
    assert "FlashAttention-2's hopper figure / 1.8" in kernel_basis(H100, "triton")
    assert "unvalidated" in kernel_basis(B200, "flash2") and "unvalidated" in kernel_basis(A100, "flash3")
