"""A measured run's model: a ModelSpec read by the code `ndcp search` reads models with.

A row names its model in one of three ways:
- `model: NAME` (a library model, `ndcp models`) or `model: PATH` (a model YAML spec or a Hugging Face
  config.json, relative to the runs file): `ndcp.specs.library.load_model`, exactly as `ndcp search MODEL`;
- `model_file: PATH` beside the row's other keys: the same;
- `model:` a mapping: the library's YAML schema (every ModelSpec field by its name: head_dim, activation of
  ACTIVATIONS, `moe:` with MoESpec's keys, `mla:`, sliding_window, global_every, mtp_depth, ...), read by
  `from_mapping(ModelSpec, ...)` like a library YAML, so an unknown key is refused with the valid ones.
  Row-only keys that describe the published model (params_b, active_params_b, model_source, seq_len) are not
  ModelSpec fields and are set aside (ROW_ONLY_KEYS). What such a mapping leaves open is filled by the published-runs
  conventions below, each recorded in the row's `assumptions`.

Conventions for a mapping (published rows predate the library schema):
- activation missing -> gelu for GPT-named models; a null vocabulary, layer count, width or head count cannot be
  filled: the row is skipped with that reason;
- ffn_hidden null -> 4 x hidden for an ungated MLP (GPT); kv_heads null -> heads;
- a gelu/relu (ungated) model without the style keys is GPT-style (learned positions, LayerNorm, biases, tied
  embeddings); a gated one (swiglu, geglu) or squared_relu Llama-style: ModelSpec's defaults (RoPE, RMSNorm, no
  biases, untied);
- max_positions -> the row's sequence length when not given.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..specs.fields import SpecError, from_mapping
from ..specs.library import load_model
from ..specs.model import GATED_ACTIVATIONS, ModelSpec
from .values import SkipRun, is_null

# Keys of a runs file's model mapping that describe the published model but are no ModelSpec field.
ROW_ONLY_KEYS = ("params_b", "active_params_b", "model_source", "seq_len")
REQUIRED_KEYS = ("layers", "hidden", "heads", "vocab")
GPT_STYLE = {"position_embedding": "learned", "norm": "layernorm", "linear_bias": True, "tied_embeddings": True}
UNGATED_GPT = ("gelu", "relu")  # OPT (ReLU) is GPT-style too: learned positions, LayerNorm, biases, tied


def _filled(fields: dict[str, Any], seq_len: int, notes: list[str]) -> dict[str, Any]:
    """The mapping with the published-runs conventions (module docstring) applied; nulls dropped."""
    data = {k: v for k, v in fields.items() if k not in ROW_ONLY_KEYS and not is_null(v)}
    for key in REQUIRED_KEYS:
        if key not in data:
            raise SkipRun(f"model.{key} is not published")
    data["name"] = str(data.get("name") or "model")
    if "activation" not in data:
        if not data["name"].lower().startswith("gpt"):
            raise SkipRun("model.activation is not published")
        data["activation"] = "gelu"
        notes.append("activation gelu (GPT)")
    activation = str(data["activation"]).lower()
    data["activation"] = activation
    if "ffn_hidden" not in data:
        if activation in GATED_ACTIVATIONS:
            raise SkipRun("model.ffn_hidden is not published")
        data["ffn_hidden"] = 4 * int(data["hidden"])
        notes.append("ffn_hidden 4h")
    if is_null(fields.get("kv_heads")) and not isinstance(data.get("mla"), dict):
        notes.append("kv_heads = heads")
    if activation in UNGATED_GPT:
        data = {**GPT_STYLE, **data}
    data.setdefault("max_positions", int(seq_len))
    return data


def _library_model(name: str, folder: Path) -> ModelSpec:
    """A library model, or a spec file relative to the runs file's folder (else as given)."""
    relative = folder / name
    return load_model(str(relative) if not Path(name).is_absolute() and relative.exists() else name)


def read_model(entry: dict[str, Any], seq_len: int, folder: Path, notes: list[str]) -> ModelSpec:
    """The row's ModelSpec (module docstring); SpecError names the model field a bad value came from."""
    fields = entry.get("model")
    if not is_null(entry.get("model_file")):
        if isinstance(fields, dict):
            raise SpecError("model_file: give the model as model_file or as a model mapping, not both")
        return _library_model(str(entry["model_file"]).strip(), folder)
    if isinstance(fields, str) and fields.strip():
        return _library_model(fields.strip(), folder)
    if not isinstance(fields, dict):
        raise SkipRun("model is not published (a mapping, a library name or model_file)")
    return from_mapping(ModelSpec, _filled(fields, seq_len, notes), "model.")


def row_seq_len(entry: dict[str, Any]) -> int | None:
    """The row's sequence length: `training.seq_len`, else the model mapping's `seq_len` (published rows)."""
    training, fields = entry.get("training") or {}, entry.get("model")
    value = training.get("seq_len")
    if is_null(value) and isinstance(fields, dict):
        value = fields.get("seq_len")
    return None if is_null(value) else int(value)


__all__ = ["read_model", "row_seq_len", "ROW_ONLY_KEYS"]
