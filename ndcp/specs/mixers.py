"""Token mixers besides softmax attention (docs/models.md §6): Gated DeltaNet linear attention (Yang, Kautz and
Hatamizadeh 2025, "Gated Delta Networks"; Qwen3-Next, Qwen3.5) and Mamba-2 (Dao and Gu 2024, "Transformers are SSMs",
the SSD layer; Nemotron-H), with their exact parameter counts, and the per-layer pattern that says which layer runs
which mixer.

A model's `layer_mixers` holds one character per body layer (MIXER_CODES); empty means softmax attention on every
layer. With `hybrid_blocks` (Megatron-Core hybrid models, Nemotron-H's `hybrid_override_pattern`) each body layer is
one block: a mixer alone, or ("-") the MLP alone.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from .fields import positive_int, require

ATTENTION, GATED_DELTANET, MAMBA2, MLP_ONLY = "A", "G", "M", "-"
MIXER_CODES = {ATTENTION: "softmax attention (full, or local under sliding_window / attention_chunk)",
               GATED_DELTANET: "Gated DeltaNet linear attention (linear_attention)",
               MAMBA2: "Mamba-2 (SSD) state-space mixer",
               MLP_ONLY: "no mixer: the MLP block alone (hybrid_blocks only)"}
MIXERS = (ATTENTION, GATED_DELTANET, MAMBA2)  # the codes that mix tokens


@dataclass(frozen=True)
class LinearAttentionSpec:
    """Gated DeltaNet (transformers Qwen3NextGatedDeltaNet; Megatron-Core megatron/core/ssm/gated_delta_net.py,
    core_r0.15): per layer an input projection to q, k (key_heads x key_head_dim each), v and the output gate z
    (value_heads x value_head_dim each) and the per-head b, a; a depthwise causal convolution over q, k, v; the
    delta-rule state of key_head_dim x value_head_dim per value head, computed chunk by chunk; a gated RMSNorm of
    value_head_dim; the output projection."""

    key_heads: int
    """query/key heads (linear_num_key_heads; repeated to the value heads)"""
    value_heads: int
    """value heads (linear_num_value_heads): each keeps a key_head_dim x value_head_dim state"""
    key_head_dim: int
    """dims per query/key head (linear_key_head_dim)"""
    value_head_dim: int
    """dims per value head (linear_value_head_dim)"""
    conv_kernel: int = 4
    """width of the depthwise causal convolution (linear_conv_kernel_dim)"""
    chunk: int = 64
    """tokens per chunk of the chunked delta rule (fla chunk_gated_delta_rule: 64)"""

    def __post_init__(self):
        for name in ("key_heads", "value_heads", "key_head_dim", "value_head_dim", "conv_kernel", "chunk"):
            positive_int(f"linear_attention.{name}", getattr(self, name))
        require(self.value_heads % self.key_heads == 0, "linear_attention.value_heads", self.value_heads,
                f"must be a multiple of key_heads ({self.key_heads})")

    @property
    def state_heads(self) -> int:
        """Heads that each keep a state (and that TP splits): the value heads."""
        return self.value_heads

    @property
    def tp_counts(self) -> dict[str, int]:
        """What tensor parallelism splits, so must divide (gated_delta_net.py: num_key_heads and num_value_heads
        // tp_size)."""
        return {"key heads": self.key_heads, "value heads": self.value_heads}

    @property
    def key_dim(self) -> int:
        return self.key_heads * self.key_head_dim

    @property
    def value_dim(self) -> int:
        return self.value_heads * self.value_head_dim

    @property
    def conv_dim(self) -> int:
        """Channels of the causal convolution: q, k and v."""
        return 2 * self.key_dim + self.value_dim

    def projection_widths(self) -> tuple[int, int]:
        """(input projection outputs, output projection inputs): q, k, v, z, b, a in; the gated values out."""
        return 2 * self.key_dim + 2 * self.value_dim + 2 * self.value_heads, self.value_dim

    def parameters(self, hidden: int) -> int:
        """Input and output projections, convolution weights (no bias), dt_bias and A_log per value head, the
        gated norm's weight."""
        into, out = self.projection_widths()
        return hidden * into + out * hidden + self.conv_dim * self.conv_kernel + 2 * self.value_heads \
            + self.value_head_dim


@dataclass(frozen=True)
class MambaSpec:
    """Mamba-2 (transformers NemotronHMamba2Mixer; Megatron-Core megatron/core/ssm/mamba_mixer.py): per layer an
    input projection to z, x (heads x head_dim each), B and C (groups x state each) and dt (one per head); a
    depthwise causal convolution with bias over x, B, C; the SSD scan, chunk by chunk, with a state x head_dim
    state per head; dt_bias, A_log and D per head; a gated RMSNorm over heads x head_dim; the output projection."""

    heads: int
    """SSM heads (mamba_num_heads)"""
    head_dim: int
    """dims per SSM head (mamba_head_dim); heads x head_dim is the mixer's inner width"""
    state: int
    """state dims per head (ssm_state_size)"""
    groups: int = 1
    """groups sharing B and C (n_groups)"""
    conv_kernel: int = 4
    """width of the causal convolution (conv_kernel)"""
    chunk: int = 128
    """tokens per chunk of the SSD scan (chunk_size)"""

    def __post_init__(self):
        for name in ("heads", "head_dim", "state", "groups", "conv_kernel", "chunk"):
            positive_int(f"mamba.{name}", getattr(self, name))
        require(self.heads % self.groups == 0, "mamba.groups", self.groups, f"must divide mamba.heads ({self.heads})")

    @property
    def state_heads(self) -> int:
        """Heads that each keep a state (and that TP splits)."""
        return self.heads

    @property
    def tp_counts(self) -> dict[str, int]:
        """What tensor parallelism splits, so must divide (mamba_mixer.py: nheads and ngroups % tp_size == 0)."""
        return {"heads": self.heads, "groups": self.groups}

    @property
    def inner(self) -> int:
        return self.heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        """Channels of the causal convolution: x, B and C."""
        return self.inner + 2 * self.groups * self.state

    def projection_widths(self) -> tuple[int, int]:
        """(input projection outputs, output projection inputs): z, x, B, C, dt in; the gated inner width out."""
        return 2 * self.inner + 2 * self.groups * self.state + self.heads, self.inner

    def parameters(self, hidden: int) -> int:
        """Input and output projections (no bias), convolution weights and bias, dt_bias, A_log and D per head, the
        gated norm's weight."""
        into, out = self.projection_widths()
        return hidden * into + out * hidden + self.conv_dim * (self.conv_kernel + 1) + 3 * self.heads + self.inner


class MixerShares(NamedTuple):
    """The share of a kind's body layers that run each mixer, and that have an MLP (a plain model: 1, 0, 0, 1)."""

    attention: float
    linear_attention: float
    mamba: float
    mlp: float

    @property
    def plain(self) -> bool:
        """Every layer of the kind is softmax attention with its MLP (what the estimators priced before mixers)."""
        return self == PLAIN


PLAIN = MixerShares(1.0, 0.0, 0.0, 1.0)


def mixer_shares(mixers: list[str], has_mlp: list[bool]) -> MixerShares:
    """Shares of a kind's layers from their mixer codes and MLP flags (PLAIN when the kind has no layers)."""
    if not mixers:
        return PLAIN
    n = len(mixers)
    return MixerShares(mixers.count(ATTENTION) / n, mixers.count(GATED_DELTANET) / n, mixers.count(MAMBA2) / n,
                       sum(has_mlp) / n)


def check_layer_mixers(pattern: str, layers: int, hybrid_blocks: bool) -> None:
    """A pattern of one MIXER_CODES character per body layer (or empty); "-" only with hybrid_blocks."""
    codes = sorted(MIXER_CODES if hybrid_blocks else MIXERS)
    meaning = "; ".join(f"{c}: {MIXER_CODES[c]}" for c in codes)
    require(isinstance(pattern, str) and (pattern == "" or (len(pattern) == layers and set(pattern) <= set(codes))),
            "layer_mixers", pattern, f"expected {layers} characters (one per layer), each one of {', '.join(codes)} "
                                     f"({meaning})")


__all__ = ["LinearAttentionSpec", "MambaSpec", "MIXER_CODES", "MIXERS", "ATTENTION", "GATED_DELTANET", "MAMBA2",
           "MLP_ONLY", "MixerShares", "PLAIN", "mixer_shares", "check_layer_mixers"]
