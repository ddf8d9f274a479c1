"""Pipeline layout: which body layers sit on which (virtual) stage, and how many micro-batches each holds in flight.

Virtual stage v (0 <= v < pp*vpp) runs on device stage v % pp as model chunk v // pp (Megatron's interleaved
placement); with vpp = 1 virtual and device stages coincide.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..specs.model import ModelSpec
from ..schedules import schedule_named
from ..specs.recompute import HEAVIEST_FIRST, MODE_INDEX
from ..specs.pipeline_layout import megatron_layout
from ..specs.strategy import RecomputePlan, StageRecompute, Strategy, accounted_partition, default_partition


def in_flight(schedule: str, stage: int, pp: int, vpp: int, mbn: int) -> float:
    """Micro-batch chunks whose activations device stage `stage` holds at its peak (in units of one chunk), as the
    schedule runs them (ndcp/schedules)."""
    return schedule_named(schedule).in_flight(stage, pp, vpp, mbn)


@dataclass(frozen=True)
class StageLayout:
    """One device stage: its virtual chunks' layer ranges, its in-flight chunk count, and whether it holds the
    embedding and the output head (the schedule places them: Schedule.holds_ends)."""

    stage: int
    chunks: tuple[tuple[int, int], ...]  # (first layer, layer count) per chunk, model order
    in_flight_chunks: float
    holds_embedding: bool = False
    holds_head: bool = False

    @property
    def layers(self) -> int:
        return sum(n for _, n in self.chunks)

    @property
    def is_first(self) -> bool:
        return self.holds_embedding


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
    s = strategy
    return _stage_layouts(model, s.pp, s.vpp, s.layers_per_stage, s.schedule, s.mbn)


@lru_cache(maxsize=16384)
def _stage_layouts(model: ModelSpec, pp: int, vpp: int, layers_per_stage: tuple[int, ...], schedule_name: str,
                   mbn: int) -> tuple[StageLayout, ...]:
    chunks = stage_chunks(model, pp, vpp, layers_per_stage)
    schedule = schedule_named(schedule_name)
    return tuple(StageLayout(s, chunks[s], schedule.in_flight(s, pp, vpp, mbn), *schedule.holds_ends(s, pp))
                 for s in range(pp))


LAYER_KINDS = ("dense", "moe")


def stage_kind_counts(model: ModelSpec, pp: int, vpp: int, layers_per_stage: tuple[int, ...] = ()
                      ) -> tuple[dict[str, int], ...]:
    """Body layers of each kind on each device stage (all its chunks)."""
    return tuple(chunks_kind_counts(model, chunks) for chunks in stage_chunks(model, pp, vpp, layers_per_stage))


def chunks_kind_counts(model: ModelSpec, chunks: tuple[tuple[int, int], ...]) -> dict[str, int]:
    """Body layers of each kind in a device stage's chunks ((first layer, layer count) each, StageLayout.chunks)."""
    moe = sum(_moe_layers_in(model, first, n) for first, n in chunks)
    return {"dense": sum(n for _, n in chunks) - moe, "moe": moe}


@lru_cache(maxsize=65536)
def _moe_layers_in(model: ModelSpec, first: int, count: int) -> int:
    return sum(model.is_moe_layer(i) for i in range(first, first + count))


def chunk_kinds(model: ModelSpec, counts: tuple[int, ...]) -> list[dict[str, int]]:
    """Body layers of each kind in each virtual stage of a partition (layers per virtual stage, model order)."""
    out, first = [], 0
    for n in counts:
        moe = _moe_layers_in(model, first, n)
        out.append({"dense": n - moe, "moe": moe})
        first += n
    return out


_HEAVIEST_FIRST_AT = tuple((mode, MODE_INDEX[mode]) for mode in HEAVIEST_FIRST)  # each option and its place in counts


def mode_kind_counts(kinds: dict[str, int], plan: StageRecompute) -> dict[tuple[str, str], int]:
    """Assign one chunk's recompute counts to its layer kinds: MoE layers (the larger ones) take the heaviest
    recompute options first. Memory and time both read layers through this one rule."""
    counts = plan.counts
    remaining = {mode: n for mode, i in _HEAVIEST_FIRST_AT if (n := counts[i])}
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


def split_kind(model: ModelSpec, strategy: Strategy) -> str:
    """How the layers are split: "even", "accounted" (Megatron's embedding+loss-accounted default) or "uneven"."""
    counts = partition(model, strategy)
    if len(set(counts)) == 1:
        return "even"
    return "accounted" if counts == accounted_partition(model.layers, strategy.virtual_stages) else "uneven"


def layout_document(model: ModelSpec, strategy: Strategy) -> dict:
    """The JSON `strategy.layout`: decoder layers per device stage and chunk, where the embedding, the loss and the MTP
    modules sit ([device stage, chunk]), how the split was made, and Megatron's notation for it."""
    pp, vpp = strategy.pp, strategy.vpp
    counts = partition(model, strategy)
    placement = schedule_named(strategy.schedule)  # DualPipe-V puts the loss on device stage 0
    embedding = next(s for s in range(pp) if placement.holds_ends(s, pp)[0])
    loss = next(s for s in range(pp) if placement.holds_ends(s, pp)[1])
    out = {"layers_per_stage": [[counts[c * pp + s] for c in range(vpp)] for s in range(pp)],
           "embedding": [embedding, 0], "loss": [loss, vpp - 1], "split": split_kind(model, strategy),
           "megatron": megatron_layout(counts, model.mtp_depth)}
    if model.mtp_depth:
        out["mtp"] = [loss, vpp - 1]
    return out
