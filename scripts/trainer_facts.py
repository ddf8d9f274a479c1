"""The pinned flag facts (ndcp/trainers/facts/*.yaml) against the trainers' real parsers: Megatron-LM's argparse
parser and torchtitan's config dataclasses and registry configs. Run by scripts/check_trainers.py (its docstring
says how to set up the scratch environment); imports torch, Megatron-LM and torchtitan lazily.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trainer_checks import assume_titan_capability, megatron_arguments

BLACKWELL = (10, 0)  # a compute capability every torchtitan 0.3.0 converter accepts (MXFP8 and NVFP4 need 10.0)


def megatron_facts(source: str, pinned: dict) -> dict:
    """Type, choices and nargs of each pinned flag, read from Megatron-LM's own parser."""
    sys.path.insert(0, source)
    parser = megatron_arguments().add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
    actions = {o: a for a in parser._actions for o in a.option_strings}
    out = {}
    for name in pinned:
        action = actions.get(name)
        if action is None:
            out[name] = None
            continue
        if action.nargs == 0:
            fact = {"type": "flag"}
        else:
            kind = getattr(action.type, "__name__", "str")
            fact = {"type": kind if kind in ("int", "float") else "str"}
            if action.choices:
                fact["choices"] = [str(c) for c in action.choices]
            if action.nargs not in (None, 1):
                fact["nargs"] = action.nargs
        out[name] = fact
    return out


TITAN_AC = {"SelectiveAC": "selective", "FullAC": "full", "NoAC": "none"}


def _titan_field(flag: str) -> tuple[object, object]:
    """(declared type, default) of torchtitan option `--section.field-name` (or `--field-name`), read from
    Trainer.Config and the config dataclasses its fields name (torchtitan trainer.py, config/configs.py)."""
    import dataclasses
    import typing

    from torchtitan.trainer import Trainer

    owner, *path = [part.replace("-", "_") for part in flag[2:].split(".")]
    names = [owner, *path]
    cls: object = Trainer.Config
    for i, name in enumerate(names):
        field = {f.name: f for f in dataclasses.fields(cls)}[name]
        declared = typing.get_type_hints(cls)[name]
        if i == len(names) - 1:
            default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
            return declared, default
        cls = next(t for t in (typing.get_args(declared) or (declared,)) if dataclasses.is_dataclass(t))
    raise KeyError(flag)


def _titan_kind(declared: object) -> dict:
    """A declared type as facts/torchtitan.yaml writes it: int, float, flag (a bool), list, or str with choices
    when it is a Literal."""
    import typing

    if typing.get_origin(declared) is typing.Literal:
        return {"type": "str", "choices": list(typing.get_args(declared))}
    options = typing.get_args(declared) if typing.get_origin(declared) is not list else (list,)
    options = options or (declared,)
    for kind, name in ((bool, "flag"), (int, "int"), (float, "float"), (list, "list")):
        if any(t is kind or typing.get_origin(t) is kind for t in options):
            return {"type": name}
    return {"type": "str"}


def torchtitan_facts(pinned_flags: dict, configs: dict) -> dict:
    """Type and default of each option ndcp emits or reads (torchtitan's config dataclasses), and each pinned
    registry config's own values where they differ (models/*/config_registry.py)."""
    import importlib

    assume_titan_capability(BLACKWELL)  # a registry config's values do not depend on the device its converters ask
    flags = {}
    for flag in pinned_flags:
        declared, default = _titan_field(flag)
        kind = _titan_kind(declared)
        flags[flag] = {"type": kind["type"], "default": default, **({"choices": kind["choices"]}
                                                                    if "choices" in kind else {})}
    out_configs = {}
    for config, pinned in configs.items():
        registry = importlib.import_module(f"torchtitan.models.{pinned['module']}.config_registry")
        built = getattr(registry, config)()
        entry = {"model": pinned["model"], "module": pinned["module"]}
        for flag, fact in flags.items():
            value = built
            for part in flag[2:].split("."):
                value = getattr(value, part.replace("-", "_"))
            if value != fact["default"]:
                entry[flag] = value
        ac = type(built.activation_checkpoint).__qualname__.split(".")[0]
        entry["activation_checkpoint"] = TITAN_AC.get(ac, ac)
        if pinned.get("fp8_recipe"):
            entry["fp8_recipe"] = pinned["fp8_recipe"]
        out_configs[config] = entry
    return {"flags": flags, "configs": out_configs}


def check_facts(args: argparse.Namespace) -> int:
    """Pinned facts equal to what the real parser says (flags ndcp emits or reads)."""
    import yaml

    pinned = yaml.safe_load((Path(args.facts) / "megatron.yaml").read_text())["flags"]
    titan = yaml.safe_load((Path(args.facts) / "torchtitan.yaml").read_text())
    real, real_titan = megatron_facts(args.megatron_lm, pinned), torchtitan_facts(titan["flags"], titan["configs"])
    if args.dump_facts:
        print(yaml.safe_dump({"megatron": {"flags": real}, "torchtitan": real_titan}, sort_keys=False,
                             default_flow_style=None, width=120))
        return 0
    wrong = 0
    for trainer, have, want in (("megatron", pinned, real), ("torchtitan", titan["flags"], real_titan["flags"]),
                                ("torchtitan configs", titan["configs"], real_titan["configs"])):
        bad = [n for n in have if want.get(n) != have[n]]
        for n in bad:
            print(f"facts: {trainer} {n}: pinned {have[n]}, the real one says {want.get(n)}")
        print(f"facts: {trainer} {len(have) - len(bad)}/{len(have)} pinned entries match")
        wrong += len(bad)
    return wrong
