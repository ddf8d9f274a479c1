"""Accelerator presets and clusters (device x count with optional overrides). Bandwidths are per device, one way."""
from __future__ import annotations

from dataclasses import dataclass, replace

from .fields import SpecError, cached_hash, finite_number, positive_int, require
from .units import GB, MIB


# Per-step latency (alpha) of the ring collectives' alpha-beta model (estimate/communication.py), when a preset gives
# none: the order of NCCL's own tuning model for the Simple protocol (NCCL src/graph/tuning.cc: a base latency of a
# few microseconds per step inside a node over NVLink, about twice that across nodes over the network). Not fitted:
# they matter only for small messages (docs/formulas.md §7).
INTRA_NODE_LATENCY = 5e-6
INTER_NODE_LATENCY = 12e-6


@dataclass(frozen=True)
class DeviceSpec:
    """One accelerator and the node it sits in. Bytes, FLOP/s and bytes/s; latencies in seconds."""

    __hash__ = cached_hash

    name: str
    memory_bytes: int
    peak_flops: float  # dense BF16/FP16 matrix FLOP/s
    hbm_bandwidth: float
    devices_per_node: int
    intra_node_bandwidth: float  # scale-up (NVLink/xGMI/HCCS) per device, one direction
    inter_node_bandwidth: float  # scale-out (IB/RoCE) per device, one direction
    intra_node_latency: float = INTRA_NODE_LATENCY
    inter_node_latency: float = INTER_NODE_LATENCY
    compute_efficiency: float = 0.62  # GEMM ceiling: fraction of peak a full wave of tiles reaches (estimate/gemm.py)
    calibrated: bool = False  # True when compute_efficiency was fitted on measured runs of this chip (docs/calibration.md)
    source: str = ""
    # GEMM and attention-kernel model (estimate/gemm.py, docs/formulas.md §3; fitted values: docs/calibration.md §7)
    sm_count: int = 132  # streaming multiprocessors (or CUs / AI cores): tiles that run at once, one wave
    gemm_tile_m: int = 128  # output tile of the GEMM kernels (CUTLASS/cuBLAS 128 x 256)
    gemm_tile_n: int = 256
    flash_forward_efficiency: float = 0.52  # fused attention forward, fraction of peak
    flash_backward_efficiency: float = 0.50  # fused attention backward, fraction of peak (on its 2.5x FLOPs)
    unfused_attention_efficiency: float = 0.32  # per-head batched GEMMs of the core without flash attention
    # FP8 (estimate/fp8.py, docs/formulas.md §3.1): dense FP8 matrix FLOP/s, 0 = no FP8 tensor cores (refused);
    # mxfp8: the tensor cores apply MX block scales and take either operand layout (Blackwell), so MXFP8 runs and
    # per-tensor recipes need no transposed FP8 copies.
    fp8_peak_flops: float = 0.0
    mxfp8: bool = False

    def utilisation_peak(self, fp8: bool) -> float:
        """The peak MFU and HFU are measured against: the FP8 dense peak for FP8 runs (NVIDIA dgxc-benchmarking's
        basis, docs/formulas.md §2.6), else the BF16/FP16 dense peak."""
        return self.fp8_peak_flops if fp8 and self.fp8_peak_flops else self.peak_flops

    def __post_init__(self):
        positive_int("memory_bytes", self.memory_bytes, 1 << 60)
        positive_int("devices_per_node", self.devices_per_node)
        for name in ("peak_flops", "hbm_bandwidth", "intra_node_bandwidth", "inter_node_bandwidth"):
            finite_number(name, getattr(self, name), 0.0, low_open=True)
        for name in ("intra_node_latency", "inter_node_latency"):
            finite_number(name, getattr(self, name), 0.0, 1.0)
        finite_number("compute_efficiency", self.compute_efficiency, 0.0, 1.0, low_open=True)
        positive_int("sm_count", self.sm_count, 1 << 16)
        positive_int("gemm_tile_m", self.gemm_tile_m, 1024)
        positive_int("gemm_tile_n", self.gemm_tile_n, 1024)
        for name in ("flash_forward_efficiency", "flash_backward_efficiency", "unfused_attention_efficiency"):
            finite_number(name, getattr(self, name), 0.0, 1.0, low_open=True)
        finite_number("fp8_peak_flops", self.fp8_peak_flops, 0.0)


def _preset(name, memory_mib, tflops, hbm_gbs, intra_gbs, inter_gbs, source, per_node=8, **extra) -> DeviceSpec:
    return DeviceSpec(name, memory_mib * MIB, tflops * 1e12, hbm_gbs * GB, per_node, intra_gbs * GB, inter_gbs * GB,
                      source=source, **extra)


# GEMM and attention-kernel parameters per GPU generation (estimate/gemm.py; docs/formulas.md §3, docs/calibration.md
# §7). The two "fitted" numbers minimise the mean |MFU error| over examples/published_runs.yaml; they are rewritten
# in place by `scripts/calibrate.py --write`.
AMPERE_GEMM_EFFICIENCY = 0.705  # fitted: A100 GEMM ceiling, fraction of peak
HOPPER_GEMM_EFFICIENCY = 0.68  # fitted: H100/H200/H800 GEMM ceiling, fraction of peak
# A100: 108 SMs (NVIDIA A100 Tensor Core GPU Architecture whitepaper); FlashAttention-2 (Dao 2023) §4.1 on A100:
# forward up to 73 %, backward up to 63 % of peak; not fitted (no A100 run in the set uses flash attention). Unfused
# core: Korthikanti 2022 Table 4, the selective-recompute rerun less its score-matrix passes (docs/formulas.md §3);
# other devices keep that A100 figure as an assumption (the dataclass default).
AMPERE = dict(sm_count=108, compute_efficiency=AMPERE_GEMM_EFFICIENCY,
              flash_forward_efficiency=0.73, flash_backward_efficiency=0.63, unfused_attention_efficiency=0.324,
              calibrated=True)
# H100/H200/H800 SXM: 132 SMs (NVIDIA H100 Tensor Core GPU Architecture whitepaper; H200 and H800 are the same
# GH100 SXM part); fused attention as cuDNN runs it in Transformer Engine: FlashAttention-3 paper (Shah et al. 2024)
# §4.1, H100, head dim 128, 4k tokens: cuDNN causal forward 518 and backward 499 TFLOP/s of 989.
HOPPER = dict(sm_count=132, compute_efficiency=HOPPER_GEMM_EFFICIENCY,
              flash_forward_efficiency=0.524, flash_backward_efficiency=0.504, calibrated=True,
              fp8_peak_flops=1978.9e12)  # H100 SXM datasheet: 1,978.9 TFLOP/s FP8 dense (3,957.8 with sparsity)

# Sources: published_runs.yaml `hardware:` (docs/calibration.md §4); NVLink figures are the published
# bidirectional numbers halved; scale-out is one NIC per GPU (HDR 200 Gb/s = 25 GB/s, NDR 400 Gb/s = 50 GB/s).
PRESETS: dict[str, DeviceSpec] = {
    d.name: d
    for d in (
        _preset("a100-40g", 40960, 312, 1555, 300, 25,
                "NVIDIA A100 datasheet: 312 TFLOP/s BF16 dense, 40 GB HBM2 1.56 TB/s, NVLink3 600 GB/s; HDR IB per GPU",
                **AMPERE),
        _preset("a100-80g", 81920, 312, 2039, 300, 25,
                "NVIDIA A100 datasheet: 312 TFLOP/s BF16 dense, 80 GB HBM2e 2.04 TB/s, NVLink3 600 GB/s; Narayanan 2021 "
                "§5: 8x HDR 200 Gb/s per DGX node",
                **AMPERE),
        _preset("h100", 81559, 989.4, 3350, 450, 50,
                "NVIDIA H100 SXM5: 989.4 TFLOP/s BF16 dense, 80 GB HBM3 3.35 TB/s, NVLink4 900 GB/s; NDR 400 Gb/s per GPU "
                "(DGX H100)",
                **HOPPER),
        _preset("h200", 143771, 989.4, 4800, 450, 50,
                "NVIDIA H200 SXM: 989.4 TFLOP/s BF16 dense, 141 GB HBM3e 4.8 TB/s, NVLink 900 GB/s; 400 Gb/s per GPU",
                **HOPPER),
        _preset("h800", 81559, 989.4, 3350, 160, 50,
                "DeepSeek-V3 report §3.2.2: usable NVLink 160 GB/s, IB 50 GB/s per GPU; BF16 peak as H100",
                **HOPPER),
        _preset("b200", 183359, 2250, 8000, 900, 50,
                "NVIDIA dgxc-benchmarking: 2250 TFLOP/s BF16 dense; 192 GB HBM3e 8 TB/s, NVLink5 1.8 TB/s (spec pages, "
                "not confirmed in stored material); 400 Gb/s per GPU; 148 SMs (Blackwell spec pages, unconfirmed); "
                "FP8 4500 TFLOP/s dense (DGX B200 datasheet 72 PFLOPS FP8 training per 8 GPUs, with sparsity, halved)",
                sm_count=148, fp8_peak_flops=4500e12, mxfp8=True),
        _preset("mi300x", 196608, 1307.4, 5300, 448, 50,
                "AMD MI300X: 1307.4 TFLOP/s BF16 dense, 192 GB HBM3 5.3 TB/s, 7x128 GB/s xGMI (896 aggregate); "
                "400 Gb/s per GPU; 304 CUs (AMD CDNA 3 white paper)",
                sm_count=304),
        _preset("ascend-910b", 65536, 320, 1600, 196, 25,
                "NOT CONFIRMED (published_runs.yaml): ~320 TFLOP/s FP16, 64 GB HBM2e ~1.6 TB/s, HCCS ~392 GB/s; "
                "200 Gb/s RoCE per NPU assumed; 20 AI (cube) cores ASSUMED for the GEMM waves",
                sm_count=20),
    )
}


def device_preset(name: str) -> DeviceSpec:
    key = name.strip().lower()
    if key not in PRESETS:
        raise SpecError(f"device={name!r} is not a known preset; valid: {', '.join(PRESETS)}")
    return PRESETS[key]


@dataclass(frozen=True)
class ClusterSpec:
    """`count` identical devices; overrides (memory, bandwidths, devices per node) are applied to the device."""

    __hash__ = cached_hash

    device: DeviceSpec
    count: int

    def __post_init__(self):
        positive_int("gpus", self.count)
        require(self.count <= 1 << 24, "gpus", self.count, "expected at most 16,777,216 devices")

    @property
    def nodes(self) -> int:
        return -(-self.count // self.device.devices_per_node)

    def with_overrides(self, **overrides) -> "ClusterSpec":
        """A copy whose device has the given fields replaced (validated like a preset)."""
        given = {k: v for k, v in overrides.items() if v is not None}
        return ClusterSpec(replace(self.device, **given), self.count) if given else self
