"""The model facts of a Hugging Face `config.json` that no estimate prices but a launch configuration states
(ndcp/trainers): the RoPE base and scaling, the norm epsilon, the QK norm and the MoE router. Read beside the shape
(hf_text.py); a key that is absent leaves ModelSpec's default.

Key names and defaults: transformers' configuration classes (LlamaConfig rope_theta, rope_scaling; Qwen3Config,
whose attention always normalises q and k; Glm4MoeConfig use_qk_norm; DeepseekV3Config scoring_func, n_group,
topk_group, topk_method, routed_scaling_factor) and modeling_rope_utils.py for the rope_scaling types.
"""
from __future__ import annotations

from typing import Any

from .hf_config import HFConfig

EPSILON_KEYS = ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_epsilon")
QK_NORM_TYPES = ("qwen3", "qwen3_moe")  # Qwen3Attention q_norm / k_norm, no switch in the config
# DeepSeek-V3-style routers (sigmoid scores, a bias per expert) by model_type: DeepseekV3Config, Kimi-K2 (a
# DeepseekV3 architecture), Glm4MoeConfig (no scoring_func key: always sigmoid with e_score_correction_bias)
SIGMOID_ROUTERS = ("deepseek_v3", "kimi_k2", "glm4_moe")
GROUPED_TOPK = ("group_limited_greedy", "noaux_tc")  # DeepSeek's routers that choose experts within groups


def launch_fields(cfg: HFConfig) -> dict[str, Any]:
    """rotary_base, rope_scaling, norm_eps and qk_norm where the config states them."""
    fields: dict[str, Any] = {}
    rope = cfg.raw("rope_parameters", None) or {}  # newer transformers keep rope_theta and the scaling here
    if "rope_theta" in cfg.data or "rope_theta" in rope:
        fields["rotary_base"] = cfg.take("rotary_base", "rope_theta", float(
            cfg.number("rope_theta") if "rope_theta" in cfg.data else rope["rope_theta"]))
    scaling = _rope_scaling(cfg, cfg.raw("rope_scaling", None) or rope)
    if scaling:
        fields["rope_scaling"] = cfg.take("rope_scaling", "rope_scaling", scaling)
    key = next((k for k in EPSILON_KEYS if k in cfg.data), None)
    if key:
        fields["norm_eps"] = cfg.take("norm_eps", key, cfg.number(key))
    if cfg.data.get("model_type") in QK_NORM_TYPES or cfg.bool("use_qk_norm", False):
        fields["qk_norm"] = True
    return fields


def _rope_scaling(cfg: HFConfig, scaling: Any) -> dict[str, Any] | None:
    """A RopeScaling mapping from a config's rope_scaling (llama3 or yarn; others, such as linear or dynamic, are
    no launch flag ndcp writes: None)."""
    if not isinstance(scaling, dict):
        return None
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind not in ("llama3", "yarn"):
        return None
    out = {"kind": kind, "factor": float(scaling.get("factor", 1.0)),
           "original_max_positions": int(scaling.get("original_max_position_embeddings",
                                                     cfg.int("max_position_embeddings", 4096)))}
    names = {"llama3": ("low_freq_factor", "high_freq_factor"), "yarn": ("mscale", "mscale_all_dim")}[kind]
    out.update({name: float(scaling[name]) for name in names if scaling.get(name) is not None})
    return out


def deepseek_router(cfg: HFConfig) -> dict[str, Any]:
    """The router of DeepSeek-style experts: scores (sigmoid by SIGMOID_ROUTERS' default), expert groups under a
    grouped top-k, the per-expert bias of noaux_tc (e_score_correction_bias) and the routed scaling factor."""
    default_score = "sigmoid" if cfg.data.get("model_type") in SIGMOID_ROUTERS else "softmax"
    method = cfg.raw("topk_method", "noaux_tc" if default_score == "sigmoid" else "greedy")
    out = {"router_score": cfg.take("moe.router_score", "scoring_func", cfg.raw("scoring_func", default_score)),
           "router_expert_bias": cfg.take("moe.router_expert_bias", "topk_method", method == "noaux_tc"),
           "routed_scaling": cfg.take("moe.routed_scaling", "routed_scaling_factor",
                                      float(cfg.number("routed_scaling_factor", 1.0)))}
    groups, topk = cfg.raw("n_group", None), cfg.raw("topk_group", None)
    if method in GROUPED_TOPK and groups and topk:
        out["router_groups"] = cfg.take("moe.router_groups", "n_group", int(groups))
        out["router_group_topk"] = cfg.take("moe.router_group_topk", "topk_group", int(topk))
    return out


__all__ = ["launch_fields", "deepseek_router"]
