"""One parallel strategy: degrees, batch split, sharding, schedule, layer partition and recompute plan."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from .fields import SpecError, non_negative_int, one_of, positive_int, require

RECOMPUTE_MODES = ("none", "selective", "full")
SCHEDULES = ("1f1b", "interleaved")


@dataclass(frozen=True)
class StageRecompute:
    """How many of one pipeline stage's layers keep activations, recompute selectively, or recompute fully."""

    none: int = 0
    selective: int = 0
    full: int = 0

    def __post_init__(self):
        for mode in RECOMPUTE_MODES:
            non_negative_int(f"recompute.{mode}", getattr(self, mode))

    @property
    def layers(self) -> int:
        return self.none + self.selective + self.full

    def count(self, mode: str) -> int:
        return getattr(self, mode)


@dataclass(frozen=True)
class RecomputePlan:
    """Either one mode for every layer, or explicit per-stage counts (which grow into per-layer plans)."""

    mode: str = "none"
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
        return (self.mode, tuple((s.none, s.selective, s.full) for s in self.stages))

    def summary(self) -> str:
        if self.is_uniform:
            return self.mode
        totals = {m: sum(s.count(m) for s in self.stages) for m in RECOMPUTE_MODES}
        return "per-stage " + "/".join(f"{totals[m]}{m[0]}" for m in RECOMPUTE_MODES)


@dataclass(frozen=True)
class Strategy:
    """Degrees multiply as dp*tp*pp*cp = devices; dp*mbs*mbn = global batch. ep/etp split the experts."""

    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1
    vpp: int = 1
    mbs: int = 1
    mbn: int = 1
    zero: int = 1  # 0 none, 1 optimizer states (Megatron distributed optimizer), 2 + gradients, 3 + parameters
    sp: bool = False
    schedule: str = "1f1b"
    recompute: RecomputePlan = field(default_factory=RecomputePlan)
    layers_per_stage: tuple[int, ...] = ()  # per virtual stage, in model order; () = the default partition

    def __post_init__(self):
        for name in ("dp", "tp", "pp", "cp", "ep", "etp", "vpp", "mbs", "mbn"):
            positive_int(name, getattr(self, name))
        require(self.zero in (0, 1, 2, 3), "zero", self.zero, "valid: 0, 1, 2, 3")
        one_of("schedule", self.schedule, SCHEDULES)
        require(self.schedule == "interleaved" or self.vpp == 1, "vpp", self.vpp, "vpp > 1 needs schedule=interleaved")
        require(not self.sp or self.tp > 1, "sp", self.sp, "sequence parallelism needs tp > 1")
        for i, n in enumerate(self.layers_per_stage):
            positive_int(f"layers_per_stage[{i}]", n)
        if self.layers_per_stage:
            require(len(self.layers_per_stage) == self.pp * self.vpp, "layers_per_stage", list(self.layers_per_stage),
                    f"expected pp*vpp = {self.pp * self.vpp} entries")
        if not self.recompute.is_uniform:
            require(len(self.recompute.stages) == self.pp * self.vpp, "recompute.stages", len(self.recompute.stages),
                    f"expected one entry per virtual stage (pp*vpp = {self.pp * self.vpp})")

    @classmethod
    def trusted(cls, **fields) -> "Strategy":
        """Build without re-validating: for strategies generated from an already validated search space, where the
        oracle and the solver create hundreds of thousands of them. Every field must be given."""
        strategy = object.__new__(cls)
        strategy.__dict__.update(fields)  # frozen: bypass the dataclass __setattr__ as object.__setattr__ would
        return strategy

    @property
    def devices(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def global_batch(self) -> int:
        return self.dp * self.mbs * self.mbn

    @property
    def virtual_stages(self) -> int:
        return self.pp * self.vpp

    def with_(self, **changes) -> "Strategy":
        """A copy with some fields changed, validated again."""
        return replace(self, **changes)

    def with_zero(self, zero: int) -> "Strategy":
        """The same strategy under another ZeRO stage (0-3); no other field depends on it, so it stays valid."""
        if zero not in (0, 1, 2, 3):
            raise SpecError(f"zero={zero!r} is not valid; valid: 0, 1, 2, 3")
        return Strategy.trusted(**{**self.__dict__, "zero": zero})

    def as_dict(self) -> dict:
        """The JSON `strategy` object (the recompute plan as a mode string or per-stage counts)."""
        recompute = self.recompute.mode if self.recompute.is_uniform else {
            "stages": [{"stage": i, "layers": s.layers, "none": s.none, "selective": s.selective, "full": s.full}
                       for i, s in enumerate(self.recompute.stages)]}
        out = {k: getattr(self, k) for k in ("dp", "tp", "pp", "cp", "ep", "etp", "vpp", "mbs", "mbn", "zero", "sp")}
        out.update(recompute=recompute, schedule=self.schedule)
        if self.layers_per_stage:
            out["layers_per_stage"] = list(self.layers_per_stage)
        return out

    def key(self) -> tuple:
        """A hashable identity used to deduplicate and order strategies deterministically."""
        return (self.tp, self.pp, self.cp, self.ep, self.etp, self.vpp, self.dp, self.mbs, self.mbn, self.zero,
                self.sp, self.schedule, self.recompute.key(), self.layers_per_stage)


__all__ = ["Strategy", "RecomputePlan", "StageRecompute", "RECOMPUTE_MODES", "SCHEDULES", "SpecError"]
