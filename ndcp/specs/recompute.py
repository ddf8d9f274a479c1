"""Recompute options as data, and the per-stage plans built from them.

An option says which of a layer's stored activations it keeps for backward and which forward work it re-runs to
get the rest; the estimators read these fields (estimate/activations.py keeps, estimate/time.py and compute.py
re-run) and never an option's name. Adding an option is a row of OPTIONS (plus its tests) when it keeps and re-runs
pieces the estimators already know; a new piece is also named in the estimator that prices it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .fields import non_negative_int, one_of, require

# What an option keeps of the layer's activation inventory (estimate/activations.py).
KEEPS_ALL = "inventory"  # every tensor of the inventory except the `drops` tags
KEEPS_LAYER_INPUT = "layer_input"  # only the layer's input (the checkpoint)
# Forward pieces an option re-runs in backward (estimate/time.py prices them, estimate/compute.py counts FLOPs).
ATTENTION_CORE = "attention_core"  # softmax(QK^T)V and, without flash attention, its elementwise ops
LAYER_FORWARD = "layer_forward"  # the whole layer forward with its TP/CP/EP forward communication


@dataclass(frozen=True)
class RecomputeOption:
    """One way to run a layer's backward: what it keeps, what it re-runs, and how heavy it is."""

    name: str
    keeps: str  # KEEPS_ALL or KEEPS_LAYER_INPUT
    drops: tuple[str, ...]  # inventory tags (estimate.activations.Tensor.shard) not kept under KEEPS_ALL
    reruns: tuple[str, ...]  # forward pieces re-run in backward
    # Heavier options keep no more bytes and re-run no less work (tests/specs/test_recompute.py checks it on the
    # estimators); plans give MoE layers the heaviest first, and solver bounds take HEAVIEST as the least memory.
    weight: int
    source: str  # where the option comes from (docs/formulas.md)


OPTIONS: tuple[RecomputeOption, ...] = (
    RecomputeOption("none", KEEPS_ALL, (), (), 0, "no recompute"),
    RecomputeOption("selective", KEEPS_ALL, ("core",), (ATTENTION_CORE,), 1,
                    "Korthikanti et al. 2022 §5, selective activation recomputation (docs/formulas.md §5)"),
    RecomputeOption("full", KEEPS_LAYER_INPUT, (), (LAYER_FORWARD,), 2,
                    "Chen et al. 2016, checkpointing every layer; Megatron --recompute-granularity full"),
)
OPTION_BY_NAME = {o.name: o for o in OPTIONS}
RECOMPUTE_MODES = tuple(o.name for o in OPTIONS)  # model order: lightest first
HEAVIEST_FIRST = tuple(o.name for o in sorted(OPTIONS, key=lambda o: -o.weight))
NO_RECOMPUTE = HEAVIEST_FIRST[-1]  # weight 0, keeps everything: the plan every layer starts from
HEAVIEST = HEAVIEST_FIRST[0]  # keeps the least and re-runs the most (bounds in solve/ rely on it)
RECOMPUTING = tuple(m for m in RECOMPUTE_MODES if m != NO_RECOMPUTE)


def recompute_option(name: str) -> RecomputeOption:
    return OPTION_BY_NAME[name]


@dataclass(frozen=True, init=False)
class StageRecompute:
    """How many of one (virtual) pipeline stage's layers run each recompute option, in RECOMPUTE_MODES order.
    Built by option name: StageRecompute(selective=7, full=1)."""

    counts: tuple[int, ...] = field(default=(0,) * len(OPTIONS))

    def __init__(self, **by_option: int):
        for name, value in by_option.items():
            one_of("recompute option", name, RECOMPUTE_MODES)
            non_negative_int(f"recompute.{name}", value)
        object.__setattr__(self, "counts", tuple(by_option.get(name, 0) for name in RECOMPUTE_MODES))

    @property
    def layers(self) -> int:
        return sum(self.counts)

    def count(self, mode: str) -> int:
        return self.counts[RECOMPUTE_MODES.index(mode)]

    def as_dict(self) -> dict[str, int]:
        return dict(zip(RECOMPUTE_MODES, self.counts))


@dataclass(frozen=True)
class RecomputePlan:
    """Either one option for every layer, or explicit per-stage counts (which grow into per-layer plans)."""

    mode: str = NO_RECOMPUTE
    stages: tuple[StageRecompute, ...] = ()

    def __post_init__(self):
        one_of("recompute", self.mode, RECOMPUTE_MODES + ("per-stage",))
        require((self.mode == "per-stage") == bool(self.stages), "recompute", self.mode,
                "per-stage plans need stage counts and uniform plans must not have them")

    @classmethod
    def uniform(cls, mode: str) -> "RecomputePlan":
        return cls(mode=mode)

    @property
    def is_uniform(self) -> bool:
        return self.mode != "per-stage"

    def for_stage(self, stage: int, layers: int) -> StageRecompute:
        """Counts for a (virtual) stage holding `layers` body layers."""
        if self.is_uniform:
            return StageRecompute(**{self.mode: layers})
        return self.stages[stage]

    def key(self) -> tuple:
        """An orderable identity (for deterministic tie-breaking)."""
        return (self.mode, tuple(s.counts for s in self.stages))

    def summary(self) -> str:
        if self.is_uniform:
            return self.mode
        totals = {m: sum(s.count(m) for s in self.stages) for m in RECOMPUTE_MODES}
        return "per-stage " + "/".join(f"{totals[m]}{m[0]}" for m in RECOMPUTE_MODES)

    def as_json(self):
        """The JSON `recompute` value: the mode string, or per-stage counts."""
        if self.is_uniform:
            return self.mode
        return {"stages": [{"stage": i, "layers": s.layers, **s.as_dict()} for i, s in enumerate(self.stages)]}
