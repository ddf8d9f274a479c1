"""Strategies as users write them: `--strategy tp=8,pp=16,...` or a strategy YAML file.

Parsing checks and converts each value (SpecError names the key and what is valid); `derive_batch_split` fills in
dp and mbn (the rest of the GPUs and of the global batch). Validity is the rulebook's (ndcp.rules), applied by the
caller (ndcp.policy.build_strategy) on the whole strategy.
"""
from __future__ import annotations

import math
from typing import Any

from .device import ClusterSpec
from .fields import SpecError, divisors, near_key, show
from .files import parse_yaml, read_text
from .pipeline_layout import check_layout, first_last_partition, parse_layout
from .run import RunSpec
from .recompute import option_for_modules
from .strategy import RECOMPUTE_MODES, RecomputePlan, StageRecompute, default_partition

# -- strategy values ---------------------------------------------------------------------------------------------
STRATEGY_INT_KEYS = ("dp", "tp", "pp", "cp", "ep", "etp", "vpp", "mbs", "mbn", "zero", "dp_shard", "dp_replicate")
# Pipeline layout keys (specs/pipeline_layout.py), resolved into layers_per_stage by resolve_layout.
LAYOUT_KEYS = ("layout", "first_stage_layers", "last_stage_layers")
OFFLOAD_CHOICES = ("none", "activations", "optimizer", "activations+optimizer")
STRATEGY_KEYS = (STRATEGY_INT_KEYS + ("sp", "recompute", "recompute_modules", "offload", "optimizer_offload",
                                     "schedule", "cp_comm") + LAYOUT_KEYS)
FILE_ONLY_KEYS = ("layers_per_stage",)
# Run settings the JSON strategy objects report (report/jsonout.py run_settings): accepted back so that a reported
# strategy round-trips, and checked against the run's own --precision / --fp8-recipe (policy.py build_strategy).
RUN_SETTING_KEYS = ("precision", "fp8_recipe")
ON_WORDS, OFF_WORDS = ("on", "true", "1", "yes"), ("off", "false", "0", "no")


def _strategy_value(key: str, value: Any) -> Any:
    """Check and convert one strategy value (from the --strategy string or the YAML file)."""
    if key in RUN_SETTING_KEYS:  # a run setting reported with the strategy: a name or null (checked by the CLI)
        if value is not None and not isinstance(value, str):
            raise SpecError(f"{key}={show(value)} is not valid; expected a name")
        word = None if value is None else value.strip().lower()
        return None if word in (None, "", "none", "null") else word
    if key == "layout":  # Megatron's notation; a JSON `layout` object carries it under "megatron"
        return parse_layout(value.get("megatron") if isinstance(value, dict) else value)
    if key in STRATEGY_INT_KEYS + LAYOUT_KEYS[1:]:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise SpecError(f"{key}={show(value)} is not valid; expected an integer")
        try:
            number = int(str(value).strip())
        except ValueError:
            raise SpecError(f"{key}={show(value)} is not valid; expected an integer") from None
        low = 0 if key == "zero" else 1
        if number < low or (key == "zero" and number > 3):
            valid = "valid: 0, 1, 2, 3" if key == "zero" else "expected an integer >= 1"
            raise SpecError(f"{key}={number} is not valid; {valid}")
        return number
    if not isinstance(value, (str, int, float, dict, list, tuple)) or (
            key in ("sp", "optimizer_offload", "schedule", "cp_comm") and not isinstance(value, (str, int))):
        raise SpecError(f"{key}={show(value)} is not valid")  # before str(value): a YAML alias bomb must not print
    if key in ("sp", "optimizer_offload"):  # optimizer_offload: as the JSON strategy reports it
        if isinstance(value, bool):
            return value
        word = str(value).strip().lower()
        if word in ON_WORDS:
            return True
        if word in OFF_WORDS:
            return False
        raise SpecError(f"{key}={show(value)} is not valid; valid: on, off, true, false, 1, 0")
    if key == "schedule":
        return str(value).strip().lower()  # which schedules exist is the rulebook's `schedule` rule
    if key == "cp_comm":
        return str(value).strip().lower()  # the Strategy field checks the name; cp_comm_* rules the relations
    if key == "offload":
        word = str(value).strip().lower()
        if word not in OFFLOAD_CHOICES:
            raise SpecError(f"offload={show(value)} is not valid; valid: {', '.join(OFFLOAD_CHOICES)}")
        return word
    if key == "recompute_modules":  # Megatron's module names joined by "+": the option made of them
        return option_for_modules(value)
    if key == "recompute":
        if isinstance(value, str):
            word = value.strip().lower()
            if word not in RECOMPUTE_MODES:
                raise SpecError(f"recompute={show(value)} is not valid; valid: {', '.join(RECOMPUTE_MODES)} "
                                "(per-stage plans go in --strategy-file)")
            return word
        return value  # a per-stage mapping from the file, checked by _recompute_plan
    if key == "layers_per_stage":
        if not isinstance(value, (list, tuple)) or not value:
            raise SpecError(f"layers_per_stage={show(value)} is not valid; expected a list of layer counts per stage")
        return tuple(_layer_count(i, v) for i, v in enumerate(value))
    raise SpecError(f"{key}: unknown strategy key; valid keys: {', '.join(STRATEGY_KEYS)}")


def _layer_count(index: int, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SpecError(f"layers_per_stage[{index}]={show(value)} is not valid; expected an integer >= 0")
    return value


def _items(text: str) -> list[str]:
    """The key=value items of a --strategy string; a piece without "=" after `layout=` continues the layout (Megatron's
    notation uses commas cosmetically: layout=Et*3|(tt|)*29,m|L)."""
    items: list[str] = []
    for piece in str(text).split(","):
        if items and "=" not in piece and items[-1].strip().lower().startswith("layout="):
            items[-1] += "," + piece
        else:
            items.append(piece)
    return items


def parse_strategy_string(text: str) -> dict[str, Any]:
    """`tp=8,pp=16,dp=8,mbs=1,zero=1,sp=on,recompute=selective` -> checked values by key."""
    out: dict[str, Any] = {}
    for item in _items(text):
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        key = key.strip().lower().replace("-", "_")
        if not sep or not value.strip():
            raise SpecError(f"--strategy: {item!r} is not key=value; valid keys: {', '.join(STRATEGY_KEYS)}")
        if key not in STRATEGY_KEYS + RUN_SETTING_KEYS:
            raise SpecError(f"--strategy: unknown key {key!r}{near_key(key, STRATEGY_KEYS)}; valid keys: "
                            f"{', '.join(STRATEGY_KEYS)}")
        if key in out:
            raise SpecError(f"--strategy: {key} is given twice")
        out[key] = _strategy_value(key, value.strip())
    return out


def load_strategy_file(path: str) -> dict[str, Any]:
    """A YAML (or JSON) strategy: the --strategy keys plus `layers_per_stage` and a per-stage `recompute`. A document
    with a top-level `strategy` mapping (an `ndcp estimate --json` output) is read from that mapping."""
    where = f"--strategy-file {path}"
    data = parse_yaml(read_text(path, where, "the strategy"), where)  # every read or YAML failure -> SpecError
    if isinstance(data, dict) and isinstance(data.get("strategy"), dict):
        data = data["strategy"]
    if not isinstance(data, dict):
        got = type(data).__name__ if data is not None else "an empty file"
        raise SpecError(f"{where}: expected a mapping of strategy keys, got {got}")
    return parse_strategy_mapping(data, where)


def parse_strategy_mapping(data: dict, where: str) -> dict[str, Any]:
    """A mapping of strategy keys (a strategy file's, a measured run's) -> checked values by key; SpecError names
    `where` and the key."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = str(key).strip().lower().replace("-", "_")
        if name not in STRATEGY_KEYS + FILE_ONLY_KEYS + RUN_SETTING_KEYS:
            raise SpecError(f"{where}: unknown key {show(key)}{near_key(key, STRATEGY_KEYS + FILE_ONLY_KEYS)}; valid "
                            f"keys: {', '.join(STRATEGY_KEYS + FILE_ONLY_KEYS)}")
        try:
            out[name] = _strategy_value(name, value)
        except SpecError as error:
            raise SpecError(f"{where}: {error}") from None
    return out


def resolve_recompute_modules(v: dict[str, Any]) -> None:
    """`recompute_modules=a+b` names the recompute option in place, `offload=activations` the offload option for every
    layer (a per-stage plan mixes it with others), `offload=optimizer` the optimizer on the host; SpecError when
    `recompute=` or `optimizer_offload=` says another."""
    offload = v.pop("offload", "none")
    if "optimizer" in offload:
        if v.get("optimizer_offload") is False:
            raise SpecError(f"offload={offload} and optimizer_offload=off disagree: give one of them")
        v["optimizer_offload"] = True
    if "activations" in offload:
        if v.get("recompute", "offload") not in ("offload",) or "recompute_modules" in v:
            raise SpecError("offload=activations puts every layer's activations in host memory: drop recompute=, or "
                            "mix recompute=offload with other options per stage in --strategy-file")
        v["recompute"] = "offload"
    option = v.pop("recompute_modules", None)
    if option is None:
        return
    if v.get("recompute", option) != option:
        raise SpecError(f"recompute={v['recompute']} and recompute_modules={option} disagree; give one of them")
    v["recompute"] = option


def resolve_layout(v: dict[str, Any], layers: int, mtp_depth: int) -> None:
    """Turn `layout=` (Megatron's notation) or `first_stage_layers=`/`last_stage_layers=` into layers_per_stage (and
    vpp, which a layout implies) in place; pp must be set. SpecError when they conflict with each other or with vpp or
    layers_per_stage."""
    given = [k for k in LAYOUT_KEYS if v.get(k) is not None]
    if not given:
        return
    if "layout" in given and len(given) > 1:
        raise SpecError("layout= already places every layer; drop first_stage_layers/last_stage_layers")
    pp = v["pp"]
    if "layout" in given:
        layout = v.pop("layout")
        counts = check_layout(layout, layers, mtp_depth, pp)
        vpp = len(counts) // pp
        if v.get("vpp", vpp) != vpp:
            raise SpecError(f"layout has {len(counts)} stages = pp x {vpp}, but vpp={v['vpp']}; drop vpp or match it")
        v["vpp"] = vpp
    else:
        counts = first_last_partition(layers, pp, v.get("vpp", 1), v.pop("first_stage_layers", None),
                                      v.pop("last_stage_layers", None))
    if v.get("layers_per_stage") not in (None, counts):
        raise SpecError(f"layers_per_stage={list(v['layers_per_stage'])} conflicts with {', '.join(given)} "
                        f"(which gives {list(counts)}); give one of them")
    if counts == default_partition(layers, len(counts)):
        v.pop("layers_per_stage", None)  # the default partition: not an explicit one (reports and emitters say so)
    else:
        v["layers_per_stage"] = counts


def recompute_plan(value: Any) -> RecomputePlan:
    """A uniform mode string, or `{stages: [{none: .., selective: .., full: ..}, ...]}` per virtual stage."""
    if isinstance(value, str):
        return RecomputePlan.uniform(value)
    stages = value.get("stages") if isinstance(value, dict) else value if isinstance(value, list) else None
    if isinstance(value, dict) and set(value) - {"stages", "mode"}:
        extra = show(sorted(set(value) - {"stages", "mode"}, key=str)[0])
        raise SpecError(f"recompute.{extra}: unknown key; valid keys: stages")
    if not isinstance(stages, list) or not stages:
        raise SpecError("recompute is not valid; expected none|selective|full or {stages: [{none: N, selective: N, "
                        "full: N}, ...]} with one entry per virtual stage")
    plan = []
    for i, entry in enumerate(stages):
        if not isinstance(entry, dict):
            raise SpecError(f"recompute.stages[{i}] must be a mapping of none/selective/full layer counts")
        stage = _stage_recompute(i, {k: v for k, v in entry.items() if k not in ("stage", "layers")})
        if "layers" in entry and entry["layers"] != stage.layers:
            raise SpecError(f"recompute.stages[{i}]: layers={show(entry['layers'])} but none+selective+full = "
                            f"{stage.layers}")
        plan.append(stage)
    return RecomputePlan(mode="per-stage", stages=tuple(plan))


def _stage_recompute(index: int, counts: dict) -> StageRecompute:
    """One stage's `{none: N, selective: N, full: N}`: unknown keys first, then each count an integer."""
    context = f"recompute.stages[{index}]."
    unknown = [k for k in counts if k not in RECOMPUTE_MODES]
    if unknown:
        raise SpecError(f"{context}{show(unknown[0])}: unknown key; valid keys: {', '.join(RECOMPUTE_MODES)}")
    checked = {}
    for mode in RECOMPUTE_MODES:
        if mode not in counts:
            continue
        value = counts[mode]
        if isinstance(value, float) and value.is_integer() and math.isfinite(value):
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise SpecError(f"{context}{mode}={show(value)} is not valid; expected an integer")
        checked[mode] = value
    try:
        return StageRecompute(**checked)
    except SpecError as error:
        message = str(error)
        raise SpecError(message if message.startswith(context) else f"{context}{message}") from None


# -- the whole strategy ------------------------------------------------------------------------------------------
# -- defaults ----------------------------------------------------------------------------------------------------
DEFAULT_ONE = ("tp", "pp", "cp", "ep", "etp", "vpp", "mbs", "zero")  # keys that default to 1


def derive_batch_split(cluster: ClusterSpec, run: RunSpec, v: dict[str, Any]) -> None:
    """dp takes the rest of the GPUs and mbn the rest of the global batch when they are not given (in place); says
    why when it cannot. Every validity rule is ndcp.rules' (checked by the caller on the whole strategy)."""
    n = cluster.count
    if "dp" not in v:
        model_parallel = v["tp"] * v["pp"] * v["cp"]
        if n % model_parallel:
            raise SpecError(f"tp*pp*cp = {model_parallel} (tp={v['tp']}, pp={v['pp']}, cp={v['cp']}) does not divide "
                            f"--gpus {n}, so dp cannot take the rest; valid tp*pp*cp: "
                            f"{', '.join(map(str, divisors(n)))}")
        v["dp"] = n // model_parallel
    _resolve_replicas(v)
    if "mbn" not in v:
        per_microbatch = v["dp"] * v["mbs"]
        if run.global_batch % per_microbatch:
            valid_mbs = [d for d in divisors(run.global_batch) if (run.global_batch // d) % v["dp"] == 0]
            raise SpecError(f"mbs={v['mbs']} is not valid: dp*mbs = {per_microbatch} (dp={v['dp']}) does not divide "
                            f"the global batch {run.global_batch}, so mbn cannot take the rest; valid mbs: "
                            f"{', '.join(map(str, valid_mbs)) or 'none (dp does not divide the global batch)'}")
        v["mbn"] = run.global_batch // per_microbatch


def _resolve_replicas(v: dict[str, Any]) -> None:
    """HSDP given as replicas (dp_replicate=R, Megatron --num-distributed-optimizer-instances): dp_shard = dp / R."""
    if "dp_replicate" not in v:
        return
    replicas, dp = v.pop("dp_replicate"), v["dp"]
    if dp % replicas or v.get("dp_shard", dp // replicas) * replicas != dp:
        raise SpecError(f"dp_replicate={replicas} is not valid: dp_shard x dp_replicate must be dp = {dp}; valid "
                        f"dp_replicate: {', '.join(map(str, divisors(dp)))}")
    v["dp_shard"] = dp // replicas


__all__ = ["parse_strategy_string", "load_strategy_file", "STRATEGY_KEYS", "STRATEGY_INT_KEYS", "DEFAULT_ONE",
           "parse_strategy_mapping", "LAYOUT_KEYS", "derive_batch_split", "recompute_plan", "FILE_ONLY_KEYS",
           "ON_WORDS", "OFF_WORDS"]
