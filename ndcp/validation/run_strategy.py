"""A measured run's strategy: the row's strategy mapping read by the parser `--strategy-file` uses
(specs/strategy_input.py parse_strategy_mapping) and assembled by `ndcp.policy.assemble_strategy`, so it takes every
key `--strategy` takes (etp, layout, first/last_stage_layers, schedule, recompute, recompute_modules, offload,
optimizer_offload, cp_comm).

Runs files spell some keys as their sources do: micro_batch (mbs), zero_stage (zero), pp_schedule (schedule, with
Megatron's "interleaved1f1b" for interleaved), layers_per_virtual_stage (one layer count for every virtual stage).
Keys that only describe the run (recompute_detail, fsdp, grad_accum, local_batch_per_dp) are set aside.

A value `unknown` for a knob the search walks (UNKNOWN_SEARCHED: vpp, mbs, zero, sp, recompute) is left to the
pinned search (validation/unknowns.py); a null is filled by the rule below, recorded in the row's `assumptions`:
- micro_batch null -> 1; vpp null -> 1; ep null -> 1; zero_stage null -> 1 (Megatron-Core distributed optimizer);
  cp null -> 1; sp null -> tp > 1 (Megatron-Core recipes enable SP with TP); etp null -> tp when ep > 1
  (Megatron-Core's default: expert_tensor_parallel_size None is tensor_model_parallel_size,
  megatron/core/parallel_state.py initialize_model_parallel), else 1;
- recompute unknown on a row that reports Narayanan's recompute-inclusive 96-coefficient FLOPs -> full (the basis
  counts one recompute forward per layer: Narayanan 2021 Eq. 3), not searched;
- an interleaved row whose layers do not split evenly: Megatron's embedding- and loss-as-layer accounting
  (--account-for-embedding-in-pipeline-split, --account-for-loss-in-pipeline-split) where layers + 2 split evenly
  (accounted_partition), else the default uneven partition given explicitly.
The strategy must keep the rulebook (ndcp.rules) but for one rule: a run with fewer micro-batches than pipeline
stages (which trainers run, at a larger bubble) is estimated, not refused; the search keeps the rule.
"""
from __future__ import annotations

from typing import Any, NamedTuple

from ..policy import assemble_strategy
from ..rules import RULEBOOK, Problem, refusal_error, strategy_degrees
from ..specs.device import ClusterSpec
from ..specs.fields import SpecError
from ..specs.model import ModelSpec
from ..specs.run import RunSpec
from ..specs.strategy import Strategy, accounted_partition, default_partition
from ..specs.strategy_input import LAYOUT_KEYS, parse_strategy_mapping
from .values import SkipRun, as_bool

RUNS_KEY_NAMES = {"micro_batch": "mbs", "zero_stage": "zero", "pp_schedule": "schedule"}
SCHEDULE_NAMES = {"interleaved1f1b": "interleaved", "interleaved-1f1b": "interleaved"}
DESCRIPTIVE_KEYS = ("recompute_detail", "fsdp", "grad_accum", "local_batch_per_dp", "layers_per_virtual_stage")
UNKNOWN_SEARCHED = ("vpp", "mbs", "zero", "sp", "recompute")
DEFAULT_ONE = ("ep", "vpp", "mbs", "zero")  # null -> 1, noted
BELOW_PP_RULE = "mbn_pp"  # rules a measured run may break: it ran
# A stack other than the trainer a row is priced as (NeMo AutoModel's FSDP2 with pipeline stages, priced with
# Megatron's behaviour) runs what that trainer's launch cannot state: estimated, with a note
OTHER_STACK_RULE = "trainer_zero_pipeline"


class PublishedStrategy(NamedTuple):
    """The strategy values a row publishes (checked by the --strategy parser) and the knobs it says are unknown."""

    values: dict[str, Any]
    unknown: tuple[str, ...]


def _named(fields: dict[str, Any]) -> dict[str, Any]:
    """The row's strategy keys under ndcp's names, descriptive keys set aside."""
    out = {}
    for key, value in fields.items():
        name = RUNS_KEY_NAMES.get(str(key), str(key))
        if name in out:
            raise SpecError(f"strategy.{key}: {name} is given twice")
        if name not in DESCRIPTIVE_KEYS:
            out[name] = value
    if isinstance(out.get("schedule"), str):
        word = out["schedule"].strip().lower()
        out["schedule"] = SCHEDULE_NAMES.get(word, word)
    return out


def _absent(value: Any) -> bool:
    """Not published: missing, empty, null or `unknown` ("none" is a value: no recompute, no offload)."""
    return value is None or (isinstance(value, str) and value.strip().lower() in ("", "null", "unknown"))


def _says_unknown(key: str, v: dict[str, Any]) -> bool:
    """Whether the row leaves a searched knob to the search: `unknown`; a recompute the row does not state at all
    (no recompute, recompute_modules or offload; published rows write it so) too."""
    if key not in UNKNOWN_SEARCHED:
        return False
    if key == "recompute":
        return _absent(v.get("recompute")) and _absent(v.get("recompute_modules")) and _absent(v.get("offload"))
    return str(v.get(key)).strip().lower() == "unknown"


def _fill_nulls(v: dict[str, Any], notes: list[str]) -> None:
    """The null rules of the module docstring, in place (unknown knobs are left for _placeholders)."""
    for key in ("tp", "pp", "dp"):
        if _absent(v.get(key)):
            raise SkipRun(f"strategy.{key} is not published")
    if _absent(v.get("cp")):
        v["cp"] = 1
    for key in DEFAULT_ONE:
        if _absent(v.get(key)) and not _says_unknown(key, v):
            notes.append(f"{key} 1")
            v[key] = 1
    tp, ep = int(v["tp"]), int(v["ep"])
    if _absent(v.get("sp")) and not _says_unknown("sp", v):
        v["sp"] = tp > 1
        notes.append(f"sp {str(tp > 1).lower()}")
    elif not _absent(v["sp"]):
        v["sp"] = bool(as_bool(v["sp"])) and tp > 1
    if _absent(v.get("etp")):
        v["etp"] = tp if ep > 1 else 1
        if ep > 1 and tp > 1:
            notes.append(f"etp {tp} (Megatron's default: etp = tp)")


def _placeholders(v: dict[str, Any], narayanan_basis: bool, notes: list[str]) -> tuple[str, ...]:
    """The unknown knobs, each set to a placeholder the search replaces, in place; recompute unknown on
    Narayanan's basis is full, not searched."""
    if narayanan_basis and _says_unknown("recompute", v):
        notes.append("recompute full (unknown: the 96-coefficient FLOPs count a recompute forward)")
        v["recompute"] = "full"
    placeholder = {"vpp": 1, "mbs": 1, "zero": 1, "sp": int(v["tp"]) > 1, "recompute": "none"}
    unknown = tuple(k for k in UNKNOWN_SEARCHED if _says_unknown(k, v))
    for key in unknown:
        v[key] = placeholder[key]
    return unknown


def _accounted_layers(v: dict[str, Any], per_stage: Any, layers: int, notes: list[str]) -> None:
    """layers_per_virtual_stage, or Megatron's accounting of an uneven interleaved split (module docstring)."""
    stages = int(v["pp"]) * int(v["vpp"])
    if not _absent(per_stage) and int(per_stage) * stages == layers:
        v["layers_per_stage"] = (int(per_stage),) * stages
        return
    if int(v["vpp"]) > 1 and layers % stages and stages <= layers:
        accounted = accounted_partition(layers, stages) is not None
        if not accounted:
            v["layers_per_stage"] = default_partition(layers, stages)
        counts = v.get("layers_per_stage") or default_partition(layers, stages)
        how = "embedding and loss counted as layers" if accounted else "the default uneven partition"
        notes.append(f"layers per virtual stage {counts[0]}-{max(counts)}-{counts[-1]} ({how})")


def read_strategy(fields: dict[str, Any], model: ModelSpec, narayanan_basis: bool,
                  notes: list[str]) -> PublishedStrategy:
    """The row's strategy values, checked by the --strategy parser, and its unknown knobs (module docstring)."""
    v = _named(fields)
    _fill_nulls(v, notes)
    unknown = _placeholders(v, narayanan_basis, notes)
    try:
        values = parse_strategy_mapping({k: x for k, x in v.items() if not _absent(x)}, "strategy")
    except SpecError as error:
        raise SkipRun(str(error)) from None
    if "vpp" in unknown:
        values.pop("layers_per_stage", None)
    elif not any(key in values for key in LAYOUT_KEYS):  # a layout places the layers itself
        _accounted_layers(values, fields.get("layers_per_virtual_stage"), model.layers, notes)
    return PublishedStrategy(values, unknown)


def checked_strategy(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, values: dict[str, Any],
                     notes: list[str]) -> Strategy:
    """The assembled strategy, or SkipRun naming the first rule it breaks; fewer micro-batches than stages
    (BELOW_PP_RULE) and a ZeRO stage the priced trainer runs only without stages (OTHER_STACK_RULE) are noted and
    estimated."""
    try:
        strategy = assemble_strategy(model, cluster, run, values)
    except SpecError as error:
        raise SkipRun(f"strategy: {error}") from None
    problem, degrees = Problem(model, cluster, run), strategy_degrees(strategy)
    for rule in RULEBOOK:
        refusal = rule.broken(problem, degrees)
        if refusal is not None and rule.name == BELOW_PP_RULE:
            notes.append(f"{strategy.mbn} micro-batches < pp {strategy.pp}: estimated at its bubble "
                         "(the search requires mbn >= pp)")
        elif refusal is not None and rule.name == OTHER_STACK_RULE:
            notes.append(f"ZeRO {strategy.zero} with pp {strategy.pp} ran on its own stack; estimated with "
                         f"{run.trainer}'s behaviour, whose launch cannot state it ({refusal.message})")
        elif refusal is not None:
            raise SkipRun(f"strategy: {refusal_error(refusal, degrees)}")
    return strategy


__all__ = ["read_strategy", "checked_strategy", "PublishedStrategy", "UNKNOWN_SEARCHED"]
