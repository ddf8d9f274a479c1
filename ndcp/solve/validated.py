"""The validated alternative (issue #35; docs/confidence.md §3): when the winner rests on a feature no measured run
exercises, the best strategy of the space restricted to features measured runs do exercise, found and proven by the
same search method (a second objective over the restricted space).

`evidenced_options` is the one place feature names (estimate/evidence.py plan_features) map to SpaceOptions
restrictions: ZeRO stages (zero-0/1/2; fsdp for ZeRO-3, hsdp for its hybrid sharding), recompute option families,
context parallelism and its communication types, pipeline schedules, optimizer offload. The other features (trainer,
device generation, dense or MoE, scan mixers, FP8 recipe, MoE dispatcher, overlaps, torch.compile, optimizer state
dtype) are the run's or the model's: no strategy avoids them, so a winner lacking evidence only there has no
alternative.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..estimate.evidence import EVIDENCED_FEATURES, plan_features
from ..schedules import SCHEDULES
from ..space import SearchSpace, SpaceOptions
from ..specs.strategy import CP_COMM_TYPES
from .margins import mode_families
from .result import SearchResult
from .search import SearchOptions, search

ZERO_FEATURES = {0: "zero-0", 1: "zero-1", 2: "zero-2", 3: "fsdp"}  # the ZeRO-3 feature without HSDP: fsdp
HSDP_FEATURE = "hsdp"
CP_FEATURE = "context parallel"
OPTIMIZER_OFFLOAD_FEATURE = "optimizer offload"


def cp_comm_feature(cp_comm: str) -> str:
    return f"cp comm {cp_comm}"


def evidenced_options(options: SpaceOptions, evidenced: frozenset[str] = EVIDENCED_FEATURES) -> SpaceOptions | None:
    """`options` restricted to the strategies whose every searchable feature is in `evidenced`; None when no
    recompute option or ZeRO stage is left."""
    families = dict(mode_families(tuple(options.recompute_modes)))
    modes = tuple(m for m in options.recompute_modes
                  if all(family in evidenced for family, of in families.items() if m in of))
    zeros = tuple(z for z in options.zero_stages if ZERO_FEATURES[z] in evidenced)
    if not modes or not zeros:
        return None
    bounds = dict(options.max)
    cp_comms = tuple(c for c in options.cp_comms if cp_comm_feature(c) in evidenced)
    if CP_FEATURE not in evidenced or not cp_comms:
        bounds["cp"], cp_comms = 1, options.cp_comms
    schedules = tuple(s for s in options.schedules if s in evidenced)
    if not schedules:
        bounds["pp"], schedules = 1, options.schedules
    return replace(options, recompute_modes=modes, zero_stages=zeros, max=tuple(sorted(bounds.items())),
                   cp_comms=cp_comms, schedules=schedules,
                   hsdp=options.hsdp if HSDP_FEATURE in evidenced else (False,),
                   optimizer_offloads=(options.optimizer_offloads if OPTIMIZER_OFFLOAD_FEATURE in evidenced
                                       else (False,)))


def searchable(features: tuple[str, ...], options: SpaceOptions) -> tuple[str, ...]:
    """Those of `features` a strategy of the space can avoid (the ones evidenced_options restricts)."""
    names = {*ZERO_FEATURES.values(), HSDP_FEATURE, CP_FEATURE, OPTIMIZER_OFFLOAD_FEATURE, *SCHEDULES,
             *(cp_comm_feature(c) for c in CP_COMM_TYPES),
             *(family for family, _ in mode_families(tuple(options.recompute_modes)))}
    return tuple(f for f in features if f in names)


@dataclass(frozen=True)
class ValidatedAlternative:
    """The winner's features without evidence and, when some strategy could avoid them, the best strategy resting
    only on evidenced ones (its own search's result)."""

    missing: tuple[str, ...]  # the winner's features no measured run exercises
    result: SearchResult | None  # the restricted search (None: only the run's own features lack evidence)


def winner_missing(space: SearchSpace, result: SearchResult) -> tuple[str, ...]:
    """The winner's features no measured run exercises (none without a winner)."""
    if result.best is None:
        return ()
    features = plan_features(space.model, result.best.strategy, space.run, space.cluster.device.name)
    return tuple(sorted(features - EVIDENCED_FEATURES))


def validated_alternative(space: SearchSpace, method: str, result: SearchResult, options: SearchOptions
                          ) -> ValidatedAlternative | None:
    """None when the winner is validated (or there is none); else its missing features and the best strategy of
    the space restricted to evidenced features (the best one only, proven by `method` as the winner was)."""
    missing = winner_missing(space, result)
    if not missing:
        return None
    restricted = evidenced_options(space.options)
    if restricted is None or not searchable(missing, space.options):  # the run's or the model's own features
        return ValidatedAlternative(missing, None)
    found = search(replace(space, options=restricted), method, replace(options, top=1))
    return ValidatedAlternative(missing, found)


__all__ = ["evidenced_options", "validated_alternative", "ValidatedAlternative", "winner_missing", "ZERO_FEATURES",
           "HSDP_FEATURE", "CP_FEATURE", "OPTIMIZER_OFFLOAD_FEATURE", "cp_comm_feature", "searchable"]
