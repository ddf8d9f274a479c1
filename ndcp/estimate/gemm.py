"""Time of matrix multiplies on one device: weight GEMMs by shape and the attention core.

A GEMM's time is a roofline (Williams 2009): max(FLOPs / (peak x efficiency), bytes moved / HBM bandwidth), where
bytes moved = both operands and the result once. A GEMM whose arithmetic intensity is below the device's ridge point
(peak x efficiency / HBM bandwidth) runs at its memory speed; large transformer GEMMs are far above it and run at
`device.compute_efficiency` (calibration: docs/calibration.md).
"""
from __future__ import annotations

from ..specs.device import DeviceSpec
from .compute import FLASH_BACKWARD_RATIO, Gemm


def gemm_seconds(gemms: "tuple[Gemm, ...] | list[Gemm]", device: DeviceSpec, dtype_bytes: int) -> float:
    """Roofline time of a set of GEMMs: compute-bound at peak x efficiency, else HBM-bound."""
    rate = device.peak_flops * device.compute_efficiency
    return sum(max(g.flops / rate, g.bytes_moved(dtype_bytes) / device.hbm_bandwidth) for g in gemms)


def attention_core_seconds(forward_flops: float, device: DeviceSpec, flash: bool) -> tuple[float, float]:
    """(forward, backward) seconds of the attention core (QK^T and attention x V) whose forward executes
    `forward_flops`: flash attention's backward runs FLASH_BACKWARD_RATIO times the forward's matmuls (it recomputes
    the scores), the unfused core's backward twice (dgrad of both matmuls)."""
    forward = forward_flops / (device.peak_flops * device.compute_efficiency)
    return forward, forward * (FLASH_BACKWARD_RATIO if flash else 2.0)


__all__ = ["gemm_seconds", "attention_core_seconds"]
