"""Hugging Face `config.json` -> ModelSpec for the common decoder-only architectures.

Only the fields that change the shape or parameter count are read; everything else (rope scaling, token ids,
initialiser ranges, ...) is ignored. The spec is built with `from_mapping`, so ModelSpec's validation applies; errors
name the Hugging Face key the bad value came from.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping

from .fields import MAX_SIZE, SpecError, from_mapping, show
from .model import MAX_LAYERS, ModelSpec

_MISSING = object()

# Activation names in HF configs that mean a (non-gated) GELU MLP / a gated SiLU (SwiGLU) MLP.
_GELU = ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_python", "quick_gelu", "gelu_accurate")
_SILU = ("silu", "swish")


class _Config:
    """Typed access to one HF config mapping; errors name the key."""

    def __init__(self, data: Mapping[str, Any], context: str):
        self.data = data
        self.context = context
        self.keys: dict[str, str] = {}  # ModelSpec field path -> HF key it came from (for error messages)

    def error(self, key: str, value: Any, valid: str) -> SpecError:
        return SpecError(f"{self.context}{key}={show(value)} is not valid; {valid}")

    def raw(self, key: str, default: Any = _MISSING) -> Any:
        if key in self.data and self.data[key] is not None:
            return self.data[key]
        if default is _MISSING:
            raise SpecError(f"{self.context}{key}: missing required key in Hugging Face config "
                            f"(model_type {show(self.data.get('model_type'))})")
        return default

    def int(self, key: str, default: Any = _MISSING) -> int:
        value = self.raw(key, default)
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise self.error(key, value, "expected an integer >= 0")
        if value > MAX_SIZE:  # before any loop over it (layers) runs
            raise self.error(key, value, f"expected an integer <= {MAX_SIZE:,}")
        return value

    def layers(self, key: str) -> int:
        value = self.int(key)
        if value > MAX_LAYERS:
            raise self.error(key, value, f"expected at most {MAX_LAYERS:,} layers")
        return value

    def number(self, key: str, default: Any = _MISSING) -> float:
        value = self.raw(key, default)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise self.error(key, value, "expected a number")
        return value

    def bool(self, key: str, default: Any = _MISSING) -> bool:
        value = self.raw(key, default)
        if not isinstance(value, bool):
            raise self.error(key, value, "expected true or false")
        return value

    def take(self, field: str, key: str, value: Any) -> Any:
        """Record that ModelSpec `field` comes from HF `key` and return the value."""
        self.keys[field] = key
        return value


def _fit_moe_layers(cfg: _Config, layers: int, sparse: list[int], how: str) -> tuple[int, int]:
    """(first_dense_layers, layer_frequency) reproducing exactly the given set of MoE layer indices."""
    if not sparse:
        raise SpecError(f"{cfg.context}{how} gives no MoE layer; ndcp cannot model this configuration")
    first = sparse[0]
    frequency = sparse[1] - sparse[0] if len(sparse) > 1 else max(1, layers - first)
    if [i for i in range(first, layers) if (i - first) % frequency == 0] != sparse:
        raise SpecError(f"{cfg.context}{how} puts MoE layers at {sparse}; ndcp can only model a dense prefix "
                        "followed by every n-th layer being MoE")
    return first, frequency


def _activation_gated(cfg: _Config, key: str, default: str) -> str:
    act = cfg.raw(key, default)
    if act not in _SILU:
        raise cfg.error(key, act, f"this architecture is modelled as a gated SiLU MLP; valid: {', '.join(_SILU)}")
    return "swiglu"


def _head_dim(cfg: _Config, hidden: int, heads: int) -> int:
    """Explicit head_dim only when it differs from hidden / heads (0 = derived)."""
    head_dim = cfg.int("head_dim", 0)
    if head_dim and heads and hidden % heads == 0 and head_dim == hidden // heads:
        return 0
    return cfg.take("head_dim", "head_dim", head_dim)


def _llama_like(cfg: _Config, positions_default: int) -> dict[str, Any]:
    """Fields shared by the Llama family (Llama, Mistral, Mixtral, Qwen2, Qwen2-MoE, Qwen3-MoE)."""
    hidden = cfg.int("hidden_size")
    heads = cfg.int("num_attention_heads")
    return {
        "layers": cfg.take("layers", "num_hidden_layers", cfg.int("num_hidden_layers")),
        "hidden": cfg.take("hidden", "hidden_size", hidden),
        "heads": cfg.take("heads", "num_attention_heads", heads),
        "kv_heads": cfg.take("kv_heads", "num_key_value_heads", cfg.int("num_key_value_heads", 0)),
        "head_dim": _head_dim(cfg, hidden, heads),
        "ffn_hidden": cfg.take("ffn_hidden", "intermediate_size", cfg.int("intermediate_size")),
        "vocab": cfg.take("vocab", "vocab_size", cfg.int("vocab_size")),
        "activation": _activation_gated(cfg, "hidden_act", "silu"),
        "max_positions": cfg.take("max_positions", "max_position_embeddings",
                                  cfg.int("max_position_embeddings", positions_default)),
        "position_embedding": "rope",
        "tied_embeddings": cfg.take("tied_embeddings", "tie_word_embeddings", cfg.bool("tie_word_embeddings", False)),
        "norm": "rmsnorm",
        "attention_dropout": cfg.take("attention_dropout", "attention_dropout", cfg.number("attention_dropout", 0.0)),
    }


def _gpt2(cfg: _Config) -> dict[str, Any]:
    hidden = cfg.int("n_embd")
    act = cfg.raw("activation_function", "gelu_new")
    if act not in _GELU:
        raise cfg.error("activation_function", act, f"valid for gpt2: {', '.join(_GELU)}")
    inner = cfg.int("n_inner", 4 * hidden)
    return {
        "layers": cfg.take("layers", "n_layer", cfg.int("n_layer")),
        "hidden": cfg.take("hidden", "n_embd", hidden),
        "heads": cfg.take("heads", "n_head", cfg.int("n_head")),
        "ffn_hidden": cfg.take("ffn_hidden", "n_inner", inner),
        "vocab": cfg.take("vocab", "vocab_size", cfg.int("vocab_size")),
        "activation": "gelu",
        "max_positions": cfg.take("max_positions", "n_positions", cfg.int("n_positions", 1024)),
        "position_embedding": "learned",
        "tied_embeddings": cfg.take("tied_embeddings", "tie_word_embeddings", cfg.bool("tie_word_embeddings", True)),
        "norm": "layernorm",
        "linear_bias": True,
        "attention_dropout": cfg.take("attention_dropout", "attn_pdrop", cfg.number("attn_pdrop", 0.1)),
        "hidden_dropout": cfg.take("hidden_dropout", "resid_pdrop", cfg.number("resid_pdrop", 0.1)),
    }


def _llama(cfg: _Config) -> dict[str, Any]:
    fields = _llama_like(cfg, 2048)
    attention_bias = cfg.bool("attention_bias", False)
    mlp_bias = cfg.bool("mlp_bias", False)
    if attention_bias and mlp_bias:
        fields["linear_bias"] = cfg.take("linear_bias", "attention_bias", True)
    elif attention_bias:  # q, k, v (and o) biases; the o-projection bias (hidden elements per layer) is not modelled
        fields["qkv_bias"] = cfg.take("qkv_bias", "attention_bias", True)
    elif mlp_bias:
        raise cfg.error("mlp_bias", True, "MLP biases without attention biases cannot be modelled; expected false")
    return fields


def _mistral(cfg: _Config) -> dict[str, Any]:
    return _llama_like(cfg, 4096 * 32)


def _mixtral(cfg: _Config) -> dict[str, Any]:
    fields = _llama_like(cfg, 4096 * 32)
    fields["moe"] = {
        "experts": cfg.take("moe.experts", "num_local_experts", cfg.int("num_local_experts")),
        "top_k": cfg.take("moe.top_k", "num_experts_per_tok", cfg.int("num_experts_per_tok")),
        "expert_ffn_hidden": cfg.take("moe.expert_ffn_hidden", "intermediate_size", cfg.int("intermediate_size")),
    }
    return fields


def _qwen2(cfg: _Config) -> dict[str, Any]:
    fields = _llama_like(cfg, 32768)
    fields["qkv_bias"] = True  # Qwen2 attention: bias on q, k, v; none on o
    return fields


def _qwen_moe(cfg: _Config, qkv_bias: bool) -> dict[str, Any]:
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
    mlp_only = cfg.raw("mlp_only_layers", [])
    if not isinstance(mlp_only, (list, tuple)) or not all(isinstance(i, int) and not isinstance(i, bool)
                                                          for i in mlp_only):
        raise cfg.error("mlp_only_layers", mlp_only, "expected a list of layer indices")
    dense_only = set(mlp_only)
    sparse = [i for i in range(layers) if i not in dense_only and (i + 1) % step == 0]
    first, frequency = _fit_moe_layers(cfg, layers, sparse,
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


def _deepseek(cfg: _Config) -> dict[str, Any]:
    """DeepSeek-V2/V3: MLA attention, fine-grained routed + shared experts after a dense prefix, optional MTP."""
    layers = cfg.layers("num_hidden_layers")
    fields = {
        "layers": cfg.take("layers", "num_hidden_layers", layers),
        "hidden": cfg.take("hidden", "hidden_size", cfg.int("hidden_size")),
        "heads": cfg.take("heads", "num_attention_heads", cfg.int("num_attention_heads")),
        "ffn_hidden": cfg.take("ffn_hidden", "intermediate_size", cfg.int("intermediate_size")),
        "vocab": cfg.take("vocab", "vocab_size", cfg.int("vocab_size")),
        "activation": _activation_gated(cfg, "hidden_act", "silu"),
        "max_positions": cfg.take("max_positions", "max_position_embeddings",
                                  cfg.int("max_position_embeddings", 4096)),
        "position_embedding": "rope",
        "tied_embeddings": cfg.take("tied_embeddings", "tie_word_embeddings", cfg.bool("tie_word_embeddings", False)),
        "norm": "rmsnorm",
        "attention_dropout": cfg.take("attention_dropout", "attention_dropout", cfg.number("attention_dropout", 0.0)),
        "mtp_depth": cfg.take("mtp_depth", "num_nextn_predict_layers", cfg.int("num_nextn_predict_layers", 0)),
        "mla": {
            "q_lora_rank": cfg.take("mla.q_lora_rank", "q_lora_rank", cfg.int("q_lora_rank", 0)),
            "kv_lora_rank": cfg.take("mla.kv_lora_rank", "kv_lora_rank", cfg.int("kv_lora_rank")),
            "qk_rope_head_dim": cfg.take("mla.qk_rope_head_dim", "qk_rope_head_dim", cfg.int("qk_rope_head_dim")),
            "qk_nope_head_dim": cfg.take("mla.qk_nope_head_dim", "qk_nope_head_dim", cfg.int("qk_nope_head_dim")),
            "v_head_dim": cfg.take("mla.v_head_dim", "v_head_dim", cfg.int("v_head_dim")),
        },
    }
    experts = cfg.int("n_routed_experts", 0)
    if experts:
        first_k = cfg.int("first_k_dense_replace", 0)
        freq = cfg.int("moe_layer_freq", 1)
        if freq < 1:
            raise cfg.error("moe_layer_freq", freq, "expected an integer >= 1")
        # HF: layer i is MoE iff i >= first_k_dense_replace and i % moe_layer_freq == 0
        sparse = [i for i in range(layers) if i >= first_k and i % freq == 0]
        first, frequency = _fit_moe_layers(cfg, layers, sparse,
                                           f"first_k_dense_replace={first_k} with moe_layer_freq={freq}")
        fields["moe"] = {
            "experts": cfg.take("moe.experts", "n_routed_experts", experts),
            "top_k": cfg.take("moe.top_k", "num_experts_per_tok", cfg.int("num_experts_per_tok")),
            "expert_ffn_hidden": cfg.take("moe.expert_ffn_hidden", "moe_intermediate_size",
                                          cfg.int("moe_intermediate_size")),
            "shared_experts": cfg.take("moe.shared_experts", "n_shared_experts", cfg.int("n_shared_experts", 0)),
            "first_dense_layers": cfg.take("moe.first_dense_layers", "first_k_dense_replace", first),
            "layer_frequency": cfg.take("moe.layer_frequency", "moe_layer_freq", frequency),
        }
    return fields


_BUILDERS: dict[str, Callable[[_Config], dict[str, Any]]] = {
    "gpt2": _gpt2,
    "llama": _llama,
    "mistral": _mistral,
    "mixtral": _mixtral,
    "qwen2": _qwen2,
    "qwen2_moe": lambda cfg: _qwen_moe(cfg, qkv_bias=True),
    "qwen3_moe": lambda cfg: _qwen_moe(cfg, qkv_bias=False),
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
}

SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(_BUILDERS)


def model_from_hf_config(config: Mapping[str, Any], name: str, *, context: str = "",
                         source: str | None = None) -> ModelSpec:
    """Build a ModelSpec named `name` from a parsed Hugging Face `config.json` mapping."""
    if not isinstance(config, Mapping):
        raise SpecError(f"{context}expected a Hugging Face config mapping, got {type(config).__name__}")
    supported = ", ".join(SUPPORTED_MODEL_TYPES)
    model_type = config.get("model_type")
    if model_type is None:
        raise SpecError(f"{context}model_type: missing in Hugging Face config; supported model types: {supported}")
    if not isinstance(model_type, str) or model_type not in _BUILDERS:
        raise SpecError(f"{context}model_type={show(model_type)} is not supported; supported model types: {supported}")
    cfg = _Config(config, context)
    fields = _BUILDERS[model_type](cfg)
    origin = config.get("_name_or_path")
    fields["name"] = name
    fields["source"] = source or (f"Hugging Face config.json ({origin}, model_type {model_type})" if origin
                                  else f"Hugging Face config.json (model_type {model_type})")
    try:
        return from_mapping(ModelSpec, fields, context)
    except SpecError as error:
        # Nested dataclass errors can repeat the prefix ("moe.moe.top_k") when the field check already names it.
        message = str(error).replace("moe.moe.", "moe.").replace("mla.mla.", "mla.")
        field = message[len(context):].split("=", 1)[0].split(":", 1)[0].strip()
        key = cfg.keys.get(field)
        raise SpecError(f"{message} (from Hugging Face key {key!r})" if key else message) from None


__all__ = ["model_from_hf_config", "SUPPORTED_MODEL_TYPES"]
