"""Communication overlapped with compute: which overlaps a strategy runs, and how much of a collective each hides.

Each overlap has the condition its trainer checks before enabling it (docs/formulas.md §7.1):
- "ep", the MoE token all-to-all hidden behind another micro-batch's compute: DualPipe / DualPipe-V pair a forward
  chunk with a backward chunk of another micro-batch by construction (DeepSeek-V3 §3.2.1); Megatron-Core's
  --overlap-moe-expert-parallel-comm does the same in its combined 1F1B schedule and needs ep > 1 and, with pp > 1,
  the interleaved schedule (TransformerConfig.__post_init__), and neither full recompute nor the "moe" recompute
  module: a layer that re-runs its forward or its MoE block (with the all-to-alls) in the backward keeps its
  all-to-alls exposed.
- "tp", Transformer Engine's userbuffers (--tp-comm-overlap): each sequence-parallel all-gather / reduce-scatter
  split into chunks pipelined with its GEMM; needs tp > 1 and sequence parallelism (Megatron-LM arguments.py).
- "p2p", the pipeline sends overlapped with the next chunk's compute: Megatron's --overlap-p2p-communication,
  which Megatron-LM enables by default and turns off without interleaving (arguments.py); DualPipe's own.
The run says which overlaps the trainer is asked for (RunSpec.overlap; "trainer": its defaults,
TrainerBehaviour.default_overlaps in specs/trainer_behaviour.py); a schedule's own (Schedule.hides) always apply.
"""
from __future__ import annotations

from functools import lru_cache

from ..schedules import schedule_named
from ..specs.recompute import LAYER_FORWARD, MOE_FORWARD, recompute_option
from ..specs.run import RunSpec
from .trainers import trainer_behaviour

NO_OVERLAP: frozenset = frozenset()
HIDDEN_KEYS = ("tp_comm", "ep_comm", "pp_comm")  # TimeEstimate.hidden, the JSON `hidden_comm`


def requested(run: RunSpec) -> frozenset:
    """The overlaps the run asks the trainer for (RunSpec.overlap resolved)."""
    return asked_overlaps(run.overlap, trainer_behaviour(run).default_overlaps)


def asked_overlaps(overlap: str, trainer_default: frozenset) -> frozenset:
    """The overlaps a RunSpec.overlap value asks for: the trainer's defaults for "trainer", none for "none"."""
    if overlap == "trainer":
        return trainer_default
    return NO_OVERLAP if overlap == "none" else frozenset(overlap.split("+"))


@lru_cache(maxsize=65536)
def hidden_comms(run: RunSpec, schedule: str, pp: int, vpp: int, tp: int, sp: bool, ep: int) -> frozenset:
    """The overlaps a strategy runs: the schedule's own, plus each requested one whose condition holds."""
    asked = requested(run)
    out = set(schedule_named(schedule).hides)
    if "ep" in asked and (pp == 1 or vpp > 1):
        out.add("ep")
    if "tp" in asked and sp:
        out.add("tp")
    if "p2p" in asked and vpp > 1:
        out.add("p2p")
    present = {"ep": ep > 1, "tp": tp > 1, "p2p": pp > 1}
    return frozenset(k for k in out if present[k])


def strategy_overlaps(run: RunSpec, strategy) -> frozenset:
    """hidden_comms of a whole strategy."""
    s = strategy
    return hidden_comms(run, s.schedule, s.pp, s.vpp, s.tp, s.sp, s.ep)


LAYER_OVERLAPS = frozenset({"tp", "ep"})  # the overlaps inside a body layer ("p2p" is between stages)


def layer_overlaps(hidden: frozenset, kind: str, mode: str) -> frozenset:
    """The overlaps that apply to one body layer: TP's, and the all-to-all only on MoE layers that do not re-run
    their forward or their MoE block (with its dispatch and combine) in the backward. Only these, so the layer
    times cached by them are shared by strategies that differ in the others (Megatron overlaps the pipeline sends
    only when interleaving: the same layers with and without)."""
    hidden = hidden & LAYER_OVERLAPS
    if "ep" in hidden and (kind != "moe" or {LAYER_FORWARD, MOE_FORWARD} & set(recompute_option(mode).reruns)):
        return hidden - {"ep"}
    return hidden


def tp_overlapped(tp_forward: float, linear: float) -> tuple[float, float]:
    """Exposed (forward, backward) TP seconds of a layer under userbuffers: the forward collectives pipelined with
    the forward GEMMs, the backward ones with the input- and weight-gradient GEMMs (twice the forward's)."""
    return max(0.0, tp_forward - linear), max(0.0, tp_forward - 2 * linear)


def ep_overlapped(all_to_all: float, compute: float) -> tuple[float, float]:
    """Exposed (forward, backward) seconds of a MoE layer's four all-to-alls (dispatch and combine, each way)
    overlapped with another micro-batch's forward and backward compute of the layer: what outlasts it, split
    evenly between the passes."""
    exposed = max(0.0, all_to_all - compute)
    return exposed / 2, exposed / 2


__all__ = ["NO_OVERLAP", "HIDDEN_KEYS", "requested", "asked_overlaps", "hidden_comms", "strategy_overlaps",
           "layer_overlaps", "tp_overlapped", "ep_overlapped"]
