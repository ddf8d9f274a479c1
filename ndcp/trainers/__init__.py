"""Trainer handoff: each trainer's capability profile, launch configuration and reader, one module per trainer.

`emit(kind, ...)` writes the configuration that runs a plan (or, when the trainer cannot express it, the nearest plan
it runs: the Emitted carries that strategy and notes saying what changed); `read_values(kind, text, ...)` reads a
configuration back into strategy values for `--strategy-from`, so emit -> read gives the same strategy.
"""
from __future__ import annotations

from pathlib import Path

from ..specs.fields import SpecError
from ..specs.model import ModelSpec
from ..specs.run import TRAINERS, RunSpec
from ..specs.strategy import Strategy, default_partition
from . import megatron, mindformers, torchtitan
from .base import Emitted, TrainerProfile, covers, facts, stage_plans

MODULES = {"megatron": megatron, "torchtitan": torchtitan, "mindformers": mindformers}
KINDS = tuple(MODULES)
PROFILES: dict[str, TrainerProfile] = {name: module.PROFILE for name, module in MODULES.items()}


def emit(kind: str, model: ModelSpec, run: RunSpec, strategy: Strategy, devices_per_node: int = 8) -> Emitted:
    """The launch configuration of `kind` for one strategy (notes also written as comments at the top)."""
    if kind not in MODULES:
        raise SpecError(f"--emit {kind}: unknown trainer; valid: {', '.join(KINDS)}")
    emitted = MODULES[kind].emit(model, run, strategy, devices_per_node)
    text = "".join(f"# note: {n}\n" for n in emitted.notes) + emitted.text
    return Emitted(text, emitted.notes, emitted.strategy)


def nearest(kind: str, model: ModelSpec, run: RunSpec, strategy: Strategy) -> tuple[Strategy, list[str]]:
    """The strategy `kind` runs for this plan (the plan itself when it can express it) and what changed."""
    return MODULES[kind].nearest(model, run, strategy)


def detect(text: str) -> str:
    """Which trainer a configuration is for: torchtitan names --module/--config, MindFormers is a YAML with a
    parallel_config, Megatron is a list of --flags."""
    if "--module" in text and "--config" in text:
        return "torchtitan"
    if "parallel_config:" in text:
        return "mindformers"
    if "--tensor-model-parallel-size" in text or "--micro-batch-size" in text or "--num-layers" in text:
        return "megatron"
    raise SpecError("--strategy-from: cannot tell the trainer: expected Megatron-LM arguments, torchtitan arguments "
                    "(--module/--config) or a MindFormers YAML (parallel_config)")


def file_trainer(path: str | None) -> str | None:
    """The trainer of a --strategy-from file (megatron, torchtitan, mindformers: its run's memory behaviour and
    recompute options), or None when the file is absent or unreadable: read_values reports why."""
    if not path:
        return None
    try:
        kind = detect(Path(path).expanduser().read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, SpecError):
        return None
    return kind if kind in TRAINERS else None


def read_values(path: str, model: ModelSpec, run: RunSpec) -> dict:
    """Strategy values (--strategy keys) from a trainer configuration file; its global batch and sequence length
    must be the run's."""
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise SpecError(f"--strategy-from {path}: cannot read: {getattr(error, 'strerror', None) or error}") from None
    kind = detect(text)
    values = MODULES[kind].read(text, model)
    for key, flag, expected in (("global_batch", "--global-batch", run.global_batch),
                                ("seq_len", "--seq-len", run.seq_len)):
        given = values.pop(key, None)
        if given not in (None, -1) and given != expected:
            raise SpecError(f"--strategy-from {path}: its {key.replace('_', ' ')} is {given}, the run's {flag} is "
                            f"{expected}; give {flag} {given}")
    counts = values.get("layers_per_stage")
    virtual = values.get("pp", 1) * values.get("vpp", 1)
    if counts is not None and tuple(counts) == default_partition(model.layers, virtual):
        del values["layers_per_stage"]  # the default partition: the strategy says so by giving none
    stages = values["recompute"].get("stages") if isinstance(values.get("recompute"), dict) else None
    if stages:  # one option on every layer: the uniform mode
        used = {m for stage in stages for m, n in stage.items() if n}
        if len(used) == 1:
            values["recompute"] = used.pop()
    return {k: v for k, v in values.items() if v is not None}


__all__ = ["MODULES", "KINDS", "PROFILES", "Emitted", "TrainerProfile", "emit", "nearest", "detect", "read_values",
           "file_trainer",
           "covers", "stage_plans", "facts"]
