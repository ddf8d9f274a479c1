"""What a device's links reach: the per-step latency of the ring collectives and the share of the datasheet
bandwidth NCCL achieves (docs/formulas.md §7). Defaults of DeviceSpec (specs/device.py)."""

# Per-step latency (alpha) of the ring collectives' alpha-beta model (estimate/communication.py), when a preset gives
# none: the order of NCCL's own tuning model for the Simple protocol (NCCL src/graph/tuning.cc: a base latency of a
# few microseconds per step inside a node over NVLink, about twice that across nodes over the network). Not fitted:
# they matter only for small messages (docs/formulas.md §7).
INTRA_NODE_LATENCY = 5e-6
INTER_NODE_LATENCY = 12e-6
# What NCCL reaches of the datasheet links, nccl-tests bus bandwidth over line rate (docs/formulas.md §7, table).
# NVLink: "app-level bandwidth is 80 % of the peak" (S. Jeaugey, NVIDIA/nccl #1054; A100 ~230 of 300 GB/s,
# nccl-tests #149; H100 ~370 of 450, nccl-tests #212), taken for every scale-up link (unvalidated beyond NVLink3/4).
# NIC: NDR 46-48 of 50 GB/s (nccl-tests #290); 8 x HDR 192 of 200 (nccl #812); others the lower (unvalidated).
NVLINK_EFFICIENCY = 0.80
# NVLink5 (Blackwell: B200, GB200, B300, GB300; 900 GB/s one way): Microsoft Azure AI-benchmarking-guide,
# Azure_Results/ND_GB200_v6_results.md "NCCL Bandwidth" (nccl-tests all_reduce_perf, Ring algorithm, in-place, the
# 4 GPUs of one GB200 tray over NVLink5, NCCL 2.25.1, CUDA 12.8): busbw 679.61 GB/s at 8 GB (673.06 at 4 GB). The
# 80 % rule is 6 % above it; an 8 x HGX B200 all-gather reaches 672 GB/s at 16 GiB (docs/formulas.md §7.2). Taken
# for every NVLink5 preset.
BLACKWELL_NVLINK_EFFICIENCY = 679.61 / 900
AMPERE_SCALE_OUT_EFFICIENCY = 192 / 200
HOPPER_SCALE_OUT_EFFICIENCY = 47 / 50
SCALE_OUT_EFFICIENCY = min(AMPERE_SCALE_OUT_EFFICIENCY, HOPPER_SCALE_OUT_EFFICIENCY)

__all__ = ["INTRA_NODE_LATENCY", "INTER_NODE_LATENCY", "NVLINK_EFFICIENCY", "BLACKWELL_NVLINK_EFFICIENCY",
           "AMPERE_SCALE_OUT_EFFICIENCY", "HOPPER_SCALE_OUT_EFFICIENCY", "SCALE_OUT_EFFICIENCY"]
