"""The confidence margin in the linear memory bounds (docs/confidence.md §2; estimate/confidence.py): the bytes of the
capacity a plan's peak upper edge keeps free at the run's confidence, one term added to a plan's memory wherever a
model or bound compares it with the capacity (memory + margin <= capacity: the peak's upper edge within it).

A plan's margin depends on the features it rests on (estimate/evidence.py plan_features): those its batch item and
ZeRO stage fix, and the recompute option families its layers run.
- The uniform model knows every point's features: its margin is exact per point (`point_margin`).
- The per-layer plan model decides the families itself: per ZeRO stage it holds the margin of a plan running exactly
  each set of the families searched (`PlanMargins`), one boolean per family telling whether any layer runs it; the
  model is exact (one entry, whatever the families, when they all give the same margin).
- The memory-aware item bounds take the least margin of any plan of the item (`least_margin`): still lower bounds.
At confidence 0 every margin is 0 and the models are today's, term for term.
"""
from __future__ import annotations

from functools import lru_cache
from itertools import combinations
from typing import NamedTuple

from ..estimate.confidence import features_high, margin_bytes
from ..estimate.evidence import plan_features, recompute_families
from ..space import Layout, SearchSpace
from ..specs.recompute import NO_RECOMPUTE, RecomputePlan
from ..specs.strategy import Strategy


def space_capacity(space: SearchSpace) -> int:
    """The bytes a stage may use in this space (the run's cap and headroom applied)."""
    return space.run.capacity(space.cluster.device.memory_bytes)


def point_margin(space: SearchSpace, strategy: Strategy) -> int:
    """The margin of one whole plan (its features all known)."""
    features = plan_features(space.model, strategy, space.run, space.cluster.device.name)
    return margin_bytes(space_capacity(space), features_high(features, space.run.confidence))


@lru_cache(maxsize=65536)
def layout_point_margin(space: SearchSpace, layout: Layout, zero: int, sp: bool, mode: str) -> int:
    """point_margin of the uniform plans of `layout` (ZeRO stage, SP setting, recompute option): the same for every
    micro-batch size and count (evidence.plan_features reads neither), so computed once per layout."""
    return point_margin(space, layout.strategy(1, 1, zero, sp, mode))


class FamilyMargin(NamedTuple):
    """A plan running exactly these recompute option families has the band factor `memory_high` on its peak
    (families empty: whatever families it runs); under a capacity it keeps `margin(capacity)` bytes free."""

    families: frozenset[str]
    memory_high: float

    def margin(self, capacity_bytes: int) -> int:
        return margin_bytes(capacity_bytes, self.memory_high)


class PlanMargins(NamedTuple):
    """The margins of one plan sub-model: the modes of each recompute family searched, and per ZeRO stage of the
    sub-model its FamilyMargin entries (entries of factor 1 left out: none at all at confidence 0). The sub-model is
    solved under a capacity (the run's, or a frontier's cap), which turns each factor into bytes."""

    families: tuple[tuple[str, tuple[str, ...]], ...]  # (family, its modes), families sorted
    per_zero: tuple[tuple[FamilyMargin, ...], ...]

    @property
    def any(self) -> bool:
        return any(self.per_zero)

    @property
    def by_family(self) -> bool:
        """Whether some entry holds for one set of families only (the model then needs the families' booleans)."""
        return any(e.families for entries in self.per_zero for e in entries)


NO_MARGINS = PlanMargins((), ())  # a sub-model at confidence 0, or built by hand


@lru_cache(maxsize=256)
def mode_families(modes: tuple[str, ...]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The recompute option families of `modes` (evidence.recompute_families), each with its modes."""
    out: dict[str, list[str]] = {}
    for mode in modes:
        for family in recompute_families(Strategy(recompute=RecomputePlan.uniform(mode))):
            out.setdefault(family, []).append(mode)
    return tuple((family, tuple(out[family])) for family in sorted(out))


def plan_margins(space: SearchSpace, base: Strategy, modes: tuple[str, ...], zeros: tuple[int, ...]) -> PlanMargins:
    """The PlanMargins of a sub-model of `base` (its recompute left out) deciding between `modes` and `zeros`."""
    families = mode_families(tuple(modes))
    if not space.run.confidence:
        return PlanMargins(families, tuple(() for _ in zeros))
    run, device = space.run, space.cluster.device.name
    own = frozenset(recompute_families(base))
    per_zero = tuple(_entries(plan_features(space.model, base.with_zero(z), run, device) - own,
                              tuple(f for f, _ in families), run.confidence) for z in zeros)
    return PlanMargins(families, per_zero)


@lru_cache(maxsize=4096)
def _every_set(fixed: frozenset[str], families: tuple[str, ...], confidence: float) -> tuple[FamilyMargin, ...]:
    """The band factor of a plan running exactly each non-empty set of `families` beside the `fixed` features."""
    return tuple(FamilyMargin(chosen, features_high(fixed | chosen, confidence))
                 for size in range(1, len(families) + 1) for chosen in map(frozenset, combinations(families, size)))


@lru_cache(maxsize=4096)
def _entries(fixed: frozenset[str], families: tuple[str, ...], confidence: float) -> tuple[FamilyMargin, ...]:
    """_every_set's entries above factor 1, or one entry for any families when every set has the same factor."""
    every = _every_set(fixed, families, confidence)
    if len({e.memory_high for e in every}) == 1:
        return (FamilyMargin(frozenset(), every[0].memory_high),) if every[0].memory_high > 1 else ()
    return tuple(e for e in every if e.memory_high > 1)


def least_margin(space: SearchSpace, base: Strategy, modes: tuple[str, ...], zeros) -> int:
    """The least margin of any plan of `base` under `modes` and one of `zeros` (None: every ZeRO stage searched)."""
    if not space.run.confidence:
        return 0
    zeros = [z for z in zeros if z is not None] or list(space.inner_choices(base.tp)[0])
    return min(least_margins(space, base, modes, zeros).values())


def least_margins(space: SearchSpace, base: Strategy, modes: tuple[str, ...], zeros) -> dict[int, int]:
    """least_margin of each ZeRO stage of `zeros` alone (the terms they share computed once)."""
    run = space.run
    if not run.confidence:
        return dict.fromkeys(zeros, 0)
    device = space.cluster.device.name
    own = frozenset(recompute_families(base))
    families = tuple(f for f, _ in mode_families(tuple(modes)))
    capacity = space_capacity(space)
    return {z: _least_set_margin(plan_features(space.model, base.with_zero(z), run, device) - own, families,
                                 run.confidence, capacity) for z in zeros}


def layout_margins(space: SearchSpace, layout: Layout, sp: bool, zero: int, modes: tuple[str, ...], zeros: tuple
                   ) -> dict:
    """least_margins of every item of `layout` under SP setting `sp` (its base: no recompute, ZeRO stage `zero`), per
    ZeRO stage of `zeros`, and under None among them least_margin over every ZeRO stage searched. A plan's features
    never depend on its micro-batch size or count (evidence.plan_features), so the items of one layout share them:
    computed once per layout (a cached dict: callers must not change it)."""
    return _layout_margins(space, layout, sp, zero, tuple(modes), tuple(zeros))


@lru_cache(maxsize=16384)
def _layout_margins(space: SearchSpace, layout: Layout, sp: bool, zero: int, modes: tuple[str, ...], zeros: tuple
                    ) -> dict:
    base = layout.strategy(1, 1, zero, sp, NO_RECOMPUTE)
    out = least_margins(space, base, modes, [z for z in zeros if z is not None])
    if None in zeros:
        out[None] = least_margin(space, base, modes, (None,))
    return out


@lru_cache(maxsize=4096)
def _least_set_margin(fixed: frozenset[str], families: tuple[str, ...], confidence: float, capacity: int) -> int:
    """The least margin under `capacity` of a plan running any non-empty set of `families` beside `fixed` (the
    bounds ask it for a few feature sets, many thousand times)."""
    return min(e.margin(capacity) for e in _every_set(fixed, families, confidence))


__all__ = ["point_margin", "layout_point_margin", "PlanMargins", "FamilyMargin", "plan_margins", "least_margin",
           "least_margins", "layout_margins", "mode_families", "NO_MARGINS", "space_capacity"]
