"""Typed reading of one Hugging Face `config.json` mapping, and the readers every architecture shares.

Each value read is recorded against the ModelSpec field it becomes (`take`), so an invalid spec names the Hugging
Face key it came from and the generic llama-compatible path can say which keys it read (docs/models.md §1).
"""
from __future__ import annotations

import difflib
import math
from typing import Any, Mapping

from .fields import MAX_SIZE, SpecError, show
from .model import MAX_LAYERS

_MISSING = object()

# HF activation names (transformers.activations.ACT2FN) and the ModelSpec activation they make
GELU_NAMES = ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_python", "quick_gelu", "gelu_accurate")
SILU_NAMES = ("silu", "swish")
# an MLP with up and down projections only
PLAIN_ACTIVATIONS = {**{name: "gelu" for name in GELU_NAMES}, "relu": "relu", "relu2": "squared_relu"}
# a gated MLP (gate, up, down): the activation applies to the gate (Shazeer 2020)
GATED_ACTIVATIONS = {**{name: "swiglu" for name in SILU_NAMES}, **{name: "geglu" for name in GELU_NAMES}}
SLIDING, FULL = "sliding_attention", "full_attention"


class HFConfig:
    """Typed access to one HF config mapping; errors name the key (prefixed by `context`)."""

    def __init__(self, data: Mapping[str, Any], context: str):
        self.data = data
        self.context = context
        self.keys: dict[str, str] = {}  # ModelSpec field path -> HF key it came from (for error messages)
        self.read: set[str] = set()  # the keys present in the config that a builder looked at
        self.asked: set[str] = set()  # every key a builder looked for, present or not

    def error(self, key: str, value: Any, valid: str) -> SpecError:
        return SpecError(f"{self.context}{key}={show(value)} is not valid; {valid}")

    def raw(self, key: str, default: Any = _MISSING) -> Any:
        self.asked.add(key)
        if key in self.data:
            self.read.add(key)
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

    def number(self, key: str, default: Any = _MISSING, maximum: float = math.inf) -> float:
        """A finite number, at most `maximum` in magnitude (NaN and infinities refused)."""
        value = self.raw(key, default)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            raise self.error(key, value, "expected a finite number")
        if abs(value) > maximum:
            raise self.error(key, value, f"expected a number of at most {maximum:,}")
        return value

    def bool(self, key: str, default: Any = _MISSING) -> bool:
        value = self.raw(key, default)
        if not isinstance(value, bool):
            raise self.error(key, value, "expected true or false")
        return value

    def indices(self, key: str, default: Any = _MISSING) -> list[int]:
        """A list of integers >= 0 (layer indices, per-layer flags)."""
        value = self.raw(key, default)
        if not isinstance(value, (list, tuple)) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0
                                                           for i in value):
            raise self.error(key, value, "expected a list of integers >= 0")
        return list(value)

    def misspelt(self) -> list[tuple[str, str]]:
        """(key, the key it was meant to be) for each key of the config no builder read that is close to one a
        builder looked for and did not find: `num_key_value_head` for `num_key_value_heads`, whose absence gave its
        default (as many KV heads as heads) with nothing said."""
        absent = sorted(self.asked - set(self.data))
        out = []
        for key in (k for k in self.data if isinstance(k, str) and k not in self.read):
            # a typo: close, and within two characters of its length (use_sliding_window is no sliding_window)
            close = [c for c in difflib.get_close_matches(key, absent, n=3, cutoff=0.85) if abs(len(c) - len(key)) <= 2]
            if close:
                out.append((key, close[0]))
        return out

    def take(self, field: str, key: str, value: Any) -> Any:
        """Record that ModelSpec `field` comes from HF `key` and return the value."""
        self.keys[field] = key
        return value

    def nested(self, key: str) -> "HFConfig":
        """A sub-config (text_config, vision_config), its errors prefixed by its key."""
        value = self.raw(key)
        if not isinstance(value, Mapping):
            raise self.error(key, value, "expected a mapping of Hugging Face config keys")
        return HFConfig(value, f"{self.context}{key}.")


def activation(cfg: HFConfig, key: str, default: str, gated: bool) -> str:
    """The ModelSpec activation of HF `key` for an MLP that is gated (gate, up, down) or plain (up, down)."""
    table = GATED_ACTIVATIONS if gated else PLAIN_ACTIVATIONS
    name = cfg.raw(key, default)
    if not isinstance(name, str) or name not in table:
        kind = "a gated MLP (gate, up and down projections)" if gated else "an MLP (up and down projections)"
        raise cfg.error(key, name, f"this architecture has {kind}; valid: {', '.join(table)}")
    return cfg.take("activation", key, table[name])


def head_dim(cfg: HFConfig, hidden: int, heads: int) -> int:
    """Explicit head_dim only when it differs from hidden / heads (0 = derived)."""
    value = cfg.int("head_dim", 0)
    if value and heads and hidden % heads == 0 and value == hidden // heads:
        return 0
    return cfg.take("head_dim", "head_dim", value)


def fit_moe_layers(cfg: HFConfig, layers: int, sparse: list[int], how: str) -> tuple[int, int]:
    """(first_dense_layers, layer_frequency) reproducing exactly the given set of MoE layer indices."""
    if not sparse:
        raise SpecError(f"{cfg.context}{how} gives no MoE layer; ndcp cannot model this configuration")
    first = sparse[0]
    frequency = sparse[1] - sparse[0] if len(sparse) > 1 else max(1, layers - first)
    if [i for i in range(first, layers) if (i - first) % frequency == 0] != sparse:
        raise SpecError(f"{cfg.context}{how} puts MoE layers at {sparse}; ndcp can only model a dense prefix "
                        "followed by every n-th layer being MoE")
    return first, frequency


def global_every(cfg: HFConfig, key: str, local: list[bool], attention: str) -> int:
    """ModelSpec.global_every for the per-layer pattern `local` (True: the layer attends locally; read from HF
    `key`): 0 when every layer is local, n when layers n-1, 2n-1, ... are the full-attention ones; any other
    pattern is refused."""
    every = 0 if all(local) else local.index(False) + 1
    if local != [not every or (i + 1) % every != 0 for i in range(len(local))]:
        raise cfg.error(key, cfg.data[key], f"ndcp models full attention on every n-th layer and {attention} on "
                                            "the others")
    return every


def windows(cfg: HFConfig, layers: int, every: int = 0) -> dict[str, int]:
    """sliding_window and global_every: from `layer_types` when the config lists it (transformers >= 4.53; Qwen2's
    `max_window_layers`: the layers from that index on), else `sliding_window` on every layer but each `every`-th
    (the architecture's fixed pattern; 0 = all layers). Patterns ndcp cannot express are refused."""
    window = cfg.int("sliding_window", 0)
    if not window or cfg.raw("use_sliding_window", True) is False:
        return {}
    key, types = "layer_types", cfg.raw("layer_types", None)
    if types is None and "max_window_layers" in cfg.data:  # Qwen2/Qwen3: layers from max_window_layers on slide
        first = cfg.int("max_window_layers")
        key, types = "max_window_layers", [SLIDING if i >= first else FULL for i in range(layers)]
    if types is not None:
        if not isinstance(types, list) or len(types) != layers or not all(t in (SLIDING, FULL) for t in types):
            raise cfg.error(key, types, f"expected a list of {layers} entries, each {SLIDING!r} or {FULL!r}")
        windowed = [t == SLIDING for t in types]
        if not any(windowed):
            return {}
        every = global_every(cfg, key, windowed, "the sliding window")
    return {"sliding_window": cfg.take("sliding_window", "sliding_window", window),
            "global_every": cfg.take("global_every", key if types is not None else "sliding_window", every)}

__all__ = ["HFConfig", "activation", "head_dim", "fit_moe_layers", "global_every", "windows",
           "GELU_NAMES", "SILU_NAMES"]
