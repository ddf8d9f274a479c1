"""Time of matrix multiplies on one device: weight GEMMs by shape (tiles, waves, K loop, HBM roofline) and the
attention core (FlashAttention kernels, or the unfused batched GEMMs). Formulas: docs/formulas.md §3.

A GEMM C (M x N) = A (M x K) @ B (K x N) runs as output tiles of tile_m x tile_n, one tile per SM at a time, in waves
of `device.sm_count` tiles (NVIDIA "Matrix Multiplication Background User's Guide", tile and wave quantisation). A
tile costs 2 x tile_m x tile_n x (K + k0) FLOPs of SM time at `compute_efficiency` of its share of the peak: its
K loop plus its epilogue, writing the tile out to HBM at the SM's share of the bandwidth, which in K-loop units is
k0 = dtype_bytes x peak x compute_efficiency / (2 x HBM bandwidth) (the device's ridge point; H100 bf16: ~200,
A100: ~110). Derived, not fitted. So

    compute = waves x sm_count x 2 x tile_m x tile_n x (K + k0) / (peak x compute_efficiency),
    waves   = ceil(count x ceil(M / tile_m) x ceil(N / tile_n) / sm_count),

which pads M and N to whole tiles, the last wave to a whole wave and charges short K loops their fill and drain.
A GEMM with fewer tiles than SMs splits its K loop over the idle SMs (split-K, as CUTLASS and cuBLAS do for small
M x N and large K): one wave whose tiles each run K / (sm_count // tiles), at least K_SLICE, and pay k0 once each.
The library may compute C^T = B^T A^T instead, so the cheaper orientation of the tile counts. A grouped GEMM (count
> 1: the local experts of a MoE layer, m tokens each) puts all groups' tiles into the same waves. The time is the
roofline maximum of that and the HBM time of reading both operands and writing the result once (Williams et al. 2009).
Efficiency = FLOPs / (time x peak) is therefore never above `compute_efficiency`.

Training runs three GEMMs per weight GEMM with the same FLOPs and bytes but different shapes: the forward
(M, N, K) = (m, n, k), the input gradient (m, k, n) and the weight gradient (k, n, m). The time model charges each
layer forward + 2 x forward for them (estimate/layer_time.py), so `gemm_seconds` returns a third of the three GEMMs'
time: forward + backward then add up to their sum.
"""
from __future__ import annotations

import math
from functools import lru_cache

from ..specs.device import DeviceSpec
from ..specs.model import ModelSpec
from ..specs.run import RunSpec
from .attention_kernels import kernel_efficiencies
from .compute import FLASH_BACKWARD_RATIO, Gemm, fp8_gemms

K_SLICE = 64  # K depth of one main-loop step of 16-bit CUTLASS tiles (128 x 256 x 64): the least a split-K part runs
UNFUSED_BACKWARD_RATIO = 2.0  # unfused core backward: the input gradients of both batched GEMMs (no weights)


def _tiles(m: float, n: float, tile_m: int, tile_n: int) -> int:
    """Output tiles of an m x n result in the cheaper of the two orientations (C or C^T)."""
    return min(math.ceil(m / tile_m) * math.ceil(n / tile_n), math.ceil(m / tile_n) * math.ceil(n / tile_m))


def gemm_pass_seconds(m: float, n: float, k: float, count: float, device: DeviceSpec, dtype_bytes: int,
                      fp8: bool = False) -> float:
    """One (M x K) @ (K x N) GEMM, `count` equal groups sharing the waves: max(tile-wave compute, HBM traffic).

    fp8 (docs/formulas.md §3.1): FP8 operands (1 byte) at the device's FP8 dense peak, the result written in
    `dtype_bytes` (BF16), so k0 = dtype_bytes x FP8 rate / (2 x HBM bandwidth) (twice the BF16 one on Hopper), at
    the FP8 ceiling `device.fp8_ceiling`: `fp8_compute_efficiency`, fitted per GPU generation on FP8 runs by
    scripts/calibrate.py, or where that is 0 (not fitted) the BF16 `compute_efficiency`, assumed."""
    if m <= 0 or n <= 0 or k <= 0 or count <= 0:
        return 0.0
    tm, tn, sms = device.gemm_tile_m, device.gemm_tile_n, device.sm_count
    tiles = math.ceil(count * _tiles(m, n, tm, tn) - 1e-9)
    if tiles >= sms:
        waves, depth = math.ceil(tiles / sms), k
    else:  # split-K: the K loop is shared by sms // tiles SMs per tile, each running K_SLICE of it at least
        waves, depth = 1, max(k / (sms // tiles), min(k, K_SLICE))
    rate = device.fp8_peak_flops * device.fp8_ceiling if fp8 else device.peak_flops * device.compute_efficiency
    k0 = dtype_bytes * rate / (2.0 * device.hbm_bandwidth)  # the tile's write-back, in K-loop steps (docstring)
    compute = waves * sms * 2.0 * tm * tn * (depth + k0) / rate
    operand_bytes = 1 if fp8 else dtype_bytes
    memory = count * ((m * k + k * n) * operand_bytes + m * n * dtype_bytes) / device.hbm_bandwidth
    return max(compute, memory)


@lru_cache(maxsize=65536)
def training_gemm_seconds(g: Gemm, device: DeviceSpec, dtype_bytes: int,
                          fp8: bool = False) -> tuple[float, float, float]:
    """(forward, input gradient, weight gradient) seconds of one weight GEMM and its two backward GEMMs (cached: the
    recompute options of a layer share its GEMM shapes)."""
    return (gemm_pass_seconds(g.m, g.n, g.k, g.count, device, dtype_bytes, fp8),
            gemm_pass_seconds(g.m, g.k, g.n, g.count, device, dtype_bytes, fp8),
            gemm_pass_seconds(g.k, g.n, g.m, g.count, device, dtype_bytes, fp8))


def gemm_seconds(gemms: "tuple[Gemm, ...] | list[Gemm]", device: DeviceSpec, dtype_bytes: int,
                 fp8: bool = False) -> float:
    """A third of the forward, input-gradient and weight-gradient time of a set of weight GEMMs (module docstring):
    what estimate/time.py charges per pass; `fp8`: all three GEMMs in FP8 (Transformer Engine)."""
    return sum(sum(training_gemm_seconds(g, device, dtype_bytes, fp8)) for g in gemms) / 3.0


def weight_gemm_seconds(model: ModelSpec, kind: str, gemms: "tuple[Gemm, ...]", tokens: float, device: DeviceSpec,
                        run: RunSpec) -> float:
    """gemm_seconds of a layer's weight GEMMs at the run's precision: in FP8 under --precision fp8 but the MoE router
    (compute.fp8_gemms), else all at the activation dtype."""
    dtype = run.activation_bytes
    if not run.fp8:
        return gemm_seconds(gemms, device, dtype)
    low = fp8_gemms(model, kind, gemms, tokens)
    kept = tuple(g for g in gemms if g not in low)
    return gemm_seconds(low, device, dtype, fp8=True) + (gemm_seconds(kept, device, dtype) if kept else 0.0)


def gemm_efficiency(g: Gemm, device: DeviceSpec, dtype_bytes: int) -> float:
    """Achieved fraction of peak of the forward GEMM alone (for reports and tests)."""
    seconds = gemm_pass_seconds(g.m, g.n, g.k, g.count, device, dtype_bytes)
    return g.flops / (seconds * device.peak_flops) if seconds else 0.0


def attention_core_seconds(forward_flops: float, device: DeviceSpec, flash: bool,
                           kernel: str = "fused") -> tuple[float, float]:
    """(forward, backward) seconds of the attention core (QK^T and attention x V) whose forward executes
    `forward_flops`.

    Flash attention: the fused kernel `kernel` (RunSpec.attention_kernel) runs at its own fractions of peak: fused at
    the device's `flash_forward_efficiency` and `flash_backward_efficiency`, the others at their published figures
    for the device's generation (estimate/attention_kernels.py: Dao 2023, FlashAttention-2, §4.1; Shah et al. 2024,
    FlashAttention-3, §4.1), never above the GEMM ceiling (attention_kernels.kernel_efficiencies); the backward executes
    FLASH_BACKWARD_RATIO times the forward's matmul FLOPs (it recomputes the scores).
    Unfused: plain batched GEMMs per head (K = head dim for QK^T, N = head dim for attention x V); only their FLOPs
    reach this function, not their shapes, so they run at the measured `unfused_attention_efficiency` (Korthikanti
    2022 Table 4 on A100, docs/formulas.md §3), never above the GEMM ceiling; the backward costs twice the forward.
    """
    if flash:
        forward, backward = kernel_efficiencies(device, kernel)
        return (forward_flops / (device.peak_flops * forward),
                FLASH_BACKWARD_RATIO * forward_flops / (device.peak_flops * backward))
    forward = forward_flops / (device.peak_flops * min(device.unfused_attention_efficiency, device.compute_efficiency))
    return forward, forward * UNFUSED_BACKWARD_RATIO


__all__ = ["gemm_seconds", "gemm_pass_seconds", "training_gemm_seconds", "gemm_efficiency", "attention_core_seconds",
           "K_SLICE", "UNFUSED_BACKWARD_RATIO"]
