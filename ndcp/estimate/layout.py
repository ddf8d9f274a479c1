"""Pipeline layout: which body layers sit on which (virtual) stage, and how many micro-batches each holds in flight.

Virtual stage v (0 <= v < pp*vpp) runs on device stage v % pp as model chunk v // pp (Megatron's interleaved
placement); with vpp = 1 virtual and device stages coincide.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..specs.model import ModelSpec
from ..schedules import schedule_named
from ..specs.recompute import HEAVIEST_FIRST
from ..specs.strategy import RecomputePlan, StageRecompute, Strategy, default_partition


def in_flight(schedule: str, stage: int, pp: int, vpp: int, mbn: int) -> int:
    """Micro-batch chunks whose activations device stage `stage` holds at its peak (in units of one chunk), as the
    schedule runs them (ndcp/schedules)."""
    return schedule_named(schedule).in_flight(stage, pp, vpp, mbn)


@dataclass(frozen=True)
class StageLayout:
    """One device stage: its virtual chunks' layer ranges and its in-flight chunk count."""

    stage: int
    chunks: tuple[tuple[int, int], ...]  # (first layer, layer count) per chunk, model order
    in_flight_chunks: int

    @property
    def layers(self) -> int:
        return sum(n for _, n in self.chunks)

    @property
    def is_first(self) -> bool:
        return self.stage == 0


def partition(model: ModelSpec, strategy: Strategy) -> tuple[int, ...]:
    """Layers per virtual stage: the strategy's explicit partition, or the default one."""
    return strategy.layers_per_stage or default_partition(model.layers, strategy.virtual_stages)


@lru_cache(maxsize=16384)
def stage_chunks(model: ModelSpec, pp: int, vpp: int, layers_per_stage: tuple[int, ...] = ()
                 ) -> tuple[tuple[tuple[int, int], ...], ...]:
    """Per device stage: (first layer, layer count) of each of its virtual chunks, in model order."""
    counts = layers_per_stage or default_partition(model.layers, pp * vpp)
    starts = [0]
    for n in counts[:-1]:
        starts.append(starts[-1] + n)
    return tuple(tuple((starts[c * pp + s], counts[c * pp + s]) for c in range(vpp)) for s in range(pp))


def stage_layouts(model: ModelSpec, strategy: Strategy) -> tuple[StageLayout, ...]:
    """Per device stage: the layers it holds (all its chunks) and its in-flight chunks."""
    pp, vpp = strategy.pp, strategy.vpp
    chunks = stage_chunks(model, pp, vpp, strategy.layers_per_stage)
    return tuple(StageLayout(s, chunks[s], in_flight(strategy.schedule, s, pp, vpp, strategy.mbn)) for s in range(pp))


LAYER_KINDS = ("dense", "moe")


def kind_counts(model: ModelSpec, layout: StageLayout) -> dict[str, int]:
    """Body layers of each kind on one device stage."""
    moe = sum(_moe_layers_in(model, first, n) for first, n in layout.chunks)
    return {"dense": layout.layers - moe, "moe": moe}


@lru_cache(maxsize=65536)
def _moe_layers_in(model: ModelSpec, first: int, count: int) -> int:
    return sum(model.is_moe_layer(i) for i in range(first, first + count))


def mode_kind_counts(kinds: dict[str, int], plan: StageRecompute) -> dict[tuple[str, str], int]:
    """Assign one chunk's recompute counts to its layer kinds: MoE layers (the larger ones) take the heaviest
    recompute options first. Memory and time both read layers through this one rule."""
    remaining = {mode: plan.count(mode) for mode in HEAVIEST_FIRST}
    out = {}
    for kind in sorted(kinds, key=lambda k: k != "moe"):
        left = kinds[kind]
        for mode in remaining:
            take = min(left, remaining[mode])
            if take:
                out[(kind, mode)] = take
                remaining[mode] -= take
                left -= take
    return out


@lru_cache(maxsize=16384)
def _stage_mode_counts(model: ModelSpec, pp: int, vpp: int, layers_per_stage: tuple[int, ...],
                       recompute: RecomputePlan) -> tuple[tuple[tuple[tuple[str, str], int], ...], ...]:
    out = []
    for stage, chunks in enumerate(stage_chunks(model, pp, vpp, layers_per_stage)):
        counts: dict[tuple[str, str], int] = {}
        for chunk, (first, n) in enumerate(chunks):
            kinds = {"dense": n - _moe_layers_in(model, first, n), "moe": _moe_layers_in(model, first, n)}
            for key, count in mode_kind_counts(kinds, recompute.for_stage(chunk * pp + stage, n)).items():
                counts[key] = counts.get(key, 0) + count
        out.append(tuple(sorted(counts.items())))
    return tuple(out)


def stage_mode_counts(model: ModelSpec, strategy: Strategy) -> tuple[tuple[tuple[tuple[str, str], int], ...], ...]:
    """Per device stage: ((layer kind, recompute mode), layers) pairs over all its virtual chunks."""
    s = strategy
    return _stage_mode_counts(model, s.pp, s.vpp, s.layers_per_stage, s.recompute)
