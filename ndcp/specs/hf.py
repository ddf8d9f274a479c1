"""Hugging Face `config.json` -> ModelSpec (docs/models.md §1).

Each supported `model_type` has a builder (specs/hf_text.py; vision-language types: specs/hf_vision.py) that
reads the keys that change the shape or the parameter count. An unknown type that carries the Llama keys
(hidden_size, num_hidden_layers, num_attention_heads, intermediate_size, vocab_size) and no MoE keys is read the
Llama way; its source then names the keys read. The spec is built with `from_mapping`, so ModelSpec's validation
applies; errors name the Hugging Face key the bad value came from.
"""
from __future__ import annotations

from typing import Any, Mapping

from .fields import SpecError, from_mapping, show
from .hf_config import HFConfig
from .hf_text import LLAMA_KEYS, TEXT_BUILDERS, is_llama_compatible, llama
from .hf_vision import VISION_BUILDERS
from .model import ModelSpec

BUILDERS = {**TEXT_BUILDERS, **VISION_BUILDERS}
SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(BUILDERS)


def _source(config: Mapping[str, Any], model_type: str, generic_keys: list[str] | None) -> str:
    origin = config.get("_name_or_path")
    where = f"{origin}, model_type {model_type}" if origin else f"model_type {model_type}"
    if generic_keys is not None:
        where += f", read as llama-compatible from {', '.join(generic_keys)}"
    return f"Hugging Face config.json ({where})"


def model_from_hf_config(config: Mapping[str, Any], name: str, *, context: str = "",
                         source: str | None = None) -> ModelSpec:
    """Build a ModelSpec named `name` from a parsed Hugging Face `config.json` mapping."""
    if not isinstance(config, Mapping):
        raise SpecError(f"{context}expected a Hugging Face config mapping, got {type(config).__name__}")
    supported = ", ".join(SUPPORTED_MODEL_TYPES)
    model_type = config.get("model_type")
    if model_type is None:
        raise SpecError(f"{context}model_type: missing in Hugging Face config; supported model types: {supported}")
    generic = isinstance(model_type, str) and model_type not in BUILDERS and is_llama_compatible(config)
    if not isinstance(model_type, str) or (model_type not in BUILDERS and not generic):
        raise SpecError(f"{context}model_type={show(model_type)} is not supported; supported model types: "
                        f"{supported}; or any llama-compatible config (keys {', '.join(LLAMA_KEYS)}, no experts)")
    cfg = HFConfig(config, context)
    fields = llama(cfg) if generic else BUILDERS[model_type](cfg)
    fields["name"] = name
    fields["source"] = source or _source(config, model_type, sorted(cfg.read) if generic else None)
    return build_spec(ModelSpec, fields, cfg)


def build_spec(cls, fields: dict[str, Any], cfg: HFConfig):
    """`from_mapping(cls, fields)`, its errors naming the Hugging Face key each bad field came from."""
    try:
        return from_mapping(cls, fields, cfg.context)
    except SpecError as error:
        # Nested dataclass errors can repeat the prefix ("moe.moe.top_k") when the field check already names it.
        message = str(error).replace("moe.moe.", "moe.").replace("mla.mla.", "mla.").replace(
            "encoder.encoder.", "encoder.")
        field = message[len(cfg.context):].split("=", 1)[0].split(":", 1)[0].strip()
        key = cfg.keys.get(field)
        raise SpecError(f"{message} (from Hugging Face key {key!r})" if key else message) from None


__all__ = ["model_from_hf_config", "SUPPORTED_MODEL_TYPES"]
