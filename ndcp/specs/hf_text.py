"""Hugging Face `config.json` readers for decoder-only language models: one builder per `model_type`, each returning
ModelSpec fields (docs/models.md §1).

Only the fields that change the shape, the parameter count or the attention pattern are read, and the facts a launch
configuration states (hf_launch.py: RoPE base and scaling, norm epsilon, QK norm, the router); everything else (token
ids, initialiser ranges, ...) is ignored. Per-layer extras that are a few thousand parameters (QK
norms, Gemma's and OLMo 2's post-norms, Falcon-7B's single norm) are not modelled.
"""
from __future__ import annotations

from typing import Any, Callable

from .hf_config import HFConfig, activation, fit_moe_layers, global_every, head_dim, windows
from .hf_launch import deepseek_router, launch_fields

Builder = Callable[[HFConfig], dict[str, Any]]


def _rope_fields(cfg: HFConfig, positions_default: int, tied_default: bool, norm: str) -> dict[str, Any]:
    """Positions (RoPE, max_position_embeddings), tied embeddings, the norm and attention dropout, as the
    Llama-family, Falcon and DeepSeek configs name them."""
    return {
        "max_positions": cfg.take("max_positions", "max_position_embeddings",
                                  cfg.int("max_position_embeddings", positions_default)),
        "position_embedding": "rope",
        "tied_embeddings": cfg.take("tied_embeddings", "tie_word_embeddings",
                                    cfg.bool("tie_word_embeddings", tied_default)),
        "norm": norm,
        "attention_dropout": cfg.take("attention_dropout", "attention_dropout", cfg.number("attention_dropout", 0.0)),
        **launch_fields(cfg),  # RoPE base and scaling, norm epsilon, QK norm (hf_launch.py)
    }


def _llama_like(cfg: HFConfig, positions_default: int, *, act_key: str = "hidden_act", gated: bool = True,
                act_default: str = "silu", tied_default: bool = False, norm: str = "rmsnorm",
                window_every: int = 0) -> dict[str, Any]:
    """Fields shared by the Llama family and every llama-compatible config (hidden_size, num_hidden_layers, ...)."""
    hidden = cfg.int("hidden_size")
    heads = cfg.int("num_attention_heads")
    layers = cfg.layers("num_hidden_layers")
    return {
        "layers": cfg.take("layers", "num_hidden_layers", layers),
        "hidden": cfg.take("hidden", "hidden_size", hidden),
        "heads": cfg.take("heads", "num_attention_heads", heads),
        "kv_heads": cfg.take("kv_heads", "num_key_value_heads", cfg.int("num_key_value_heads", 0)),
        "head_dim": head_dim(cfg, hidden, heads),
        "ffn_hidden": cfg.take("ffn_hidden", "intermediate_size", cfg.int("intermediate_size")),
        "vocab": cfg.take("vocab", "vocab_size", cfg.int("vocab_size")),
        "activation": activation(cfg, act_key, act_default, gated),
        **_rope_fields(cfg, positions_default, tied_default, norm),
        **windows(cfg, layers, window_every),
    }


def _biases(cfg: HFConfig, fields: dict[str, Any], attention_key: str = "attention_bias",
            mlp_key: str = "mlp_bias") -> dict[str, Any]:
    """attention_bias / mlp_bias: both = biases on every linear layer; attention only = q, k, v biases (the
    o-projection bias, hidden elements per layer, is not modelled)."""
    attention_bias = cfg.bool(attention_key, False)
    mlp_bias = cfg.bool(mlp_key, False) if mlp_key else False
    if attention_bias and mlp_bias:
        fields["linear_bias"] = cfg.take("linear_bias", attention_key, True)
    elif attention_bias:
        fields["qkv_bias"] = cfg.take("qkv_bias", attention_key, True)
    elif mlp_bias:
        raise cfg.error(mlp_key, True, "MLP biases without attention biases cannot be modelled; expected false")
    return fields


def gpt2(cfg: HFConfig) -> dict[str, Any]:
    hidden = cfg.int("n_embd")
    return {
        "layers": cfg.take("layers", "n_layer", cfg.layers("n_layer")),
        "hidden": cfg.take("hidden", "n_embd", hidden),
        "heads": cfg.take("heads", "n_head", cfg.int("n_head")),
        "ffn_hidden": cfg.take("ffn_hidden", "n_inner", cfg.int("n_inner", 4 * hidden)),
        "vocab": cfg.take("vocab", "vocab_size", cfg.int("vocab_size")),
        "activation": activation(cfg, "activation_function", "gelu_new", gated=False),
        "max_positions": cfg.take("max_positions", "n_positions", cfg.int("n_positions", 1024)),
        "position_embedding": "learned",
        "tied_embeddings": cfg.take("tied_embeddings", "tie_word_embeddings", cfg.bool("tie_word_embeddings", True)),
        "norm": "layernorm",
        "linear_bias": True,
        "attention_dropout": cfg.take("attention_dropout", "attn_pdrop", cfg.number("attn_pdrop", 0.1)),
        "hidden_dropout": cfg.take("hidden_dropout", "resid_pdrop", cfg.number("resid_pdrop", 0.1)),
    }


def llama(cfg: HFConfig) -> dict[str, Any]:
    """Llama, and (with their own defaults) Granite, OLMo 2, Qwen3 and Phi-3, which differ from it only in
    parameter-free details (multipliers, QK norms, norm placement, fused projections)."""
    return _biases(cfg, _llama_like(cfg, 2048))


def mistral(cfg: HFConfig) -> dict[str, Any]:
    return _llama_like(cfg, 4096 * 32)


def mixtral(cfg: HFConfig) -> dict[str, Any]:
    fields = _llama_like(cfg, 4096 * 32)
    fields["moe"] = {
        "experts": cfg.take("moe.experts", "num_local_experts", cfg.int("num_local_experts")),
        "top_k": cfg.take("moe.top_k", "num_experts_per_tok", cfg.int("num_experts_per_tok")),
        "expert_ffn_hidden": cfg.take("moe.expert_ffn_hidden", "intermediate_size", cfg.int("intermediate_size")),
    }
    return fields


def gpt_oss(cfg: HFConfig) -> dict[str, Any]:
    """gpt-oss: Mixtral-like experts on every layer, biases on attention, experts and router, alternating sliding
    and full attention (OpenAI 2025, gpt-oss model card §2)."""
    fields = mixtral(cfg)
    if cfg.bool("attention_bias", True):
        fields["linear_bias"] = cfg.take("linear_bias", "attention_bias", True)
    return fields


def qwen2(cfg: HFConfig) -> dict[str, Any]:
    fields = _llama_like(cfg, 32768)
    fields["qkv_bias"] = True  # Qwen2 attention: bias on q, k, v; none on o
    return fields


def qwen_moe(cfg: HFConfig, qkv_bias: bool) -> dict[str, Any]:
    """Qwen2-MoE / Qwen3-MoE: MoE on every `decoder_sparse_step`-th layer except `mlp_only_layers`."""
    fields = _llama_like(cfg, 32768)
    if qkv_bias or cfg.bool("attention_bias", False):
        fields["qkv_bias"] = cfg.take("qkv_bias", "attention_bias", True)
    experts = cfg.int("num_experts")
    if experts == 0:  # a dense model in MoE clothing
        return fields
    layers = cfg.layers("num_hidden_layers")
    step = cfg.int("decoder_sparse_step", 1)
    if step < 1:
        raise cfg.error("decoder_sparse_step", step, "expected an integer >= 1")
    mlp_only = cfg.indices("mlp_only_layers", [])
    dense_only = set(mlp_only)
    sparse = [i for i in range(layers) if i not in dense_only and (i + 1) % step == 0]
    first, frequency = fit_moe_layers(cfg, layers, sparse,
                                      f"decoder_sparse_step={step} with mlp_only_layers={list(mlp_only)}")
    shared_hidden = cfg.int("shared_expert_intermediate_size", 0)
    fields["moe"] = {
        "experts": cfg.take("moe.experts", "num_experts", experts),
        "top_k": cfg.take("moe.top_k", "num_experts_per_tok", cfg.int("num_experts_per_tok")),
        "expert_ffn_hidden": cfg.take("moe.expert_ffn_hidden", "moe_intermediate_size",
                                      cfg.int("moe_intermediate_size")),
        "shared_experts": 1 if shared_hidden else 0,
        "shared_expert_ffn_hidden": cfg.take("moe.shared_expert_ffn_hidden", "shared_expert_intermediate_size",
                                             shared_hidden),
        "first_dense_layers": cfg.take("moe.first_dense_layers", "decoder_sparse_step", first),
        "layer_frequency": cfg.take("moe.layer_frequency", "decoder_sparse_step", frequency),
    }
    return fields


def gemma(cfg: HFConfig, positions_default: int, window_every: int) -> dict[str, Any]:
    """Gemma 2 / Gemma 3 text: GeGLU MLP (`hidden_activation`), tied embeddings, explicit head_dim, sliding-window
    layers interleaved with global ones (Gemma 2: every other layer; Gemma 3: `sliding_window_pattern`, 5 local to
    1 global) (Gemma Team 2024 §2; Gemma Team 2025 §2)."""
    key = "hidden_activation" if "hidden_activation" in cfg.data else "hidden_act"
    return _llama_like(cfg, positions_default, act_key=key, act_default="gelu_pytorch_tanh", tied_default=True,
                       window_every=window_every)


def nemotron(cfg: HFConfig) -> dict[str, Any]:
    """Nemotron-4: squared-ReLU MLP without a gate, LayerNorm (1p: a bias), untied embeddings (Parmar et al. 2024
    §2)."""
    return _biases(cfg, _llama_like(cfg, 4096, gated=False, act_default="relu2", norm="layernorm"))


def gpt_neox(cfg: HFConfig) -> dict[str, Any]:
    """GPT-NeoX / Pythia: LayerNorm, biases on every linear layer, plain GELU MLP, untied output (Black et al. 2022)."""
    fields = _llama_like(cfg, 2048, gated=False, act_default="gelu", norm="layernorm")
    fields["linear_bias"] = cfg.take("linear_bias", "attention_bias", cfg.bool("attention_bias", True))
    fields["hidden_dropout"] = cfg.take("hidden_dropout", "hidden_dropout", cfg.number("hidden_dropout", 0.0))
    return fields


def falcon(cfg: HFConfig) -> dict[str, Any]:
    """Falcon: multi-query attention (7B) or grouped KV heads (new_decoder_architecture, 40B/180B), a plain GELU MLP
    of ffn_hidden_size (default 4 x hidden), LayerNorm, `bias` on every linear layer or none, tied embeddings."""
    if cfg.bool("alibi", False):
        raise cfg.error("alibi", True, "ALiBi positions are not modelled; expected false (rotary)")
    hidden = cfg.int("hidden_size")
    heads = cfg.int("num_attention_heads")
    if cfg.bool("new_decoder_architecture", False):
        kv_key = "num_kv_heads"
        kv = cfg.int(kv_key, heads)
    else:
        kv_key = "multi_query"
        kv = 1 if cfg.bool(kv_key, True) else heads
    return {
        "layers": cfg.take("layers", "num_hidden_layers", cfg.layers("num_hidden_layers")),
        "hidden": cfg.take("hidden", "hidden_size", hidden),
        "heads": cfg.take("heads", "num_attention_heads", heads),
        "kv_heads": cfg.take("kv_heads", kv_key, kv),
        "head_dim": head_dim(cfg, hidden, heads),
        "ffn_hidden": cfg.take("ffn_hidden", "ffn_hidden_size", cfg.int("ffn_hidden_size", 4 * hidden)),
        "vocab": cfg.take("vocab", "vocab_size", cfg.int("vocab_size")),
        "activation": activation(cfg, "activation", "gelu", gated=False),
        **_rope_fields(cfg, 2048, True, "layernorm"),
        "linear_bias": cfg.take("linear_bias", "bias", cfg.bool("bias", False)),
        "hidden_dropout": cfg.take("hidden_dropout", "hidden_dropout", cfg.number("hidden_dropout", 0.0)),
    }


def starcoder2(cfg: HFConfig) -> dict[str, Any]:
    """StarCoder2: LayerNorm, plain GELU MLP, `use_bias` on every linear layer, sliding window on every layer
    (Lozhkov et al. 2024 §5)."""
    fields = _llama_like(cfg, 4096, gated=False, act_default="gelu_pytorch_tanh", norm="layernorm",
                         tied_default=True)
    fields["linear_bias"] = cfg.take("linear_bias", "use_bias", cfg.bool("use_bias", True))
    return fields


def glm4(cfg: HFConfig) -> dict[str, Any]:
    """GLM-4 (0414): a Llama-shaped block with fused gate/up, q/k/v biases (attention_bias) and post-norms."""
    fields = _llama_like(cfg, 32768)
    if cfg.bool("attention_bias", True):
        fields["qkv_bias"] = cfg.take("qkv_bias", "attention_bias", True)
    return fields


def deepseek(cfg: HFConfig) -> dict[str, Any]:
    """DeepSeek-V2/V3: MLA attention, fine-grained routed + shared experts after a dense prefix, optional MTP."""
    layers = cfg.layers("num_hidden_layers")
    fields = {
        "layers": cfg.take("layers", "num_hidden_layers", layers),
        "hidden": cfg.take("hidden", "hidden_size", cfg.int("hidden_size")),
        "heads": cfg.take("heads", "num_attention_heads", cfg.int("num_attention_heads")),
        "ffn_hidden": cfg.take("ffn_hidden", "intermediate_size", cfg.int("intermediate_size")),
        "vocab": cfg.take("vocab", "vocab_size", cfg.int("vocab_size")),
        "activation": activation(cfg, "hidden_act", "silu", gated=True),
        **_rope_fields(cfg, 4096, False, "rmsnorm"),
        "mtp_depth": cfg.take("mtp_depth", "num_nextn_predict_layers", cfg.int("num_nextn_predict_layers", 0)),
        "mla": {
            "q_lora_rank": cfg.take("mla.q_lora_rank", "q_lora_rank", cfg.int("q_lora_rank", 0)),
            "kv_lora_rank": cfg.take("mla.kv_lora_rank", "kv_lora_rank", cfg.int("kv_lora_rank")),
            "qk_rope_head_dim": cfg.take("mla.qk_rope_head_dim", "qk_rope_head_dim", cfg.int("qk_rope_head_dim")),
            "qk_nope_head_dim": cfg.take("mla.qk_nope_head_dim", "qk_nope_head_dim", cfg.int("qk_nope_head_dim")),
            "v_head_dim": cfg.take("mla.v_head_dim", "v_head_dim", cfg.int("v_head_dim")),
        },
    }
    experts = _deepseek_moe(cfg, layers)
    if experts:
        fields["moe"] = experts
    return fields


def _deepseek_moe(cfg: HFConfig, layers: int, first_dense_default: int = 0,
                  shared_default: int = 0) -> dict[str, Any] | None:
    """DeepSeek-style experts (DeepSeek-V2/V3, Kimi-K2, GLM-4.5): `n_routed_experts` of `moe_intermediate_size`,
    `n_shared_experts` always on, MoE on layer i iff i >= first_k_dense_replace and i % moe_layer_freq == 0 (HF's
    rule), group-limited routing from `n_group` / `topk_group` (one group: no limit); None without routed
    experts."""
    experts = cfg.int("n_routed_experts", 0)
    if not experts:
        return None
    first_k = cfg.int("first_k_dense_replace", first_dense_default)
    freq = cfg.int("moe_layer_freq", 1)
    if freq < 1:
        raise cfg.error("moe_layer_freq", freq, "expected an integer >= 1")
    sparse = [i for i in range(layers) if i >= first_k and i % freq == 0]
    first, frequency = fit_moe_layers(cfg, layers, sparse,
                                      f"first_k_dense_replace={first_k} with moe_layer_freq={freq}")
    return {
        "experts": cfg.take("moe.experts", "n_routed_experts", experts),
        "top_k": cfg.take("moe.top_k", "num_experts_per_tok", cfg.int("num_experts_per_tok")),
        "expert_ffn_hidden": cfg.take("moe.expert_ffn_hidden", "moe_intermediate_size",
                                      cfg.int("moe_intermediate_size")),
        "shared_experts": cfg.take("moe.shared_experts", "n_shared_experts",
                                   cfg.int("n_shared_experts", shared_default)),
        "first_dense_layers": cfg.take("moe.first_dense_layers", "first_k_dense_replace", first),
        "layer_frequency": cfg.take("moe.layer_frequency", "moe_layer_freq", frequency),
        **deepseek_router(cfg),
    }


def glm4_moe(cfg: HFConfig) -> dict[str, Any]:
    """GLM-4.5 / GLM-4.5-Air (GLM-4.5 Team 2025 §2.1; transformers Glm4MoeConfig): grouped-query attention with an
    explicit head_dim and q/k/v biases (attention_bias), DeepSeek-style routed and shared experts after
    `first_k_dense_replace` dense layers (defaults: 1 dense layer, 1 shared expert), MTP layers
    (num_nextn_predict_layers). Partial rotary embeddings and the QK norm (use_qk_norm) change no parameter count
    beyond a few hundred norm weights."""
    fields = _biases(cfg, _llama_like(cfg, 131072), mlp_key="")
    fields["mtp_depth"] = cfg.take("mtp_depth", "num_nextn_predict_layers", cfg.int("num_nextn_predict_layers", 0))
    experts = _deepseek_moe(cfg, fields["layers"], first_dense_default=1, shared_default=1)
    if experts:
        fields["moe"] = experts
    return fields


def llama4_text(cfg: HFConfig) -> dict[str, Any]:
    """Llama 4 (Meta 2025, Llama 4 model card; transformers Llama4TextConfig, defaults as there): routed experts
    (num_local_experts of intermediate_size, top num_experts_per_tok) and one shared expert of the same width on the
    `moe_layers` (default every interleave_moe_layer_step-th layer: Scout 1, Maverick 2), dense layers of
    intermediate_size_mlp between them, chunked attention on the RoPE layers (llama4_chunks). The QK norm is an L2
    norm without weights."""
    fields = _biases(cfg, _llama_like(cfg, 4096 * 32), mlp_key="")
    layers = fields["layers"]
    fields["ffn_hidden"] = cfg.take("ffn_hidden", "intermediate_size_mlp", cfg.int("intermediate_size_mlp", 16384))
    if cfg.raw("moe_layers", None) is not None:
        key, sparse = "moe_layers", sorted(set(cfg.indices("moe_layers")))
    else:
        key, step = "interleave_moe_layer_step", cfg.int("interleave_moe_layer_step", 1)
        if step < 1:
            raise cfg.error(key, step, "expected an integer >= 1")
        sparse = list(range(step - 1, layers, step))
    first, frequency = fit_moe_layers(cfg, layers, [i for i in sparse if i < layers], f"{key}={cfg.raw(key, 1)}")
    fields["moe"] = {
        "experts": cfg.take("moe.experts", "num_local_experts", cfg.int("num_local_experts", 16)),
        "top_k": cfg.take("moe.top_k", "num_experts_per_tok", cfg.int("num_experts_per_tok", 1)),
        "expert_ffn_hidden": cfg.take("moe.expert_ffn_hidden", "intermediate_size", cfg.int("intermediate_size")),
        "shared_experts": 1,
        "first_dense_layers": cfg.take("moe.first_dense_layers", key, first),
        "layer_frequency": cfg.take("moe.layer_frequency", key, frequency),
    }
    return {**fields, **llama4_chunks(cfg, layers)}


CHUNKED = "chunked_attention"


def llama4_chunks(cfg: HFConfig, layers: int) -> dict[str, int]:
    """attention_chunk and global_every: chunks of attention_chunk_size (default 8192; null = none) on the layers
    `layer_types` marks chunked_attention, else those `no_rope_layers` marks 1 (RoPE), else all but every
    no_rope_layer_interval-th (default 4), as Llama4TextConfig derives them; full attention on the others."""
    if "attention_chunk_size" in cfg.data and cfg.raw("attention_chunk_size", None) is None:
        return {}
    chunk = cfg.int("attention_chunk_size", 8192)
    types, flags = cfg.raw("layer_types", None), cfg.indices("no_rope_layers", [])
    if types is not None:
        key = "layer_types"
        if not isinstance(types, list) or len(types) != layers or not all(t in (CHUNKED, "full_attention")
                                                                          for t in types):
            raise cfg.error(key, types, f"expected a list of {layers} entries, each {CHUNKED!r} or 'full_attention'")
        local = [t == CHUNKED for t in types]
    elif flags:  # HF: "at least the same length as the number of layers"; 1 = RoPE (and chunked)
        key = "no_rope_layers"
        if len(flags) < layers or not set(flags) <= {0, 1}:
            raise cfg.error(key, flags, f"expected at least {layers} entries, each 0 or 1")
        local = [flag == 1 for flag in flags[:layers]]
    else:
        key, interval = "no_rope_layer_interval", cfg.int("no_rope_layer_interval", 4)
        if interval < 1:
            raise cfg.error(key, interval, "expected an integer >= 1")
        local = [(i + 1) % interval != 0 for i in range(layers)]
    if not chunk or not any(local):
        return {}
    return {"attention_chunk": cfg.take("attention_chunk", "attention_chunk_size", chunk),
            "global_every": cfg.take("global_every", key, global_every(cfg, key, local, "chunked attention"))}


TEXT_BUILDERS: dict[str, Builder] = {
    "gpt2": gpt2,
    "gpt_neox": gpt_neox,
    "falcon": falcon,
    "llama": llama,
    "granite": llama,
    "olmo2": llama,
    "qwen3": llama,
    "phi3": llama,
    "mistral": mistral,
    "mixtral": mixtral,
    "gpt_oss": gpt_oss,
    "qwen2": qwen2,
    "qwen2_moe": lambda cfg: qwen_moe(cfg, qkv_bias=True),
    "qwen3_moe": lambda cfg: qwen_moe(cfg, qkv_bias=False),
    "gemma2": lambda cfg: gemma(cfg, 8192, window_every=2),
    "gemma3_text": lambda cfg: gemma(cfg, 131072, window_every=cfg.int("sliding_window_pattern", 6)),
    "nemotron": nemotron,
    "starcoder2": starcoder2,
    "glm4": glm4,
    "deepseek_v2": deepseek,
    "deepseek_v3": deepseek,
    "kimi_k2": deepseek,  # Kimi-K2: the DeepSeek-V3 architecture (DeepseekV3ForCausalLM), 384 experts, 64 heads
    "glm4_moe": glm4_moe,
    "llama4_text": llama4_text,
}

# Keys a config must have for the generic llama-compatible path (docs/models.md §1)
LLAMA_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")


def is_llama_compatible(data) -> bool:
    """Whether an unknown model_type can be read the Llama way: every LLAMA_KEYS key and no MoE keys."""
    moe_keys = ("num_experts", "num_local_experts", "n_routed_experts", "moe_intermediate_size")
    return all(key in data for key in LLAMA_KEYS) and not any(data.get(key) for key in moe_keys)


__all__ = ["TEXT_BUILDERS", "LLAMA_KEYS", "is_llama_compatible", "llama"]
