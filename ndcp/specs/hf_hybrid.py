"""Hugging Face readers for hybrid models, whose layers mix tokens with more than softmax attention (docs/models.md
§6): Qwen3-Next and Qwen3.5 (Gated DeltaNet linear attention interleaved with gated full attention) and Nemotron-H /
Nemotron-3 (Mamba-2, attention and MLP or MoE blocks by `hybrid_override_pattern`).

Key names and defaults: transformers' Qwen3NextConfig, Qwen3_5TextConfig / Qwen3_5MoeTextConfig and NemotronHConfig
(configuration_qwen3_next.py, configuration_qwen3_5_moe.py, configuration_nemotron_h.py). Not counted: the per-head
QK norms and Qwen3-Next's shared-expert gate (hidden x 1 per layer), a few thousand parameters per layer.
"""
from __future__ import annotations

from typing import Any

from .hf_config import HFConfig, activation, head_dim
from .hf_launch import launch_fields
from .hf_text import llama, qwen_moe
from .mixers import ATTENTION, GATED_DELTANET, MAMBA2, MLP_ONLY

QWEN_LAYER_TYPES = {"linear_attention": GATED_DELTANET, "full_attention": ATTENTION}
# NemotronHConfig layers_block_type (and the names its remap_legacy_layer_types accepts), hybrid_override_pattern
NEMOTRON_BLOCKS = {"mamba": MAMBA2, "linear_attention": MAMBA2, "attention": ATTENTION, "full_attention": ATTENTION,
                   "mlp": MLP_ONLY, "moe": MLP_ONLY}
NEMOTRON_PATTERN = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}


def _qwen_mixers(cfg: HFConfig, layers: int) -> str:
    """Gated DeltaNet or full attention per layer: `layer_types`, else full attention on every
    full_attention_interval-th layer (default 4), as Qwen3NextConfig derives it."""
    types = cfg.raw("layer_types", None)
    if types is None:
        interval = cfg.int("full_attention_interval", 4)
        if interval < 1:
            raise cfg.error("full_attention_interval", interval, "expected an integer >= 1")
        return cfg.take("layer_mixers", "full_attention_interval",
                        "".join(GATED_DELTANET if (i + 1) % interval else ATTENTION for i in range(layers)))
    if not isinstance(types, list) or len(types) != layers or not all(t in QWEN_LAYER_TYPES for t in types):
        raise cfg.error("layer_types", types, f"expected a list of {layers} entries, each one of "
                                              f"{', '.join(QWEN_LAYER_TYPES)}")
    return cfg.take("layer_mixers", "layer_types", "".join(QWEN_LAYER_TYPES[t] for t in types))


def _gated_deltanet(cfg: HFConfig) -> dict[str, int]:
    return {
        "key_heads": cfg.take("linear_attention.key_heads", "linear_num_key_heads",
                              cfg.int("linear_num_key_heads", 16)),
        "value_heads": cfg.take("linear_attention.value_heads", "linear_num_value_heads",
                                cfg.int("linear_num_value_heads", 32)),
        "key_head_dim": cfg.take("linear_attention.key_head_dim", "linear_key_head_dim",
                                 cfg.int("linear_key_head_dim", 128)),
        "value_head_dim": cfg.take("linear_attention.value_head_dim", "linear_value_head_dim",
                                   cfg.int("linear_value_head_dim", 128)),
        "conv_kernel": cfg.take("linear_attention.conv_kernel", "linear_conv_kernel_dim",
                                cfg.int("linear_conv_kernel_dim", 4)),
    }


def qwen3_next(cfg: HFConfig) -> dict[str, Any]:
    """Qwen3-Next (Qwen3NextConfig) and Qwen3.5 (Qwen3_5TextConfig, Qwen3_5MoeTextConfig): the Qwen3-MoE layer
    (experts and a shared expert by decoder_sparse_step and mlp_only_layers; a dense MLP when num_experts is 0) with
    Gated DeltaNet on three layers in four and gated full attention (a sigmoid gate per head from a second
    query-sized projection, head_dim 256, QK norms) on the others. Qwen3.5's separate q/k/v, z, b and a
    projections hold the same weights as Qwen3-Next's fused ones."""
    fields = qwen_moe(cfg, qkv_bias=False) if cfg.int("num_experts", 0) else llama(cfg)
    fields["qk_norm"] = True  # Qwen3NextAttention q_norm / k_norm, no switch in the config
    fields["gated_attention"] = True
    fields["layer_mixers"] = _qwen_mixers(cfg, fields["layers"])
    if GATED_DELTANET in fields["layer_mixers"]:
        fields["linear_attention"] = _gated_deltanet(cfg)
    return fields


def qwen3_5(cfg: HFConfig) -> dict[str, Any]:
    """Qwen3.5 (Qwen3_5ForConditionalGeneration, Qwen3_5MoeForConditionalGeneration): the text model of
    `text_config`, read as Qwen3-Next. Its vision encoder is not modelled: the spec is the text model, and its
    assumptions say so."""
    if "text_config" not in cfg.data:
        return qwen3_next(cfg)
    text = cfg.nested("text_config")
    fields = qwen3_next(text)
    cfg.keys.update({field: f"text_config.{name}" for field, name in text.keys.items()})
    cfg.read.update(f"text_config.{name}" for name in text.read)
    if "vision_config" in cfg.data:
        fields["assumptions"] = ("Qwen3.5 vision_config: the vision encoder is not modelled; the text model is "
                                 "planned alone (as for text-only training)",)
    return fields


def _nemotron_blocks(cfg: HFConfig) -> tuple[str, bool]:
    """(layer_mixers, whether the MLP blocks are MoE) from `layers_block_type` (or `layer_types`), else
    `hybrid_override_pattern` (M Mamba-2, * attention, - MLP, E MoE)."""
    key = next((k for k in ("layers_block_type", "layer_types") if cfg.raw(k, None) is not None), None)
    if key is None:
        key, pattern = "hybrid_override_pattern", cfg.raw("hybrid_override_pattern")
        if not isinstance(pattern, str) or not pattern or not set(pattern) <= set(NEMOTRON_PATTERN):
            raise cfg.error(key, pattern, f"expected a string of {', '.join(NEMOTRON_PATTERN)} (one per layer)")
        blocks = [NEMOTRON_PATTERN[c] for c in pattern]
    else:
        blocks = cfg.raw(key)
        if not isinstance(blocks, list) or not blocks or not all(b in NEMOTRON_BLOCKS for b in blocks):
            raise cfg.error(key, blocks, f"expected a list of block types, each one of {', '.join(NEMOTRON_BLOCKS)}")
    if "mlp" in blocks and "moe" in blocks:
        raise cfg.error(key, cfg.raw(key), "dense MLP and MoE blocks in one model are not modelled; expected one "
                                           "of them")
    return cfg.take("layer_mixers", key, "".join(NEMOTRON_BLOCKS[b] for b in blocks)), "moe" in blocks


def _nemotron_moe(cfg: HFConfig) -> dict[str, Any]:
    """NemotronHConfig's experts: n_routed_experts of moe_intermediate_size (plain MLPs, relu2), top
    num_experts_per_tok, n_shared_experts of moe_shared_expert_intermediate_size; latent expert projections
    (moe_latent_size) are refused."""
    if cfg.raw("moe_latent_size", None) is not None:
        raise cfg.error("moe_latent_size", cfg.raw("moe_latent_size"), "latent MoE projections are not modelled; "
                                                                       "expected null")
    return {
        "experts": cfg.take("moe.experts", "n_routed_experts", cfg.int("n_routed_experts", 8)),
        "top_k": cfg.take("moe.top_k", "num_experts_per_tok", cfg.int("num_experts_per_tok", 2)),
        "expert_ffn_hidden": cfg.take("moe.expert_ffn_hidden", "moe_intermediate_size",
                                      cfg.int("moe_intermediate_size", 7688)),
        "shared_experts": cfg.take("moe.shared_experts", "n_shared_experts", cfg.int("n_shared_experts", 1)),
        "shared_expert_ffn_hidden": cfg.take("moe.shared_expert_ffn_hidden", "moe_shared_expert_intermediate_size",
                                             cfg.int("moe_shared_expert_intermediate_size", 7688)),
        "router_score": "sigmoid", "router_expert_bias": True,  # NemotronHTopkRouter: e_score_correction_bias
        "routed_scaling": cfg.take("moe.routed_scaling", "routed_scaling_factor",
                                   float(cfg.number("routed_scaling_factor", 1.0))),
    }


def nemotron_h(cfg: HFConfig) -> dict[str, Any]:
    """Nemotron-H and Nemotron-3 (NemotronHConfig; NVIDIA 2025, "Nemotron-H", §2.1): one block per layer, a
    Mamba-2 mixer, a grouped-query attention or an MLP (squared ReLU, no gate) / MoE block alone, by the block
    pattern; RMSNorm, untied embeddings, no biases."""
    mixers, moe = _nemotron_blocks(cfg)
    hidden, heads = cfg.int("hidden_size", 4096), cfg.int("num_attention_heads", 32)
    fields: dict[str, Any] = {
        "layers": cfg.take("layers", "num_hidden_layers", len(mixers)),
        "hidden": cfg.take("hidden", "hidden_size", hidden),
        "heads": cfg.take("heads", "num_attention_heads", heads),
        "kv_heads": cfg.take("kv_heads", "num_key_value_heads", cfg.int("num_key_value_heads", 8)),
        "head_dim": head_dim(cfg, hidden, heads) if "head_dim" in cfg.data else 128,
        "ffn_hidden": cfg.take("ffn_hidden", "intermediate_size", cfg.int("intermediate_size", 21504)),
        "vocab": cfg.take("vocab", "vocab_size", cfg.int("vocab_size", 131072)),
        "activation": activation(cfg, "mlp_hidden_act", "relu2", gated=False),
        "max_positions": cfg.take("max_positions", "max_position_embeddings",
                                  cfg.int("max_position_embeddings", 4096)),
        "tied_embeddings": cfg.take("tied_embeddings", "tie_word_embeddings", cfg.bool("tie_word_embeddings", False)),
        "norm": "rmsnorm",
        "layer_mixers": mixers,
        "hybrid_blocks": True,
        **launch_fields(cfg),
    }
    if cfg.bool("use_bias", False) or cfg.bool("mlp_bias", False) or cfg.bool("attention_bias", False):
        raise cfg.error("use_bias", True, "biases in Nemotron-H blocks are not modelled; expected false")
    if MAMBA2 in mixers:
        fields["mamba"] = {
            "heads": cfg.take("mamba.heads", "mamba_num_heads", cfg.int("mamba_num_heads", 128)),
            "head_dim": cfg.take("mamba.head_dim", "mamba_head_dim", cfg.int("mamba_head_dim", 64)),
            "state": cfg.take("mamba.state", "ssm_state_size", cfg.int("ssm_state_size", 128)),
            "groups": cfg.take("mamba.groups", "n_groups", cfg.int("n_groups", cfg.int("mamba_n_groups", 8))),
            "conv_kernel": cfg.take("mamba.conv_kernel", "conv_kernel", cfg.int("conv_kernel", 4)),
            "chunk": cfg.take("mamba.chunk", "chunk_size", cfg.int("chunk_size", 128)),
        }
    if moe:
        fields["moe"] = _nemotron_moe(cfg)
    return fields


HYBRID_BUILDERS = {
    "qwen3_next": qwen3_next,
    "qwen3_5_text": qwen3_next,
    "qwen3_5_moe_text": qwen3_next,
    "qwen3_5": qwen3_5,
    "qwen3_5_moe": qwen3_5,
    "nemotron_h": nemotron_h,
}

__all__ = ["HYBRID_BUILDERS"]
