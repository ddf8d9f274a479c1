"""A strategy as one line of text: one function for every report, with the field lists each of them shows.

    strategy_text(s)                         tp=4 pp=2 cp=1 dp=8 vpp=1 mbs=1 mbn=32 zero=1 sp=on recompute=selective
    strategy_text(s, PLOT_FIELDS, compact=True, ...)                   tp4 pp2 cp1 dp8 mbs1 z1 sp selective
"""
from __future__ import annotations

from typing import Sequence

from .strategy import Strategy

# The search report's degrees (ndcp search --quiet, nearest misses, ndcp recompute's header): the default.
SEARCH_FIELDS = ("tp", "pp", "cp", "cp_comm", "dp", "dp_shard", "ep", "etp", "vpp", "schedule", "mbs", "mbn", "zero",
                 "optimizer_offload", "sp", "recompute")
# Plot labels: strategy_text(s, PLOT_FIELDS, compact=True, experts_if_used=True, above_one=("vpp",)).
PLOT_FIELDS = ("tp", "pp", "cp", "dp", "ep", "etp", "vpp", "schedule", "mbs", "zero", "optimizer_offload", "sp",
               "recompute")
# The schedules vpp alone implies (ndcp.schedules.default_schedule): not shown; any other one is.
_IMPLIED_SCHEDULES = ("1f1b", "interleaved")
# Infeasibility explanations (solve/explain.py): strategy_text(s, EXPLAIN_FIELDS).
EXPLAIN_FIELDS = ("tp", "pp", "cp", "dp", "ep", "vpp", "mbs", "zero", "sp", "recompute")
# Validation tables (validation/compare.py): strategy_text(s, VALIDATION_FIELDS, compact=True, above_one=("cp", "ep", "vpp")).
VALIDATION_FIELDS = ("tp", "pp", "dp", "dp_shard", "cp", "ep", "vpp", "mbs", "zero", "sp", "recompute")

_EXPERT_FIELDS = ("ep", "etp")


def strategy_text(strategy: Strategy, fields: Sequence[str] = SEARCH_FIELDS, *, compact: bool = False,
                  experts_if_used: bool = False, above_one: Sequence[str] = ()) -> str:
    """`fields` in order, space-separated: `key=value` with sp on/off and the recompute summary, or (`compact`)
    `tp8`, `z1`, `sp` only when on and the recompute summary alone. `experts_if_used`: ep and etp only when ep > 1
    or etp > 1; `above_one`: these fields only when their value is > 1."""
    s = strategy
    experts_used = s.ep > 1 or s.etp > 1
    words = []
    for name in fields:
        if experts_if_used and name in _EXPERT_FIELDS and not experts_used:
            continue
        if name in above_one and getattr(s, name) <= 1:
            continue
        word = _word(s, name, compact)
        if word:
            words.append(word)
    return " ".join(words)


def _word(s: Strategy, name: str, compact: bool) -> str:
    if name == "recompute":
        summary = s.recompute.summary()
        return summary if compact else f"recompute={summary}"
    if name == "sp":
        if compact:
            return "sp" if s.sp else ""
        return f"sp={'on' if s.sp else 'off'}"
    if name == "schedule":
        return "" if s.schedule in _IMPLIED_SCHEDULES else (s.schedule if compact else f"schedule={s.schedule}")
    if name == "optimizer_offload":  # only when on: `offload=optimizer`, as --strategy takes it
        return "" if not s.optimizer_offload else ("opt-host" if compact else "offload=optimizer")
    if name == "cp_comm":  # only where context parallelism runs
        return "" if s.cp <= 1 else f"cp_comm={s.cp_comm}"
    if name == "dp_shard":  # only under HSDP (0: sharded over all dp ranks)
        return "" if not s.dp_shard else (f"shard{s.dp_shard}" if compact else f"dp_shard={s.dp_shard}")
    value = getattr(s, name)
    if compact:
        return f"{'z' if name == 'zero' else name}{value}"
    return f"{name}={value}"


__all__ = ["strategy_text", "SEARCH_FIELDS", "PLOT_FIELDS", "EXPLAIN_FIELDS", "VALIDATION_FIELDS"]
