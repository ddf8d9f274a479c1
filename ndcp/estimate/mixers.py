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
Both count the whole chunk (no causal half inside it): a conservative count of what the kernels execute.

Context parallelism (mixer_cp_seconds): Gated DeltaNet has none (the rules refuse cp > 1); Mamba-2's is an
all-to-all to head-sharded sequences and back, per layer, as Megatron-Core runs it.

Time: the kernels (fla's and mamba_ssm's Triton kernels, which Megatron-Core's gated_delta_net.py and
mamba_mixer.py call) are not measured here: their matmuls are priced as the unfused attention core's batched
per-head GEMMs (DeviceSpec.unfused_attention_efficiency), their backward at SCAN_BACKWARD_RATIO times the forward's
FLOPs (both recompute the chunk states in backward). Gated DeltaNet: no measured run in examples/ has it. Mamba-2:
the Megatron-Bridge Nemotron-3 Nano rows (docs/formulas.md §2.7) measure 1.7-2 x the estimated steps, most of the
gap shared with attention-only MoE models of the same size on the same systems; nothing here is fitted to them.
"""
from __future__ import annotations

from ..specs.device import ClusterSpec, DeviceSpec
from ..specs.model import ModelSpec
from ..specs.run import RunSpec
from .communication import all_to_all_seconds, cp_comm_seconds, cp_link
from .keys import Degrees

SCAN_BACKWARD_RATIO = 2.5  # as flash attention's (it recomputes the chunk states as flash recomputes the scores)
FP32 = 4


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


def scan_core_seconds(forward_flops: float, device: DeviceSpec) -> tuple[float, float]:
    """(forward, backward) seconds of scan cores executing `forward_flops` (module docstring: priced as unfused
    batched GEMMs, conservatively)."""
    forward = forward_flops / (device.peak_flops * min(device.unfused_attention_efficiency, device.compute_efficiency))
    return forward, SCAN_BACKWARD_RATIO * forward


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
    """Memory-bound forward passes of an average layer's scan mixers, one device: the causal convolution and its
    SiLU (read and write its channels), the gated output norm (read the output and the gate, write the product)."""
    shares = model.mixer_shares(kind)
    total = 0.0
    for share, spec in ((shares.linear_attention, model.linear_attention), (shares.mamba, model.mamba)):
        if share:
            inner = spec.projection_widths()[1]
            total += share * tokens / tp * (2 * spec.conv_dim + 3 * inner)
    return total * dtype_bytes


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
        chunk_matrix = spec.chunk * heads * dtype_bytes if name == "gdn" else 2 * FP32 * heads
        out += [(f"{name}_in_proj_output", share * tokens * into * dtype_bytes),
                (f"{name}_conv_output", share * tokens * spec.conv_dim * dtype_bytes),
                (f"{name}_chunk_terms", share * tokens * chunk_matrix),
                (f"{name}_core_output", share * tokens * inner * dtype_bytes),
                (f"{name}_out_proj_input", share * tokens * inner * dtype_bytes)]
    return out


__all__ = ["gated_deltanet_core_flops", "ssd_core_flops", "scan_core_flops", "scan_core_seconds", "mixer_cp_seconds",
           "mamba_cp_seconds",
           "scan_elementwise_bytes", "scan_saved", "SCAN_BACKWARD_RATIO"]
