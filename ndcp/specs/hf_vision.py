"""Hugging Face vision-language configs: a language model (`text_config`, or the top level for Qwen2-VL) and a
vision tower (`vision_config`) with its projector (docs/models.md §5).

Published multimodal configs often list only the keys that differ from the transformers defaults of their nested
configs (llava-1.5's text_config is six keys; Gemma 3's five), so a nested config is read over those defaults,
copied below from the transformers configuration classes named in each comment.
"""
from __future__ import annotations

from typing import Any, Callable

from .fields import MAX_SIZE
from .hf_config import HFConfig, activation
from .hf_text import TEXT_BUILDERS

# transformers LlamaConfig defaults (configuration_llama.py)
LLAMA_DEFAULTS = {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                  "num_attention_heads": 32, "hidden_act": "silu", "max_position_embeddings": 2048}
# transformers Gemma3TextConfig defaults (configuration_gemma3.py)
GEMMA3_TEXT_DEFAULTS = {"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
                        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                        "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 131072,
                        "sliding_window": 4096, "sliding_window_pattern": 6}
# transformers Llama4TextConfig defaults (configuration_llama4.py; Llama-4-Scout's shape)
LLAMA4_TEXT_DEFAULTS = {"vocab_size": 202048, "hidden_size": 5120, "intermediate_size": 8192,
                        "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128}
TEXT_DEFAULTS = {"llama": LLAMA_DEFAULTS, "gemma3_text": GEMMA3_TEXT_DEFAULTS, "llama4_text": LLAMA4_TEXT_DEFAULTS}
# transformers CLIPVisionConfig / SiglipVisionConfig defaults
VISION_DEFAULTS = {
    "clip_vision_model": {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
                          "num_attention_heads": 12, "image_size": 224, "patch_size": 32, "hidden_act": "quick_gelu"},
    "siglip_vision_model": {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
                            "num_attention_heads": 12, "image_size": 224, "patch_size": 16,
                            "hidden_act": "gelu_pytorch_tanh"},
}


def _with_defaults(cfg: HFConfig, key: str, defaults: dict[str, dict[str, Any]], default_type: str) -> HFConfig:
    """The nested config `key` over the transformers defaults of its model_type."""
    nested = cfg.nested(key)
    kind = nested.data.get("model_type", default_type)
    if not isinstance(kind, str):
        raise nested.error("model_type", kind, f"expected a model type name, e.g. {default_type!r}")
    return HFConfig({**defaults.get(kind, {}), "model_type": kind, **nested.data}, nested.context)


def _adopt(cfg: HFConfig, nested: HFConfig, key: str) -> None:
    """Errors on fields read from a nested config name its key as `key.name`."""
    cfg.keys.update({field: f"{key}.{name}" for field, name in nested.keys.items()})
    cfg.read.update(f"{key}.{name}" for name in nested.read)


def _text(cfg: HFConfig, default_type: str) -> dict[str, Any]:
    """The language model's ModelSpec fields from `text_config` (or the top level when there is none), read by
    the builder of its model_type."""
    if "text_config" not in cfg.data:
        return TEXT_BUILDERS[default_type](cfg)
    text = _with_defaults(cfg, "text_config", TEXT_DEFAULTS, default_type)
    kind = text.data["model_type"]
    fields = TEXT_BUILDERS[kind if kind in TEXT_BUILDERS else default_type](text)
    _adopt(cfg, text, "text_config")
    return fields


def _vision(cfg: HFConfig, default_type: str, build: Callable[[HFConfig], dict[str, Any]]) -> dict[str, Any]:
    """The encoder's fields from `vision_config` (over its type's defaults when it has some)."""
    vision = _with_defaults(cfg, "vision_config", VISION_DEFAULTS, default_type)
    fields = build(vision)
    _adopt(cfg, vision, "vision_config")
    return fields


def _vit(vision: HFConfig, output_hidden: int, **fields: Any) -> dict[str, Any]:
    """A CLIP/SigLIP-style tower: hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
    patch_size, image_size, hidden_act (plain MLP), LayerNorm and biases."""
    return {
        "layers": vision.take("encoder.layers", "num_hidden_layers", vision.layers("num_hidden_layers")),
        "hidden": vision.take("encoder.hidden", "hidden_size", vision.int("hidden_size")),
        "heads": vision.take("encoder.heads", "num_attention_heads", vision.int("num_attention_heads")),
        "ffn_hidden": vision.take("encoder.ffn_hidden", "intermediate_size", vision.int("intermediate_size")),
        "patch_size": vision.take("encoder.patch_size", "patch_size", vision.int("patch_size")),
        "image_size": vision.take("encoder.image_size", "image_size", vision.int("image_size")),
        "activation": activation(vision, "hidden_act", "gelu", gated=False),
        "output_hidden": output_hidden,
        **fields,
    }


def llava(cfg: HFConfig) -> dict[str, Any]:
    """LLaVA-1.5 (Liu et al. 2023): CLIP ViT-L/14 (class token, learned positions), a two-layer GELU MLP projector
    into a Llama text model; the class token's feature is dropped ("default" feature selection)."""
    fields = _text(cfg, "llama")
    fields["encoder"] = _vision(cfg, "clip_vision_model", lambda vision: _vit(
        vision, fields["hidden"], class_token=vision.data["model_type"] == "clip_vision_model", projector="mlp",
        projector_hidden=fields["hidden"]))
    return fields


def gemma3(cfg: HFConfig) -> dict[str, Any]:
    """Gemma 3 (Gemma Team 2025 §2.1): a SigLIP tower (learned positions, no class token) whose patches are
    average-pooled to mm_tokens_per_image (256) and linearly projected after an RMSNorm."""
    fields = _text(cfg, "gemma3_text")
    tokens = cfg.take("encoder.tokens_per_image", "mm_tokens_per_image", cfg.int("mm_tokens_per_image", 256))
    fields["encoder"] = _vision(cfg, "siglip_vision_model", lambda vision: _vit(
        vision, fields["hidden"], projector="linear", projector_norm=True, tokens_per_image=tokens))
    return fields


def qwen2_vl(cfg: HFConfig, v2_5: bool) -> dict[str, Any]:
    """Qwen2-VL / Qwen2.5-VL (Wang et al. 2024; Bai et al. 2025): a ViT with 2D rotary positions over 14 x 14 x 2
    (temporal) patches at any resolution, 2 x 2 patches merged and projected by a GELU MLP after a norm.
    Qwen2-VL: embed_dim, mlp_ratio, quick_gelu, LayerNorm; Qwen2.5-VL: hidden_size, intermediate_size, gated SiLU,
    RMSNorm (its windowed attention in most encoder layers is priced as full attention)."""
    fields = _text(cfg, "qwen2")
    fields["encoder"] = _vision(cfg, "qwen2_vl", lambda vision: _qwen_vit(vision, fields["hidden"], v2_5))
    return fields


def _qwen_vit(vision: HFConfig, output_hidden: int, v2_5: bool) -> dict[str, Any]:
    if v2_5:
        width = vision.take("encoder.hidden", "hidden_size", vision.int("hidden_size"))
        ffn = vision.take("encoder.ffn_hidden", "intermediate_size", vision.int("intermediate_size"))
        act, norm, output_key = activation(vision, "hidden_act", "silu", gated=True), "rmsnorm", "out_hidden_size"
    else:
        width = vision.take("encoder.hidden", "embed_dim", vision.int("embed_dim"))
        ffn = vision.take("encoder.ffn_hidden", "mlp_ratio", int(width * vision.number("mlp_ratio", 4, MAX_SIZE)))
        act, norm, output_key = activation(vision, "hidden_act", "quick_gelu", gated=False), "layernorm", "hidden_size"
    return {
        "layers": vision.take("encoder.layers", "depth", vision.layers("depth")),
        "hidden": width,
        "heads": vision.take("encoder.heads", "num_heads", vision.int("num_heads")),
        "ffn_hidden": ffn,
        "patch_size": vision.take("encoder.patch_size", "patch_size", vision.int("patch_size", 14)),
        "output_hidden": vision.take("encoder.output_hidden", output_key, vision.int(output_key, output_hidden)),
        "activation": act,
        "norm": norm,
        "channels": vision.take("encoder.channels", "in_chans", vision.int("in_chans", 3)),
        "temporal_patch": vision.take("encoder.temporal_patch", "temporal_patch_size",
                                      vision.int("temporal_patch_size", 2)),
        "spatial_merge": vision.take("encoder.spatial_merge", "spatial_merge_size",
                                     vision.int("spatial_merge_size", 2)),
        "learned_positions": False,
        "projector": "mlp",
        "projector_norm": True,
    }


def llama4(cfg: HFConfig) -> dict[str, Any]:
    """Llama 4 Scout / Maverick (Llama4ForConditionalGeneration): the llama4_text model of `text_config`. Its vision
    tower (a ViT whose pixel-shuffled patches pass a two-layer adapter and a linear projector) is not modelled: the
    spec is the text model, and its assumptions say so."""
    fields = _text(cfg, "llama4_text")
    if "vision_config" in cfg.data:
        fields["assumptions"] = ("Llama 4 vision_config: the vision encoder and its adapter are not modelled; the "
                                 "text model is planned alone (as for text-only training)",)
    return fields


VISION_BUILDERS: dict[str, Callable[[HFConfig], dict[str, Any]]] = {
    "llava": llava,
    "gemma3": gemma3,
    "qwen2_vl": lambda cfg: qwen2_vl(cfg, v2_5=False),
    "qwen2_5_vl": lambda cfg: qwen2_vl(cfg, v2_5=True),
    "llama4": llama4,
}

__all__ = ["VISION_BUILDERS"]
