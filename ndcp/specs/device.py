"""Accelerator presets and clusters (device x count with optional overrides; device YAML files: device_file.py). Bandwidths are per
device, one way.

Two links (docs/formulas.md §7.4): the scale-up fabric (NVLink/xGMI/HCCS) joins the devices of one scale-up domain,
`devices_per_domain` of them: the node on an 8-GPU board, 72 devices of 18 trays in a GB200/GB300 NVL72 rack; its
figures keep their historical names `intra_node_bandwidth` and `intra_node_latency` (every device file and --json
key stays valid; "node" there reads "scale-up domain"). The scale-out network (IB/RoCE) joins domains: one NIC per
device, `inter_node_*`, rail-optimised (NIC k of every node on the leaf switch of rail k, so traffic between the
same local ranks of two nodes crosses one leaf: the fabric is taken as non-blocking inside a pod of `pod_size`
devices) and tapered by `oversubscription` between pods. A job's consecutive ranks fill domains in equal segments
(ClusterSpec.domain_ranks)."""
from __future__ import annotations

from dataclasses import dataclass, replace

from .fields import cached_hash, finite_number, non_negative_int, one_of, positive_int, require, state_without_hash
from .links import (AMPERE_SCALE_OUT_EFFICIENCY, BLACKWELL_NVLINK_EFFICIENCY, HOPPER_SCALE_OUT_EFFICIENCY,
                    INTER_NODE_LATENCY, INTRA_NODE_LATENCY, NVLINK_EFFICIENCY, SCALE_OUT_EFFICIENCY)
from .units import GB, MIB, lookup


# GPU generations whose attention kernels have published benchmark figures (estimate/attention_kernels.py); "other":
# none published (AMD, Ascend, a device file that does not say).
ARCHITECTURES = ("ampere", "hopper", "blackwell", "other")


@dataclass(frozen=True)
class DeviceSpec:
    """One accelerator and the node it sits in. Bytes, FLOP/s and bytes/s; latencies in seconds. Each field's
    docstring (its first sentence: the unit) is the comment on its line of a device file (device_yaml)."""

    __hash__ = cached_hash
    __getstate__ = state_without_hash

    name: str
    """the preset's name, or the device file's (default: the file's stem)"""
    memory_bytes: int
    """device memory, bytes"""
    peak_flops: float
    """dense BF16/FP16 matrix FLOP/s (the datasheet's peak without sparsity)"""
    hbm_bandwidth: float
    """HBM bandwidth, bytes/s"""
    devices_per_node: int
    """devices per node (tray): the host side (CPU sockets, PCIe, host memory) is shared by them"""
    intra_node_bandwidth: float
    """bytes/s per device, one way, inside a scale-up domain (NVLink/xGMI/HCCS)"""
    inter_node_bandwidth: float
    """bytes/s per device, one way, across scale-up domains (scale-out: IB/RoCE, one NIC per device)"""
    intra_node_latency: float = INTRA_NODE_LATENCY
    """seconds per ring step inside a scale-up domain (the alpha of the collectives' alpha-beta model)"""
    inter_node_latency: float = INTER_NODE_LATENCY
    """seconds per ring step across scale-up domains"""
    scale_up_efficiency: float = NVLINK_EFFICIENCY
    """fraction of intra_node_bandwidth NCCL's collectives reach (bus bandwidth over line rate; 1 when that figure
    is already achievable). docs/formulas.md §7"""
    scale_out_efficiency: float = SCALE_OUT_EFFICIENCY
    """fraction of inter_node_bandwidth NCCL's collectives reach over the NIC. docs/formulas.md §7"""
    devices_per_domain: int = 0
    """devices per scale-up (NVLink) domain, a multiple of devices_per_node; 0 = one node (GB200 NVL72: 72, 18 trays
    of 4)"""
    pod_size: int = 0
    """devices per pod of the scale-out network, a multiple of the domain; 0 = one non-blocking network. The fabric
    is taken as non-blocking inside a pod (rail-optimised placement)"""
    oversubscription: float = 1.0
    """scale-out taper between pods (2 = a 2:1 oversubscribed spine): a group spanning pods gets
    inter_node_bandwidth / oversubscription per device"""
    compute_efficiency: float = 0.62
    """GEMM ceiling, fraction of peak. What a full wave of tiles reaches (estimate/gemm.py)"""
    calibrated: bool = False
    """true when compute_efficiency was fitted on measured runs of this chip (docs/calibration.md)"""
    source: str = ""
    """where the figures come from (datasheets, papers)"""
    # GEMM and attention-kernel model (estimate/gemm.py, docs/formulas.md §3; fitted values: docs/calibration.md §7)
    sm_count: int = 132
    """streaming multiprocessors (or CUs / AI cores): GEMM tiles that run at once, one wave"""
    gemm_tile_m: int = 128
    """rows of the GEMM kernels' output tile (CUTLASS/cuBLAS 128 x 256)"""
    gemm_tile_n: int = 256
    """columns of the GEMM kernels' output tile"""
    flash_forward_efficiency: float = 0.52
    """fraction of peak of the fused attention forward"""
    flash_backward_efficiency: float = 0.50
    """fraction of peak of the fused attention backward (on its 2.5x FLOPs)"""
    unfused_attention_efficiency: float = 0.32
    """fraction of peak of the attention core's per-head batched GEMMs without flash attention"""
    architecture: str = "other"
    """GPU generation whose published attention-kernel benchmarks price a run's --attention-kernel other than fused
    (estimate/attention_kernels.py): ampere, hopper, blackwell or other (default: none published)"""
    fp8_peak_flops: float = 0.0
    """dense FP8 matrix FLOP/s, 0 = no FP8 tensor cores (FP8 runs refused). estimate/fp8.py, docs/formulas.md §3.1"""
    fp8_compute_efficiency: float = 0.0
    """FP8 GEMM ceiling, fraction of fp8_peak_flops; 0 = not fitted: compute_efficiency (the BF16 ceiling) is
    assumed (fp8_ceiling). Fitted per GPU generation on FP8 runs (docs/formulas.md §3.1, docs/calibration.md §7)"""
    fp4_peak_flops: float = 0.0
    """dense FP4 matrix FLOP/s (NVFP4/MXFP4), 0 = no FP4 tensor cores. Listed, not priced: ndcp has no FP4
    precision"""
    mxfp8: bool = False
    """true when the tensor cores apply MX block scales and take either operand layout (Blackwell). MXFP8 then runs,
    and per-tensor recipes need no transposed FP8 copies"""
    host_bandwidth: float = 52e9
    """host link per device, bytes/s, one way, achievable (activation and optimizer offload, estimate/host_link.py).
    PCIe Gen5 x16: 63 GB/s raw, ~52 GB/s in pinned copies (docs/formulas.md §5.3); Gen4 half of it; NVLink-C2C
    (GH200) 450 GB/s. The uplink from the device's PCIe switch to the CPU is taken as wide as this link"""
    host_memory_bytes: int = 256 * 2**30
    """host memory per device offered for offloaded activations and optimizer states, bytes. What is left of the
    device's share of the node's memory after the platform's and the trainer's own use (docs/formulas.md §5.3:
    offered_host_memory; the presets' figures). The default, for a device file without `base`, is a DGX H100's
    whole share: state your own"""
    devices_per_pcie_switch: int = 1
    """devices whose host copies share one PCIe switch's uplink to the CPU. DGX H100/H200: 1 (each GPU reaches the
    CPU through its own ConnectX-7's PCIe switch); DGX A100: 2"""
    nics_per_pcie_switch: int = 1
    """scale-out NICs behind the devices' PCIe switch, 0 = NICs on the CPU. Behind the switch (GPUDirect RDMA) their
    traffic crosses each device's own host link; on the CPU, the switch uplink"""
    sockets_per_node: int = 2
    """CPU sockets per node. The devices split evenly over them (DGX H100/A100: 2)"""
    socket_memory_bandwidth: float = 307.2e9
    """host memory bandwidth per CPU socket, bytes/s, datasheet peak. The host-side optimizer step and the host
    copies share it. Xeon 8480C (DGX H100/H200): 8 DDR5-4800 channels x 38.4 GB/s = 307.2 GB/s; EPYC 7742 (DGX
    A100): 8 DDR4-3200 channels = 204.8 GB/s"""

    @property
    def domain_size(self) -> int:
        """Devices per scale-up domain (devices_per_node when the field is 0)."""
        return self.devices_per_domain or self.devices_per_node

    @property
    def devices_per_socket(self) -> float:
        """Devices sharing one socket's memory bandwidth (at least one: a device uses one socket's memory)."""
        return max(1.0, self.devices_per_node / self.sockets_per_node)

    @property
    def devices_per_uplink(self) -> int:
        """Devices whose host copies share one PCIe switch uplink (no more than the node has)."""
        return min(self.devices_per_pcie_switch, self.devices_per_node)

    @property
    def host_memory_bandwidth(self) -> float:
        """One device's share of its socket's memory bandwidth, bytes/s (all devices of a socket step at once)."""
        return self.socket_memory_bandwidth / self.devices_per_socket

    @property
    def fp8_ceiling(self) -> float:
        """The FP8 GEMM ceiling in use: fp8_compute_efficiency, or compute_efficiency where that is 0 (unfitted)."""
        return self.fp8_compute_efficiency or self.compute_efficiency

    @property
    def fp8_calibrated(self) -> bool:
        """Whether the FP8 GEMM ceiling was fitted on FP8 runs (else the BF16 one is assumed)."""
        return self.fp8_compute_efficiency > 0

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
        for name in ("scale_up_efficiency", "scale_out_efficiency"):
            finite_number(name, getattr(self, name), 0.0, 1.0, low_open=True)
        non_negative_int("devices_per_domain", self.devices_per_domain, 1 << 20)
        require(self.domain_size % self.devices_per_node == 0, "devices_per_domain", self.devices_per_domain,
                f"expected 0 or a multiple of devices_per_node ({self.devices_per_node})")
        non_negative_int("pod_size", self.pod_size, 1 << 24)
        require(self.pod_size % self.domain_size == 0, "pod_size", self.pod_size,
                f"expected 0 or a multiple of the scale-up domain ({self.domain_size} devices)")
        finite_number("oversubscription", self.oversubscription, 1.0)
        finite_number("compute_efficiency", self.compute_efficiency, 0.0, 1.0, low_open=True)
        positive_int("sm_count", self.sm_count, 1 << 16)
        positive_int("gemm_tile_m", self.gemm_tile_m, 1024)
        positive_int("gemm_tile_n", self.gemm_tile_n, 1024)
        for name in ("flash_forward_efficiency", "flash_backward_efficiency", "unfused_attention_efficiency"):
            finite_number(name, getattr(self, name), 0.0, 1.0, low_open=True)
        one_of("architecture", self.architecture, ARCHITECTURES)
        finite_number("fp8_peak_flops", self.fp8_peak_flops, 0.0)
        finite_number("fp8_compute_efficiency", self.fp8_compute_efficiency, 0.0, 1.0)
        finite_number("fp4_peak_flops", self.fp4_peak_flops, 0.0)
        finite_number("host_bandwidth", self.host_bandwidth, 0.0, low_open=True)
        positive_int("host_memory_bytes", self.host_memory_bytes, 1 << 60)
        positive_int("devices_per_pcie_switch", self.devices_per_pcie_switch, 64)
        non_negative_int("nics_per_pcie_switch", self.nics_per_pcie_switch, 64)
        positive_int("sockets_per_node", self.sockets_per_node, 64)
        finite_number("socket_memory_bandwidth", self.socket_memory_bandwidth, 0.0, low_open=True)


# The host memory a node offers a training job for offload (docs/formulas.md §5.3). Platform: Google Cloud's
# a3-highgpu-8g (8 H100 on a 2 TiB DGX-class host) gives its guest 1,872 GB, so 1872/2048 of a node's memory is what
# a job sees. The job's own use: an asynchronous checkpoint copies each rank's state dict into host memory
# (torch.distributed.checkpoint async_save, PyTorch "Asynchronous Saving with DCP" recipe: CPU memory grows by
# checkpoint_size_per_rank x ranks; Megatron --async-save stages the same way), and a rank's checkpoint shard is at
# most its device's memory; the data loader and pinned buffers take the rest of that margin. Not validated: no measured
# run of the sets offloads.
PLATFORM_MEMORY_SHARE = 1872 / 2048
DGX_H100_HOST_MEMORY = 2 * 2**40  # DGX H100/H200 user guides: 2 TB system memory
DGX_A100_HOST_MEMORY = 2**40  # DGX A100 user guide: 1 TB system memory (the 320 GB system; 2 TB on the 640 GB one)


def offered_host_memory(node_bytes: int, devices_per_node: int, device_memory: int) -> int:
    """Host memory per device offered for offload: the device's share of what the platform leaves of the node's
    memory, less one device memory of checkpoint staging (and the data loader's and pinned buffers' margin)."""
    return max(1, int(node_bytes * PLATFORM_MEMORY_SHARE / devices_per_node) - device_memory)


def _preset(name, memory_mib, tflops, hbm_gbs, intra_gbs, inter_gbs, source, per_node=8,
            node_memory=DGX_H100_HOST_MEMORY, **extra) -> DeviceSpec:
    memory_mib = int(memory_mib)
    return DeviceSpec(name, memory_mib * MIB, tflops * 1e12, hbm_gbs * GB, per_node, intra_gbs * GB, inter_gbs * GB,
                      source=source, host_memory_bytes=offered_host_memory(node_memory, per_node, memory_mib * MIB),
                      **extra)


# GEMM and attention-kernel parameters per GPU generation (estimate/gemm.py; docs/formulas.md §3, docs/calibration.md
# §7). The two "fitted" numbers minimise the mean |MFU error| over examples/published_runs.yaml; they are rewritten
# in place by `scripts/calibrate.py --write`.
AMPERE_GEMM_EFFICIENCY = 0.705  # fitted: A100 GEMM ceiling, fraction of peak
HOPPER_GEMM_EFFICIENCY = 0.68  # fitted: H100/H200/H800 GEMM ceiling, fraction of peak
# FP8 GEMM ceilings, fraction of the FP8 peak, fitted on the generation's FP8 runs by the same script (docs/formulas.md
# §3.1); 0 = not fitted, the 16-bit ceiling assumed. Hopper: the fit (0.55) is not shipped: NeMo 24.07's rows drive
# it and it breaks the dgxc FP8/BF16 pair (docs/calibration.md §7). Blackwell: every B200 FP8 run is from one
# publication (Megatron-Bridge's performance summary), below the two sources a fit needs (MIN_FP8_SOURCES).
HOPPER_FP8_GEMM_EFFICIENCY = 0.0  # H100/H200/H800 FP8 GEMM ceiling (0: compute_efficiency)
BLACKWELL_FP8_GEMM_EFFICIENCY = 0.0  # B200 FP8 GEMM ceiling (0: compute_efficiency)
# B200/GB200 GEMM ceiling, published, not fitted (docs/formulas.md §9): Azure AI-benchmarking-guide ND_GB200_v6
# cuBLASLt FP8 16384^3, 2906.9 of 5000 TFLOP/s; the same harness gives Hopper 0.69-0.70, its fitted ceiling 0.68.
# Taken for BF16 and B200 too; Blackwell Ultra (B300, GB300) has no published figure and keeps the default.
BLACKWELL_GEMM_EFFICIENCY = 2906.9 / 5000
# A100: 108 SMs (NVIDIA A100 Tensor Core GPU Architecture whitepaper); FlashAttention-2 (Dao 2023) §4.1 on A100:
# forward up to 73 %, backward up to 63 % of peak; not fitted (no A100 run in the set uses flash attention). Unfused
# core: Korthikanti 2022 Table 4, the selective-recompute rerun less its score-matrix passes (docs/formulas.md §3);
# other devices keep that A100 figure as an assumption (the dataclass default).
AMPERE = dict(sm_count=108, compute_efficiency=AMPERE_GEMM_EFFICIENCY,
              flash_forward_efficiency=0.73, flash_backward_efficiency=0.63, unfused_attention_efficiency=0.324,
              calibrated=True, architecture="ampere", host_bandwidth=26e9,  # PCIe Gen4 x16
              scale_out_efficiency=AMPERE_SCALE_OUT_EFFICIENCY,
              # DGX A100 user guide: two EPYC 7742 (8 DDR4-3200 channels each), four PCIe Gen4 switches with two
              # GPUs and two ConnectX-6 NICs each
              node_memory=DGX_A100_HOST_MEMORY, socket_memory_bandwidth=204.8e9, devices_per_pcie_switch=2,
              nics_per_pcie_switch=2)
# Host side of the DGX H100/H200 (the dataclass defaults): DGX H100 user guide §1.2.3 (network modules, Table 6):
# eight ConnectX-7, one per GPU, each GPU reaching the CPU through its ConnectX-7's integrated PCIe Gen5 switch
# (ConnectX-7 datasheet: 32 lanes of PCIe Gen 5.0, integrated PCIe switch), four GPUs per CPU socket; two Xeon
# Platinum 8480C, 8 DDR5-4800 channels each; 2 TB. The b200, mi300x and ascend-910b presets keep these host facts as
# an assumption (not confirmed in stored material).
# H100/H200/H800 SXM: 132 SMs (NVIDIA H100 Tensor Core GPU Architecture whitepaper; H200 and H800 are the same
# GH100 SXM part); fused attention as cuDNN runs it in Transformer Engine: FlashAttention-3 paper (Shah et al. 2024)
# §4.1, H100, head dim 128, 4k tokens: cuDNN causal forward 518 and backward 499 TFLOP/s of 989.
HOPPER = dict(sm_count=132, compute_efficiency=HOPPER_GEMM_EFFICIENCY,
              fp8_compute_efficiency=HOPPER_FP8_GEMM_EFFICIENCY,
              flash_forward_efficiency=0.524, flash_backward_efficiency=0.504, calibrated=True, architecture="hopper",
              scale_out_efficiency=HOPPER_SCALE_OUT_EFFICIENCY,
              fp8_peak_flops=1978.9e12)  # H100 SXM datasheet: 1,978.9 TFLOP/s FP8 dense (3,957.8 with sparsity)

# Blackwell (Ultra): NVLink5 as measured on GB200 (links.py); B200/GB200 the GEMM ceiling above and their ConnectX-7
# NDR NICs' figure (the Hopper presets' NIC); B300/GB300 (ConnectX-8) the default scale-out fraction, unvalidated.
BLACKWELL_ULTRA = dict(scale_up_efficiency=BLACKWELL_NVLINK_EFFICIENCY, mxfp8=True, architecture="blackwell")
BLACKWELL = dict(BLACKWELL_ULTRA, compute_efficiency=BLACKWELL_GEMM_EFFICIENCY,
                 scale_out_efficiency=HOPPER_SCALE_OUT_EFFICIENCY)
# Host side of a Grace-Blackwell tray (GB200/GB300 NVL72: 4 GPUs and 2 Grace CPUs; docs/formulas.md §9): each
# Grace reaches its 2 GPUs over NVLink-C2C, 900 GB/s bidirectional per Grace (450 one way, 225 per GPU), and holds
# 480 GB of LPDDR5X at up to 512 GB/s (NVIDIA Grace CPU datasheet); one ConnectX NIC per GPU. Not confirmed in stored
# material beyond these datasheet figures; no measured run offloads on them.
GRACE_BLACKWELL = dict(host_bandwidth=225e9, node_memory=2 * 480 * 10**9, sockets_per_node=2,
                       socket_memory_bandwidth=512e9)

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
                **{**HOPPER, "scale_up_efficiency": 1.0}),  # 160 GB/s is already achieved: 80 % of 200 one way
        _preset("b200", 183359, 2250, 8000, 900, 50,
                "NVIDIA dgxc-benchmarking: 2250 TFLOP/s BF16 dense; 192 GB HBM3e 8 TB/s, NVLink5 1.8 TB/s (spec pages, "
                "not confirmed in stored material); 400 Gb/s per GPU; 148 SMs (FlashAttention-4, Zadouri et al. 2026, "
                "arXiv 2603.05451; Chips and Cheese: 74 per die); FP8 4500 TFLOP/s dense (DGX B200 datasheet "
                "72 PFLOPS FP8 training per 8 GPUs, with sparsity, halved); GEMM ceiling 0.581 (Azure ND GB200 v6 "
                "cuBLASLt FP8 16384^3, not fitted); NVLink5 0.755 of line rate (Azure ND GB200 v6 nccl-tests ring)",
                sm_count=148, fp8_peak_flops=4500e12, fp8_compute_efficiency=BLACKWELL_FP8_GEMM_EFFICIENCY,
                **BLACKWELL),
        _preset("b300", 288e9 / MIB, 2250, 8000, 900, 100,
                "NOT CALIBRATED. HGX B300 (Blackwell Ultra), per GPU of 8: 2250 TFLOP/s BF16, 4500 FP8, 13,500 FP4 "
                "dense (NVIDIA HGX page: 36 / 72 / 144 PFLOPS per 8 GPUs with sparsity, FP4 108 dense); 2.3 TB HBM3e "
                "per 8 GPUs (288 GB nominal) 8 TB/s; NVLink5 1.8 TB/s; ConnectX-8 800 Gb/s per GPU; 160 SMs "
                "(third-party spec pages, unconfirmed)",
                sm_count=160, fp8_peak_flops=4500e12, fp4_peak_flops=13500e12, **BLACKWELL_ULTRA),
        _preset("gb200-nvl72", 13.4e12 / 72 / MIB, 2500, 8000, 900, 50,
                "NOT CALIBRATED. GB200 NVL72 rack / 72 GPUs: 2500 TFLOP/s BF16, 5000 FP8, 10,000 FP4 dense (NVIDIA "
                "GB200 NVL72 page: 360 / 720 / 1,440 PFLOPS per rack with sparsity); 13.4 TB HBM3e 576 TB/s per rack "
                "(186 GB, 8 TB/s per GPU); one NVLink5 domain of 72 (130 TB/s: 1.8 TB/s per GPU), 18 trays of 4 GPUs "
                "and 2 Grace CPUs; ConnectX-7 400 Gb/s per GPU; 148 SMs as b200 (unconfirmed for GB200); GEMM ceiling "
                "0.581 and NVLink5 0.755 of line rate from Azure ND GB200 v6 microbenchmarks (not fitted)",
                per_node=4, devices_per_domain=72, **GRACE_BLACKWELL,
                sm_count=148, fp8_peak_flops=5000e12, fp4_peak_flops=10000e12, **BLACKWELL),
        _preset("gb300-nvl72", 20e12 / 72 / MIB, 2500, 8000, 900, 100,
                "NOT CALIBRATED. GB300 NVL72 rack / 72 GPUs (Blackwell Ultra): 2500 TFLOP/s BF16, 5000 FP8 (NVIDIA "
                "GB300 NVL72 page: 360 / 720 PFLOPS per rack with sparsity), 15,000 FP4 dense (1,080 PFLOPS per rack "
                "dense); 20 TB HBM3e 576 TB/s per rack (278 GB, 8 TB/s per GPU); one NVLink5 domain of 72 (1.8 TB/s "
                "per GPU), trays of 4 GPUs and 2 Grace CPUs; ConnectX-8 800 Gb/s per GPU; 160 SMs (unconfirmed)",
                per_node=4, devices_per_domain=72, **GRACE_BLACKWELL,
                sm_count=160, fp8_peak_flops=5000e12, fp4_peak_flops=15000e12, **BLACKWELL_ULTRA),
        _preset("h20", 96e9 / MIB, 148, 4000, 450, 50,
                "NOT CALIBRATED. NVIDIA H20 (Hopper, export part): 148 TFLOP/s BF16 and 296 FP8 dense, 96 GB HBM3 "
                "4.0 TB/s, NVLink 900 GB/s; 400 Gb/s per GPU assumed (HGX board); 78 SMs (Geekbench report, "
                "unconfirmed)",
                sm_count=78, fp8_peak_flops=296e12, flash_forward_efficiency=HOPPER["flash_forward_efficiency"],
                scale_out_efficiency=HOPPER_SCALE_OUT_EFFICIENCY,
                flash_backward_efficiency=HOPPER["flash_backward_efficiency"], architecture="hopper"),
        _preset("mi300x", 196608, 1307.4, 5300, 448, 50,
                "AMD MI300X: 1307.4 TFLOP/s BF16 dense, 192 GB HBM3 5.3 TB/s, 7x128 GB/s xGMI (896 aggregate); "
                "400 Gb/s per GPU; 304 CUs (AMD CDNA 3 white paper)",
                sm_count=304),
        _preset("mi325x", 256e9 / MIB, 1307.4, 6000, 448, 50,
                "NOT CALIBRATED. AMD MI325X (CDNA 3, MI300X compute): 1307.4 TFLOP/s BF16, 2614.9 FP8 dense, 256 GB "
                "HBM3E 6 TB/s, 7x128 GB/s xGMI as mi300x; 400 Gb/s per GPU; 304 CUs",
                sm_count=304, fp8_peak_flops=2614.9e12),
        _preset("mi355x", 288e9 / MIB, 2516.6, 8000, 537.6, 50,
                "NOT CALIBRATED. AMD MI355X (CDNA 4): 256 CUs x 2.4 GHz x 8,192 FP8 FLOP/clock/CU = 5033 TFLOP/s FP8, "
                "2516.6 BF16, 10,066 FP4 dense (AMD: ~2.5 / 5 / 10 PFLOPS); 288 GB HBM3E 8 TB/s; 7x153.6 GB/s "
                "Infinity Fabric (1075 aggregate); 400 Gb/s (Pollara) per GPU",
                sm_count=256, fp8_peak_flops=5033.2e12, fp4_peak_flops=10066.3e12),
        _preset("ascend-910b", 65536, 320, 1600, 196, 25,
                "NOT CONFIRMED (published_runs.yaml): ~320 TFLOP/s FP16, 64 GB HBM2e ~1.6 TB/s, HCCS ~392 GB/s; "
                "200 Gb/s RoCE per NPU assumed; 20 AI (cube) cores ASSUMED for the GEMM waves",
                sm_count=20),
    )
}


def device_preset(name: str) -> DeviceSpec:
    """A preset by name, case-insensitive (SpecError with a did-you-mean otherwise)."""
    return lookup(name, PRESETS, "device")


@dataclass(frozen=True)
class ClusterSpec:
    """`count` identical devices; overrides (memory, bandwidths, devices per node) are applied to the device."""

    __hash__ = cached_hash
    __getstate__ = state_without_hash

    device: DeviceSpec
    """the accelerator, after any overrides"""
    count: int
    """devices in the cluster"""

    def __post_init__(self):
        positive_int("gpus", self.count)
        require(self.count <= 1 << 24, "gpus", self.count, "expected at most 16,777,216 devices")

    @property
    def nodes(self) -> int:
        return -(-self.count // self.device.devices_per_node)

    @property
    def domain_ranks(self) -> int:
        """Consecutive ranks of the job on one scale-up domain: all of them when the job fits in one; else the most
        whole nodes, no more than a domain holds, that divide the job evenly (the scheduler's segment: Slurm's
        topology/block plugin keeps each --segment of nodes inside one block; 2,048 GPUs on NVL72 racks: 64 per rack,
        docs/formulas.md §7.4); a whole domain when no such segment divides the job (a last, partial domain)."""
        domain, per_node = self.device.domain_size, self.device.devices_per_node
        if self.count <= domain:
            return self.count
        return next((n for n in range(domain, 0, -per_node) if self.count % n == 0), domain)

    @property
    def pod_ranks(self) -> int:
        """Consecutive ranks of the job in one pod of the scale-out network: a pod's domains, each holding
        domain_ranks of them; the whole job without pods or when it fits in one."""
        pod = self.device.pod_size
        return min(self.count, pod // self.device.domain_size * self.domain_ranks) if pod else self.count

    def with_overrides(self, **overrides) -> "ClusterSpec":
        """A copy whose device has the given fields replaced (validated like a preset)."""
        given = {k: v for k, v in overrides.items() if v is not None}
        return ClusterSpec(replace(self.device, **given), self.count) if given else self
