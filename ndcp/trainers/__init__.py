"""The trainers: one Trainer per trainer (ndcp/trainers/NAME.py), registered here; everything that depends on the
trainer asks this registry (`trainer_named`), never the trainer's name.

A Trainer (base.py) holds every part of one trainer: its behaviour as the estimators price it, what it can run
(ZeRO stages, recompute options, schedules and their names, FP8 recipes, ...), how its configuration is recognised,
and `nearest`, `emit` and `read`. Its behaviour is the one part defined lower, in specs/trainer_behaviour.py: the
estimators look it up by RunSpec.trainer and must not import this package (it sits above them: it emits and reads
launch configurations), and specs.run.TRAINERS, the validated names, are that table's names. A new trainer is its
module here, its pinned facts (facts/NAME.yaml), a line in REGISTRY and its behaviour in specs/trainer_behaviour.py.

`emit(kind, ...)` writes the configuration that runs a plan (or, when the trainer cannot express it, the nearest plan
it runs: the Emitted carries that strategy and notes saying what changed); `read_values(path, ...)` reads a
configuration back into strategy values for `--strategy-from`, so emit -> read gives the same strategy.
"""
from __future__ import annotations


from ..specs.fields import SpecError
from ..specs.files import read_text
from ..specs.model import ModelSpec
from ..specs.run import RunSpec
from ..specs.strategy import Strategy, default_partition
from . import megatron, mindformers, torchtitan
from .base import Emitted, Trainer, covers, facts, stage_plans

REGISTRY: dict[str, Trainer] = {t.name: t for t in (megatron.TRAINER, torchtitan.TRAINER, mindformers.TRAINER)}
KINDS = tuple(REGISTRY)  # the registered trainers' names (--emit's choices)


def trainer_named(name: str) -> Trainer:
    """The registered trainer of this name (a RunSpec's trainer is validated against specs.run.TRAINERS)."""
    return REGISTRY[name]


def emit(kind: str, model: ModelSpec, run: RunSpec, strategy: Strategy, domain_ranks: int = 8) -> Emitted:
    """The launch configuration of `kind` for one strategy (notes also written as comments at the top)."""
    if kind not in REGISTRY:
        raise SpecError(f"--emit {kind}: unknown trainer; valid: {', '.join(KINDS)}")
    emitted = REGISTRY[kind].emit(model, run, strategy, domain_ranks)
    text = "".join(f"# note: {n}\n" for n in emitted.notes) + emitted.text
    return Emitted(text, emitted.notes, emitted.strategy, emitted.run, emitted.missing)


def nearest(kind: str, model: ModelSpec, run: RunSpec, strategy: Strategy) -> tuple[Strategy, list[str]]:
    """The strategy `kind` runs for this plan (the plan itself when it can express it) and what changed."""
    return REGISTRY[kind].nearest(model, run, strategy)


def detect(text: str) -> Trainer:
    """The trainer a configuration is for: the one registered trainer whose `recognises` accepts its text."""
    found = [t for t in REGISTRY.values() if t.recognises(text)]
    if len(found) == 1:
        return found[0]
    if found:
        raise SpecError("--strategy-from: cannot tell the trainer: the file reads as "
                        + " and as ".join(t.config_kind for t in found))
    kinds = [t.config_kind for t in REGISTRY.values()]
    raise SpecError(f"--strategy-from: cannot tell the trainer: expected {', '.join(kinds[:-1])} or {kinds[-1]}")


def file_trainer(path: str | None) -> str | None:
    """The trainer of a --strategy-from file (its run's memory behaviour and recompute options), or None when the
    file is absent or unreadable: read_values reports why."""
    if not path:
        return None
    try:
        return detect(read_text(path, f"--strategy-from {path}", "the configuration")).name
    except SpecError:
        return None


def file_overlap(path: str | None) -> str | None:
    """The run's --overlap a --strategy-from file states (Trainer.read_overlap), or None when the file is absent or
    unreadable: read_values reports why."""
    return _file_states(path, lambda trainer, text: trainer.read_overlap(text))


def file_loss_kernel(path: str | None) -> str | None:
    """The run's --loss-kernel a --strategy-from file states (Trainer.read_loss_kernel), or None when the file is
    absent or unreadable: read_values reports why."""
    return _file_states(path, lambda trainer, text: trainer.read_loss_kernel(text))


def _file_states(path: str | None, read) -> str | None:
    """What `read(trainer, text)` finds in a --strategy-from file, or None when the file is absent or unreadable."""
    if not path:
        return None
    try:
        text = read_text(path, f"--strategy-from {path}", "the configuration")
        return read(detect(text), text)
    except (SpecError, SystemExit):
        return None


def read_values(path: str, model: ModelSpec, run: RunSpec) -> dict:
    """Strategy values (--strategy keys) from a trainer configuration file; its global batch, sequence length and
    torch.compile (torchtitan) must be the run's."""
    text = read_text(path, f"--strategy-from {path}", "the configuration")
    values = detect(text).read(text, model)
    for key, flag, expected in (("global_batch", "--global-batch", run.global_batch),
                                ("seq_len", "--seq-len", run.seq_len)):
        given = values.pop(key, None)
        if given not in (None, -1) and given != expected:
            raise SpecError(f"--strategy-from {path}: its {key.replace('_', ' ')} is {given}, the run's {flag} is "
                            f"{expected}; give {flag} {given}")
    for key, option, part in (("torch_compile", "--torch-compile", "model"),
                              ("compile_loss", "--compile-loss", "loss")):
        compiled = values.pop(key, None)  # run settings (torchtitan's compile.components): must be the run's
        if compiled is not None and compiled != getattr(run, key):
            raise SpecError(f"--strategy-from {path}: it " + (
                f"compiles the {part} (compile.enable, {part} in compile.components); give {option}" if compiled
                else f"runs the {part} eager (no compile.enable, or no {part} in compile.components); leave out "
                     f"{option}"))
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


__all__ = ["REGISTRY", "KINDS", "Trainer", "Emitted", "trainer_named", "emit", "nearest", "detect", "read_values",
           "file_trainer", "file_overlap", "covers", "stage_plans", "facts"]
