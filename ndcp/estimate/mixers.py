"""The chunked-scan cores of the linear-attention and state-space mixers (docs/formulas.md §2.7): their matmul FLOPs,
the time they take, their memory-bound passes and what they keep for backward, per body layer of a kind (a kind's
layers priced at their average mixer: ModelSpec.mixer_shares).

No s^2 term: both cores run chunk by chunk (chunk C tokens), quadratic only within a chunk, and carry a fixed-size
state between chunks.
- Gated DeltaNet (Yang, Kautz and Hatamizadeh 2025, "Gated Delta Networks", §3.3, the chunkwise WY form; fla
  chunk_gated_delta_rule), per token and value head, key dims K, value dims V: within its chunk Q K^T and K K^T
  (2CK each), the WY solve's two products with the values and the chunk's outputs (2CV each); across chunks the
  query and the WY keys against the K x V state and the state update (2KV each): 4C(K + V) + 6KV.
- Mamba-2 SSD (Dao and Gu 2024, "Transformers are SSMs", §6, the chunked algorithm), per token and head, state N,
  head dims P, chunk Q: within its chunk C B^T (2QN) and its masked product with the inputs (2QP); the chunk state
  B^T X and the output C h from the states (2NP each): 2Q(N + P) + 4NP.
Both count the whole chunk (no causal half inside it): a conservative count of what the kernels execute (mamba_ssm
computes C B^T once per group of heads sharing B and C, not per head: ssd_forward_kernels counts it so for time).

Context parallelism (mixer_cp_seconds): Gated DeltaNet has none (the rules refuse cp > 1); Mamba-2's is an
all-to-all to head-sharded sequences and back, per layer, as Megatron-Core runs it.

Time. Gated DeltaNet (fla's Triton kernels, which Megatron-Core's gated_delta_net.py calls): its matmuls priced
as the unfused attention core's batched per-head GEMMs (DeviceSpec.unfused_attention_efficiency), the backward at
SCAN_BACKWARD_RATIO times the forward's FLOPs, its convolution and gated norm as memory-bound passes; no measured
run in examples/ has it. Mamba-2 (ssd_forward_kernels, ssd_backward_kernels, mamba_mixer_seconds): each kernel
Megatron-Core's MambaMixer runs in training between its projections, forward and backward, priced as max(its
matmul FLOPs at the rate the published Triton chunk-scan timing shows (ssd_flop_rate: SSD_MATMUL_EFFICIENCY of the
peak, measured on Hopper), its HBM bytes at DeviceSpec.hbm_bandwidth): the op inventory of docs/formulas.md §2.7,
from the kernels' source; nothing fitted to the Nemotron-3 Nano rows.
"""
from __future__ import annotations

from typing import NamedTuple

from ..specs.device import ClusterSpec, DeviceSpec
from ..specs.model import ModelSpec
from ..specs.run import FP32_BYTES, RunSpec
from .communication import all_to_all_seconds, cp_comm_seconds, cp_link
from .keys import Degrees

SCAN_BACKWARD_RATIO = 2.5  # as flash attention's (it recomputes the chunk states as flash recomputes the scores)
# mamba_ssm's Triton SSD kernels' matmul rate, as a fraction of the BF16 peak, over ndcp's whole-chunk FLOP count
# (ScanKernel.flops): `_chunk_scan_fwd` (mamba-ssm 2.2.6.post3, Triton 3.5.0) on an H800 SXM (989.4 TFLOP/s, the
# H100 SXM's tensor cores) at batch 8, 80 heads of 64, state 128, 1 group, chunk 256 (tile-ai/tilelang
# benchmark/mamba2/README.md and mamba_benchmark_result.png @a35008a4): 90-91 TFLOP/s of its causal count
# (L Q h P + 2 L h P N) at 8,192-32,768 tokens a sequence, 1.89-7.64 ms, i.e. 135-137 TFLOP/s of ndcp's count
# (1.5 x at that shape); 106-110 (0.161-0.167) at 1,024-4,096. Measured on Hopper only (docs/formulas.md §2.7).
SSD_MATMUL_EFFICIENCY = 0.137
SSD_HOPPER_FLOP_RATE = SSD_MATMUL_EFFICIENCY * 989.4e12  # the same measurement in FLOP/s


def gated_deltanet_core_flops(model: ModelSpec, tokens: float, tp: int) -> float:
    """Forward matmul FLOPs of one Gated DeltaNet core over `tokens` tokens, its value heads split over TP."""
    g = model.linear_attention
    k, v = g.key_head_dim, g.value_head_dim
    return tokens * g.value_heads / tp * (4 * g.chunk * (k + v) + 6 * k * v)


def ssd_core_flops(model: ModelSpec, tokens: float, tp: int) -> float:
    """Forward matmul FLOPs of one Mamba-2 SSD scan over `tokens` tokens, its heads split over TP."""
    m = model.mamba
    return tokens * m.heads / tp * (2 * m.chunk * (m.state + m.head_dim) + 4 * m.state * m.head_dim)


def scan_core_flops(model: ModelSpec, kind: str, tokens: float, tp: int) -> float:
    """Forward FLOPs of the chunked-scan cores of an average layer of `kind` (0 for attention-only models)."""
    shares = model.mixer_shares(kind)
    flops = 0.0
    if shares.linear_attention:
        flops += shares.linear_attention * gated_deltanet_core_flops(model, tokens, tp)
    if shares.mamba:
        flops += shares.mamba * ssd_core_flops(model, tokens, tp)
    return flops


def scan_core_seconds(model: ModelSpec, kind: str, tokens: float, tp: int, device: DeviceSpec, dtype_bytes: int,
                      layout_copies: bool) -> tuple[float, float]:
    """(forward, backward) seconds of the scan mixers of an average layer of `kind` over `tokens` tokens: Gated
    DeltaNet's core as unfused batched GEMMs (module docstring), Mamba-2's kernels by mamba_mixer_seconds."""
    shares = model.mixer_shares(kind)
    forward = backward = 0.0
    if shares.linear_attention:
        flops = shares.linear_attention * gated_deltanet_core_flops(model, tokens, tp)
        forward = flops / _scan_flop_rate(device)
        backward = SCAN_BACKWARD_RATIO * forward
    if shares.mamba:
        f, b = mamba_mixer_seconds(model, tokens, tp, device, dtype_bytes, layout_copies)
        forward, backward = forward + shares.mamba * f, backward + shares.mamba * b
    return forward, backward


class ScanKernel(NamedTuple):
    """One kernel (or torch op) of a scan mixer, per token on one device: HBM bytes it reads and writes (each
    tensor once: repeated reads of a tile are taken to hit L2) and the matmul FLOPs it executes."""

    name: str
    nbytes: float
    flops: float = 0.0


class _Ssd(NamedTuple):
    """One device's share of a Mamba-2 layer (heads and groups split by TP, mamba_mixer.py nheads_local_tp and
    ngroups_local_tp), per token: heads h, head dims p, state n, groups g, chunk q, inner width d = h p, the
    convolution's channels c = d + 2 g n, the chunk states' elements per token s = h p n / q; a the activation
    bytes (bf16 states: Megatron-Core's mamba_training_ssm_states_dtype defaults to params_dtype)."""

    h: int
    p: int
    n: int
    g: int
    q: int
    d: int
    c: int
    s: float
    a: int


def _ssd_shape(model: ModelSpec, tp: int, dtype_bytes: int) -> _Ssd:
    m = model.mamba
    h, g = m.heads // tp, m.groups // tp
    d = h * m.head_dim
    return _Ssd(h, m.head_dim, m.state, g, m.chunk, d, d + 2 * g * m.state, h * m.head_dim * m.state / m.chunk,
                dtype_bytes)


def ssd_forward_kernels(model: ModelSpec, tp: int, dtype_bytes: int, layout_copies: bool) -> list[ScanKernel]:
    """The forward of one Mamba-2 layer's mixer between its projections, as Megatron-Core runs it in training
    (mamba_mixer.py @d98e8a6 `_ssm_training`: mamba_ssm `mamba_split_conv1d_scan_combined` without
    rmsnorm_weight, so z gates the scan's output, then `self.norm`, mamba_ssm layernorm_gated RMSNorm without z),
    per token; FP32 (4 bytes) where the kernels allocate float32 (mamba_ssm @e9594ce ops/triton/ssd_*.py).
    layout_copies: the `rearrange(...).contiguous()` of the input projection's output and of y (l b d <-> b l d)
    copy unless the micro-batch is one sequence."""
    h, p, n, g, q, d, c, s, a = _ssd_shape(model, tp, dtype_bytes)
    gn, f = g * n, FP32_BYTES
    kernels = [
        ScanKernel("conv1d", 2 * c * a),  # causal-conv1d channel-last fwd: read x B C, write SiLU(conv)
        ScanKernel("chunk_cumsum", h * (a + 2 * f)),  # read dt; write softplus(dt + bias) and dA cumsum, fp32
        ScanKernel("chunk_state", d * a + gn * a + 2 * h * f + s * f, 2 * h * p * n),  # B^T x per chunk, fp32
        ScanKernel("state_passing", s * f + s * a),  # read fp32 chunk states, write the passed ones (bf16)
        ScanKernel("bmm_chunk", 2 * gn * a + g * q * f, 2 * g * q * n),  # C B^T per group, fp32
        ScanKernel("chunk_scan", g * q * f + 2 * d * a + gn * a + s * a + 2 * h * f + 2 * d * a,
                   h * (2 * q * p + 2 * n * p)),  # read CB, x, z, C, states, dt, dA; write out and out_x
        ScanKernel("rmsnorm", 2 * d * a),  # Megatron's self.norm: read y, write the normed y
    ]
    return kernels + _layout_copies(d, gn, h, a, layout_copies)


def _layout_copies(d: int, gn: float, h: int, a: int, layout_copies: bool) -> list[ScanKernel]:
    """Megatron's `rearrange(...).contiguous()` of the input projection's output (z, x, B, C, dt) and of y, l b d
    <-> b l d, read and written once each; in either pass, and only with more than one sequence a micro-batch."""
    return [ScanKernel("layout_copies", 2 * (2 * d + 2 * gn + h) * a + 2 * d * a)] if layout_copies else []


def ssd_backward_kernels(model: ModelSpec, tp: int, dtype_bytes: int, layout_copies: bool) -> list[ScanKernel]:
    """The backward of ssd_forward_kernels' mixer (MambaSplitConv1dScanCombinedFn.backward and
    _mamba_chunk_scan_combined_bwd, mamba_ssm @e9594ce; causal-conv1d's channel-last backward), per token: it
    recomputes the convolution, dt, CB and the chunk states (fp32), then runs the gradient kernels; nsplits 1
    (chunk_state_bwd_db / chunk_scan_bwd_dc: one split when batch x chunks x heads reaches the SM count times the
    heads per group, as at 8k tokens and up), the fp32 per-head dA gradients' torch adds and reverse cumsum as
    read-write passes."""
    h, p, n, g, q, d, c, s, a = _ssd_shape(model, tp, dtype_bytes)
    gn, f, hf = g * n, FP32_BYTES, h * FP32_BYTES
    kernels = [
        ScanKernel("rmsnorm_bwd", 3 * d * a),  # read y and dy, write dx
        ScanKernel("conv1d_recompute", 2 * c * a),
        ScanKernel("chunk_cumsum_recompute", 2 * h * a + h * (a + 2 * f)),  # dt.clone() and the cumsum
        ScanKernel("bmm_chunk_recompute", 2 * gn * a + g * q * f, 2 * g * q * n),
        ScanKernel("chunk_state_recompute", d * a + gn * a + 2 * hf + s * f, 2 * h * p * n),
        ScanKernel("state_passing_recompute", 2 * s * f),  # out_dtype defaults to the fp32 states'
        ScanKernel("chunk_scan_bwd_dz", 6 * d * a),  # read x, z, out_x, dout; write dz, dout_x
        ScanKernel("chunk_scan_bwd_dstates", gn * a + hf + d * a + s * f, 2 * h * p * n),
        ScanKernel("state_passing_bwd", 2 * s * f + 2 * s * a),  # read states, dstates; write both in bf16
        ScanKernel("chunk_scan_chunk_state_bwd_dx", 2 * d * a + 2 * hf + gn * a + g * q * f + s * a + d * a + hf,
                   h * (2 * q * p + 2 * n * p)),  # read x, dt, dA, B, CB, dout, dstates; write dx, ddt
        ScanKernel("chunk_state_bwd_db", d * a + 2 * hf + s * a + gn * a + gn * f + hf, 2 * h * p * n),
        ScanKernel("chunk_scan_bwd_dc", s * a + hf + d * a + gn * a + gn * f + hf, 2 * h * p * n),
        ScanKernel("chunk_scan_bwd_dcb", 2 * d * a + 2 * hf + g * q * f, 2 * h * q * p),  # write dCB fp32
        ScanKernel("bmm_chunk_bwd", 2 * (2 * gn * a + g * q * f + gn * f), 4 * g * q * n),  # dB and dC, twice
        ScanKernel("chunk_scan_bwd_ddAcs_stable", 2 * d * a + 2 * hf + g * q * f + hf, 2 * h * q * p),
        ScanKernel("ddA_torch_ops", 12 * hf),  # the reverse cumsum (flip, cumsum, flip) and two adds, fp32
        ScanKernel("chunk_cumsum_bwd", 2 * hf + 2 * h * a),  # read ddA, ddt, dt; write ddt
        ScanKernel("conv1d_bwd", 3 * c * a),  # read x and dout (SiLU recomputed in-kernel), write dx
    ]
    return kernels + _layout_copies(d, gn, h, a, layout_copies)


def kernel_seconds(kernels: list[ScanKernel], tokens: float, device: DeviceSpec) -> float:
    """Each kernel at its roofline, max(matmul FLOPs at ssd_flop_rate, HBM bytes at hbm_bandwidth), summed."""
    rate = ssd_flop_rate(device)
    return tokens * sum(max(k.flops / rate, k.nbytes / device.hbm_bandwidth) for k in kernels)


def mamba_mixer_seconds(model: ModelSpec, tokens: float, tp: int, device: DeviceSpec, dtype_bytes: int,
                        layout_copies: bool) -> tuple[float, float]:
    """(forward, backward) seconds of one Mamba-2 layer's mixer between its projections over `tokens` tokens: its
    kernels (ssd_forward_kernels, ssd_backward_kernels) by kernel_seconds, never below the SSD FLOPs the HFU
    numerator credits (ssd_core_flops, whole chunks, C B^T per head; backward SCAN_BACKWARD_RATIO x), both at
    ssd_flop_rate."""
    floor = ssd_core_flops(model, tokens, tp) / ssd_flop_rate(device)
    forward = kernel_seconds(ssd_forward_kernels(model, tp, dtype_bytes, layout_copies), tokens, device)
    backward = kernel_seconds(ssd_backward_kernels(model, tp, dtype_bytes, layout_copies), tokens, device)
    return max(forward, floor), max(backward, SCAN_BACKWARD_RATIO * floor)


def ssd_flop_rate(device: DeviceSpec) -> float:
    """FLOP/s of mamba_ssm's Triton SSD kernels' matmuls: SSD_MATMUL_EFFICIENCY of the BF16 peak (measured on an
    H800), never above the unfused attention core's rate. Unvalidated off Hopper, so priced the slower way there:
    also capped at the Hopper rate in FLOP/s (SSD_HOPPER_FLOP_RATE), so that a Blackwell part is not assumed to run
    these small-tile Triton matmuls faster than an H100 does."""
    rate = min(SSD_MATMUL_EFFICIENCY * device.peak_flops, _scan_flop_rate(device))
    return rate if device.architecture == "hopper" else min(rate, SSD_HOPPER_FLOP_RATE)


def _scan_flop_rate(device: DeviceSpec) -> float:
    """FLOP/s of a scan kernel's per-head batched matmuls: the unfused attention core's (batched per-head GEMMs)."""
    return device.peak_flops * min(device.unfused_attention_efficiency, device.compute_efficiency)


def mixer_cp_seconds(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, kind: str, degrees: Degrees,
                     cp_comm: str, attention: float, attention_backward: float) -> tuple[float, float]:
    """Exposed (forward, backward) context-parallel seconds of an average layer of `kind`: the attention layers'
    exchange under `cp_comm` (estimate/communication.py), each hidden behind its own layer's core (`attention`,
    `attention_backward`: the kind's average), and the Mamba-2 layers' all-to-alls (mamba_cp_seconds)."""
    shares = model.mixer_shares(kind)
    if shares.plain or degrees.cp == 1:
        return cp_comm_seconds(model, cluster, run, degrees, cp_comm, attention, attention_backward)
    forward = backward = 0.0
    if shares.attention:
        a = shares.attention
        f, b = cp_comm_seconds(model, cluster, run, degrees, cp_comm, attention / a, attention_backward / a)
        forward, backward = a * f, a * b
    if shares.mamba:
        seconds = shares.mamba * mamba_cp_seconds(model, cluster, run, degrees)
        forward, backward = forward + seconds, backward + seconds
    return forward, backward


def mamba_cp_seconds(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, degrees: Degrees) -> float:
    """One Mamba-2 layer's context-parallel all-to-alls, one direction (Megatron-Core mamba_context_parallel.py):
    its sequence-sharded z, x, B, C and dt become head-sharded over the CP group before the convolution and the scan
    (B and C repeated over the CP ranks that share a group), and the output goes back; none of it overlapped (the
    scan needs all of it). The backward moves the same bytes as gradients."""
    m, tp, cp = model.mamba, degrees.tp, degrees.cp
    groups = m.groups // tp
    repeat = cp // groups if groups < cp else 1
    into = 2 * m.inner + 2 * m.groups * m.state * repeat + m.heads
    tokens, dtype = degrees.tokens(run.seq_len), run.activation_bytes
    bandwidth, latency = cp_link(cluster, tp, cp)
    return sum(all_to_all_seconds(tokens * width / tp * dtype, cp, bandwidth, latency) for width in (into, m.inner))


def scan_elementwise_bytes(model: ModelSpec, kind: str, tokens: float, tp: int, dtype_bytes: int) -> float:
    """Memory-bound forward passes of an average layer's Gated DeltaNet mixers, one device: the causal convolution
    and its SiLU (read and write its channels), the gated output norm (read the output and the gate, write the
    product). Mamba-2's are kernels of its inventory (ssd_forward_kernels, ssd_backward_kernels)."""
    share, spec = model.mixer_shares(kind).linear_attention, model.linear_attention
    if not share:
        return 0.0
    return share * tokens / tp * (2 * spec.conv_dim + 3 * spec.projection_widths()[1]) * dtype_bytes


def scan_saved(model: ModelSpec, kind: str, tokens: float, dtype_bytes: int) -> list[tuple[str, float]]:
    """(name, bytes before TP) of what an average layer's scan mixers keep for backward (all split by TP with their
    heads): the input projection's output (the convolution's input and the gate), the convolution's output (the
    core's inputs), the core's fp32 per-chunk decay and, for Gated DeltaNet, its C x C within-chunk matrix per
    head (fla chunk_gated_delta_rule saves A; mamba_ssm saves dA_cumsum and dt), the core's output and the gated
    norm's output (the output projection's input). The chunk states are recomputed in backward, not kept."""
    shares = model.mixer_shares(kind)
    out = []
    for share, spec, name in ((shares.linear_attention, model.linear_attention, "gdn"),
                              (shares.mamba, model.mamba, "ssd")):
        if not share:
            continue
        into, inner = spec.projection_widths()
        heads = spec.state_heads
        chunk_matrix = spec.chunk * heads * dtype_bytes if name == "gdn" else 2 * FP32_BYTES * heads
        out += [(f"{name}_in_proj_output", share * tokens * into * dtype_bytes),
                (f"{name}_conv_output", share * tokens * spec.conv_dim * dtype_bytes),
                (f"{name}_chunk_terms", share * tokens * chunk_matrix),
                (f"{name}_core_output", share * tokens * inner * dtype_bytes),
                (f"{name}_out_proj_input", share * tokens * inner * dtype_bytes)]
    return out


__all__ = ["gated_deltanet_core_flops", "ssd_core_flops", "scan_core_flops", "scan_core_seconds", "mixer_cp_seconds",
           "mamba_cp_seconds", "scan_elementwise_bytes", "scan_saved", "ScanKernel", "ssd_forward_kernels",
           "ssd_backward_kernels", "kernel_seconds", "mamba_mixer_seconds", "ssd_flop_rate", "SCAN_BACKWARD_RATIO",
           "SSD_MATMUL_EFFICIENCY"]
