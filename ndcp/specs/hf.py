"""Hugging Face `config.json` -> ModelSpec (docs/models.md §1).

Each supported `model_type` has a builder (specs/hf_text.py; hybrid models: specs/hf_hybrid.py; vision-language
types: specs/hf_vision.py) that reads the keys that change the shape or the parameter count. A `model_type` ndcp does not know is read by the
builder its `architectures` entry names (`DeepseekV3ForCausalLM`: deepseek_v3), else, when it carries the Llama
keys (hidden_size, num_hidden_layers, num_attention_heads, intermediate_size, vocab_size) and no MoE keys, the
Llama way. Either way the spec's `assumptions` say so in one line: the type, the reader, the keys read. The spec is
built with `from_mapping`, so ModelSpec's validation applies; errors name the Hugging Face key the bad value came
from.
"""
from __future__ import annotations

from typing import Any, Mapping, NamedTuple

from .fields import SpecError, from_mapping, show
from .hf_config import HFConfig
from .hf_hybrid import HYBRID_BUILDERS
from .hf_text import LLAMA_KEYS, TEXT_BUILDERS, Builder, is_llama_compatible, llama
from .hf_vision import VISION_BUILDERS
from .model import ModelSpec

LANGUAGE_BUILDERS = {**TEXT_BUILDERS, **HYBRID_BUILDERS}
BUILDERS = {**LANGUAGE_BUILDERS, **VISION_BUILDERS}
SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(BUILDERS)
# transformers' class-name suffixes (modeling_auto.py): a language model's head, or a vision-language model's
ARCHITECTURE_SUFFIXES = {"ForCausalLM": LANGUAGE_BUILDERS, "LMHeadModel": LANGUAGE_BUILDERS,
                         "ForConditionalGeneration": VISION_BUILDERS}
LLAMA_ASSUMED = "a Llama-style decoder (RMSNorm, rotary positions, gated MLP, no experts)"


class Reader(NamedTuple):
    """How a config is read: the builder, and for a model_type ndcp does not know, what was assumed."""

    build: Builder
    assumed: str  # "" for a supported model_type


def architecture_type(config: Mapping[str, Any]) -> str | None:
    """The supported model_type an `architectures` entry names: its class name less the head suffix, compared
    without case and underscores (DeepseekV3ForCausalLM: deepseek_v3; Llama4ForCausalLM: llama4_text)."""
    names = config.get("architectures")
    for name in names if isinstance(names, list) else ():
        for suffix, builders in ARCHITECTURE_SUFFIXES.items():
            if isinstance(name, str) and name.endswith(suffix):
                stem = name[:-len(suffix)].lower().replace("_", "")
                for model_type in builders:
                    if model_type.replace("_", "") in (stem, stem + "text"):
                        return model_type
    return None


def _reader(config: Mapping[str, Any], context: str) -> Reader:
    """The builder for the config's model_type, or for a type ndcp does not know, its architecture's or Llama's."""
    model_type = config.get("model_type")
    supported = ", ".join(SUPPORTED_MODEL_TYPES)
    if model_type is None:
        raise SpecError(f"{context}model_type: missing in Hugging Face config; supported model types: {supported}")
    if isinstance(model_type, str) and model_type in BUILDERS:
        return Reader(BUILDERS[model_type], "")
    if isinstance(model_type, str) and (known := architecture_type(config)):
        names = ", ".join(str(name) for name in config["architectures"])
        return Reader(BUILDERS[known], f"read by the {known} reader (its architectures: {names})")
    if isinstance(model_type, str) and is_llama_compatible(config):
        return Reader(llama, f"read as {LLAMA_ASSUMED}")
    raise SpecError(f"{context}model_type={show(model_type)} is not supported; supported model types: {supported}; "
                    f"or any llama-compatible config (keys {', '.join(LLAMA_KEYS)}, no experts)")


def _source(config: Mapping[str, Any], model_type: str, assumed: bool) -> str:
    origin = config.get("_name_or_path")
    where = f"{origin}, model_type {model_type}" if origin else f"model_type {model_type}"
    if assumed:
        where += ", not a supported type"
    return f"Hugging Face config.json ({where})"


def model_from_hf_config(config: Mapping[str, Any], name: str, *, context: str = "",
                         source: str | None = None) -> ModelSpec:
    """Build a ModelSpec named `name` from a parsed Hugging Face `config.json` mapping."""
    if not isinstance(config, Mapping):
        raise SpecError(f"{context}expected a Hugging Face config mapping, got {type(config).__name__}")
    reader = _reader(config, context)
    cfg = HFConfig(config, context)
    fields = reader.build(cfg)
    model_type = config["model_type"]
    fields["name"] = name
    fields["source"] = source or _source(config, model_type, bool(reader.assumed))
    if reader.assumed:
        line = (f"Hugging Face model_type {model_type!r} is not one ndcp knows: {reader.assumed}, from "
                f"{', '.join(sorted(cfg.read))}; other keys ignored")
        fields["assumptions"] = (line,) + tuple(fields.get("assumptions", ()))
    fields["assumptions"] = tuple(fields.get("assumptions", ())) + tuple(
        f"Hugging Face key {key!r} is not one ndcp reads: did you mean {meant!r}? That key is absent, so its "
        "default applies" for key, meant in cfg.misspelt())
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


__all__ = ["model_from_hf_config", "architecture_type", "SUPPORTED_MODEL_TYPES"]
