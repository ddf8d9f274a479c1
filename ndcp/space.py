"""The declared strategy space: degree domains and named validity rules, shared by the oracle and the CP-SAT model.

The space is walked in the reference planner's order (docs/reference-planner.md §2.2): TP -> PP -> CP -> MBS -> EP -> ETP ->
VPP, then the inner choices ZeRO x SP x recompute, which are independent of each other. A refused value is counted
once under its rule's name at the loop level where it is refused.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterator

from .rules import (Problem, first_refusal, optimizer_offload_zero, recompute_option_refusal, sp_allowed,
                    trainer_zero_stages)
from .schedules import SCHEDULES, default_schedule, schedule_named
from .specs.device import ClusterSpec
from .specs.fields import SpecError, cached_hash, divisors, state_without_hash
from .specs.model import ModelSpec
from .specs.run import RunSpec
from .specs.strategy import CP_COMM_TYPES, RECOMPUTE_MODES, RecomputePlan, Strategy
from .trainers import trainer_named

_UNIFORM = {mode: RecomputePlan.uniform(mode) for mode in RECOMPUTE_MODES}
DIMENSIONS = ("tp", "pp", "cp", "dp", "ep", "etp", "vpp", "mbs", "mbn", "zero")
DEFAULT_MAX_VPP = 8
# Schedules searched by default: those every supported trainer runs (Megatron-LM and torchtitan). Zero-bubble and
# DualPipe need a trainer that runs them (Qi et al.'s fork, DeepSeek's DualPipe, torchtitan's DualPipeV): searched
# when asked (SpaceOptions.schedules), jointly with everything else.
DEFAULT_SCHEDULES = ("1f1b", "interleaved")

@dataclass(frozen=True)
class SpaceOptions:
    """What the user pins or bounds, and which inner choices are searched."""

    __hash__ = cached_hash  # spaces, layouts and their options key the bounds' caches: hashed once
    __getstate__ = state_without_hash

    fix: tuple[tuple[str, int], ...] = ()
    max: tuple[tuple[str, int], ...] = ()
    recompute_modes: tuple[str, ...] = RECOMPUTE_MODES
    zero_stages: tuple[int, ...] = (0, 1, 2, 3)
    sp_choices: tuple[bool, ...] = (False, True)
    tp_cp_bound: int = 0  # 0 = tp within a scale-up domain (ClusterSpec.domain_ranks), cp unbounded
    max_offset: int = 0  # per-layer plans: how far a stage's layer count may move from the default partition
    # CP communication types searched when cp > 1 (the rules still apply). Default the p2p ring alone, as the CLI:
    # each extra type adds the cp > 1 candidates again (measured 2-3x the search time, `ndcp search --cp-comm`).
    cp_comms: tuple[str, ...] = ("p2p",)
    schedules: tuple[str, ...] = DEFAULT_SCHEDULES  # pipeline schedules searched (each where its rules allow)
    # optimizer offload settings searched (True: the optimizer on the host, where the trainer runs it). Default off:
    # it doubles the batch items, and it pays only when the device memory binds.
    optimizer_offloads: tuple[bool, ...] = (False,)
    # HSDP settings searched (True: ZeRO-3 sharded over the data-parallel ranks of one scale-up domain, replicated
    # across domains, Strategy.dp_shard; docs/formulas.md §7.3; `ndcp search --hsdp`). Default off: plain FSDP only
    # (no measured run validates HSDP's own terms).
    hsdp: tuple[bool, ...] = (False,)

    def __post_init__(self):
        for name, value in self.fix + self.max:
            if name not in DIMENSIONS + ("sp",):
                raise SpecError(f"{name}: not a searchable dimension; valid: {', '.join(DIMENSIONS + ('sp',))}")
            if value < 0 or (name != "zero" and value < 1):
                raise SpecError(f"{name}={value} is not valid; expected a positive integer")
        if self.max_offset < 0:
            raise SpecError(f"max_offset={self.max_offset} is not valid; expected an integer >= 0")
        if not self.cp_comms or any(c not in CP_COMM_TYPES for c in self.cp_comms):
            raise SpecError(f"cp_comm={','.join(self.cp_comms)} is not valid; valid: {', '.join(CP_COMM_TYPES)}")
        if not self.optimizer_offloads or any(not isinstance(x, bool) for x in self.optimizer_offloads):
            raise SpecError(f"optimizer_offloads={self.optimizer_offloads} is not valid; expected true and/or false")
        if not self.hsdp or any(not isinstance(x, bool) for x in self.hsdp):
            raise SpecError(f"hsdp={self.hsdp} is not valid; expected true and/or false")
        if not self.schedules or any(x not in SCHEDULES for x in self.schedules):
            raise SpecError(f"schedule={','.join(self.schedules)} is not valid; valid: {', '.join(SCHEDULES)}")

    def fixed(self, name: str) -> int | None:
        return dict(self.fix).get(name)

    def bound(self, name: str) -> int | None:
        return dict(self.max).get(name)


@dataclass(frozen=True)
class Layout:
    """The degrees that decide where layers and ranks go; dp is what is left of the GPUs."""

    __hash__ = cached_hash
    __getstate__ = state_without_hash

    tp: int
    pp: int
    cp: int
    dp: int
    ep: int
    etp: int
    vpp: int
    cp_comm: str = "p2p"  # searched when cp > 1 (walk: the cp_comm level's rules)
    schedule: str = ""  # the pipeline schedule; "" = the default for vpp
    optimizer_offload: bool = False  # optimizer states and step on the host (searched when asked: SpaceOptions)
    dp_shard: int = 0  # HSDP's shard ranks (Strategy.dp_shard; 0: plain ZeRO; searched when asked: SpaceOptions)

    def __post_init__(self):
        if not self.schedule:
            object.__setattr__(self, "schedule", default_schedule(self.vpp))

    def strategy(self, mbs: int, mbn: int, zero: int, sp: bool, recompute: str) -> Strategy:
        """The strategy at this layout (the space's rules already hold, so it is built without re-validation)."""
        return Strategy.trusted(dp=self.dp, tp=self.tp, pp=self.pp, cp=self.cp, ep=self.ep, etp=self.etp,
                                vpp=self.vpp, mbs=mbs, mbn=mbn, zero=zero, sp=sp,
                                schedule=self.schedule, recompute=_UNIFORM[recompute],
                                layers_per_stage=(), cp_comm=self.cp_comm, optimizer_offload=self.optimizer_offload,
                                dp_shard=self.dp_shard)


@dataclass
class SpaceWalk:
    """The result of walking the space: valid (layout, mbs, mbn) triples and refusal counts by rule."""

    batches: list[tuple[Layout, int, int]] = field(default_factory=list)
    refused: Counter = field(default_factory=Counter)
    complete: bool = True  # False: the walk stopped early (SearchSpace.walk's `expired`)


@dataclass(frozen=True)
class SearchSpace:
    __hash__ = cached_hash
    __getstate__ = state_without_hash

    model: ModelSpec
    cluster: ClusterSpec
    run: RunSpec
    options: SpaceOptions = SpaceOptions()

    def partition_offset(self, layout: Layout) -> int:
        """How far a stage's layer count may move from the default partition in per-layer plans: uneven partitions
        are searched (within options.max_offset of each device stage's default count; with interleaving each device
        stage's layers split evenly over its chunks, specs.pipeline_layout.split_device_stages) for single-kind models
        (0 = the partition is fixed)."""
        model = self.model
        single_kind = model.moe is None or model.dense_layers == 0
        # a mirrored schedule's stage also holds the mirror stage's parameters: its partition stays the default
        return (self.options.max_offset if single_kind and layout.pp > 1
                and not schedule_named(layout.schedule).mirrored else 0)

    # -- domains ------------------------------------------------------------------------------------------------
    def _domain(self, name: str, values, refused: Counter, weight: int = 1) -> list[int]:
        """Apply --fix/--max to one dimension's candidate values, counting what they remove."""
        fixed, bound = self.options.fixed(name), self.options.bound(name)
        kept = []
        for v in values:
            if fixed is not None and v != fixed:
                refused["fixed"] += weight
            elif bound is not None and v > bound:
                refused["bounded"] += weight
            else:
                kept.append(v)
        return kept

    def inner_choices(self, tp: int) -> tuple[list[int], list[bool], list[str]]:
        """ZeRO stages, SP settings (SP only with tp > 1) and recompute modes searched for a layout (they depend on
        tp only through SP: computed once per space for tp = 1 and tp > 1, as the walk asks for every item)."""
        return self._inner_choices[tp > 1]

    def zero_stages(self, layout: Layout) -> list[int]:
        """The searched ZeRO stages of a layout: inner_choices' own, less those the trainer runs only without
        pipeline parallelism when the layout has stages (rule `trainer_zero_pipeline`), those the trainer offloads the
        optimizer under when the layout offloads it (rule `optimizer_offload`), ZeRO-3 alone under HSDP (rule
        `dp_shard`)."""
        zeros = self._zeros_for(layout.tp, layout.pp)
        if layout.dp_shard:
            return [z for z in zeros if z == 3]
        return [z for z in zeros if z in self._offload_zeros] if layout.optimizer_offload else zeros

    def _zeros_for(self, tp: int, pp: int) -> list[int]:
        """inner_choices' ZeRO stages, less those the trainer runs only without pipeline stages when pp > 1 (rule
        `trainer_zero_pipeline`: Megatron FSDP)."""
        zeros = self.inner_choices(tp)[0]
        if pp == 1:
            return zeros
        staged_out = trainer_named(self.run.trainer).zero_without_pipeline
        return [z for z in zeros if z not in staged_out]

    @cached_property
    def _offload_zeros(self) -> tuple[int, ...]:
        return optimizer_offload_zero(self.run)

    @cached_property
    def _inner_choices(self) -> dict[bool, tuple[list[int], list[bool], list[str]]]:
        trainer = trainer_zero_stages(self.run)  # the stages the run's trainer runs (ndcp/trainers profiles)
        zero = [z for z in self.options.zero_stages if self._allowed("zero", z) and z in trainer]
        sp_fixed = self.options.fixed("sp")
        return {split: (zero, [s for s in self.options.sp_choices
                               if sp_allowed(s, 2 if split else 1) and (sp_fixed is None or int(s) == sp_fixed)],
                        self._recompute_modes)
                for split in (False, True)}

    @cached_property
    def _recompute_modes(self) -> list[str]:
        """The searched recompute options that this model and trainer can run (rules.recompute_option_refusal)."""
        return [m for m in self.options.recompute_modes
                if recompute_option_refusal(self.model, self.run, m) is None]

    def _allowed(self, name: str, value: int) -> bool:
        fixed, bound = self.options.fixed(name), self.options.bound(name)
        return (fixed is None or value == fixed) and (bound is None or value <= bound)

    def walk(self, expired=None) -> SpaceWalk:
        """Every valid (layout, mbs, mbn), in the reference planner's loop order, with refusals counted by rule
        (ndcp.rules: each rule applied at the level where the degrees it reads are chosen) or by restriction.
        `expired()`, when given, is asked before each (tp, pp, cp) and stops the walk when true: the walk so far,
        marked incomplete (a search's time limit; DeepSeek-V3 on 16,384 GPUs walks for about a second)."""
        m, run, n = self.model, self.run, self.cluster.count
        problem = Problem(m, self.cluster, run)
        out = SpaceWalk()
        refused = out.refused
        domain = self.cluster.domain_ranks
        for tp in self._domain("tp", divisors(n), refused):
            degrees = {"tp": tp}
            if self._refused(problem, "tp", degrees, refused):
                continue
            if not all(self.inner_choices(tp)):
                refused["sp_tp"] += 1  # e.g. only sp=on searched, which needs tp > 1
                continue
            if tp > (self.options.tp_cp_bound or domain):
                refused["tp_cp_node"] += 1
                continue
            for pp in self._domain("pp", divisors(n // tp), refused):
                if self._refused(problem, "pp", {**degrees, "pp": pp}, refused):
                    continue
                if not self._zeros_for(tp, pp):  # every searched ZeRO stage needs pp = 1 under this trainer
                    refused["trainer_zero_pipeline"] += 1
                    continue
                for cp in self._domain("cp", divisors(n // (tp * pp)), refused):
                    if self._refused(problem, "cp", {**degrees, "pp": pp, "cp": cp}, refused):
                        continue
                    if self.options.tp_cp_bound and tp * cp > self.options.tp_cp_bound:
                        refused["tp_cp_node"] += 1
                        continue
                    comms = self._cp_comms(problem, {**degrees, "pp": pp, "cp": cp}, refused)
                    dp = n // (tp * pp * cp)
                    if not self._allowed("dp", dp):
                        refused["fixed" if self.options.fixed("dp") is not None else "bounded"] += 1
                        continue
                    known = {"tp": tp, "pp": pp, "cp": cp, "dp": dp}
                    if self._refused(problem, "dp", known, refused):
                        continue
                    if expired is not None and expired():
                        out.complete = False
                        return out
                    self._walk_batch(out, problem, known, comms)
        return out

    @staticmethod
    def _refused(problem: Problem, level: str, degrees: dict, refused: Counter) -> bool:
        refusal = first_refusal(problem, level, degrees)
        if refusal is not None:
            refused[refusal.rule] += 1
        return refusal is not None

    def _cp_comms(self, problem: Problem, degrees: dict, refused: Counter) -> list[str]:
        """The CP communication types searched for (tp, cp): p2p alone without CP, else each the cp_comm rules
        accept (each refusal counted once per (tp, pp, cp), as if checked there)."""
        if degrees["cp"] == 1:
            return ["p2p"]
        return [c for c in self.options.cp_comms
                if not self._refused(problem, "cp_comm", {**degrees, "cp_comm": c}, refused)]

    def _walk_batch(self, out: SpaceWalk, problem: Problem, known: dict, comms=("p2p",)) -> None:
        m, refused = self.model, out.refused
        tp, pp, cp, dp = known["tp"], known["pp"], known["cp"], known["dp"]
        # ep ranges over divisors of the routed experts and etp over divisors of tp (rules ep_experts, etp_tp). The
        # ep/etp levels' rules read no batch split and the vpp level's no expert degree, so each verdict is computed
        # once (per layout, per mbs) and counted wherever the loops meet it, as if checked there.
        eps = divisors(m.moe.experts) if m.moe else [1]
        etps = divisors(tp) if m.moe else [1]
        ep_refusal = {ep: first_refusal(problem, "ep", {**known, "ep": ep}) for ep in eps}
        etp_refusal = {(ep, etp): first_refusal(problem, "etp", {**known, "ep": ep, "etp": etp})
                       for ep in eps for etp in etps}  # ep_ranks: folded onto the stage's tp*cp*dp ranks
        layouts: dict[tuple, Layout] = {}
        offloads = self._optimizer_offloads(tp, pp, refused)
        shards = self._hsdp_shards(tp, pp, cp, dp, refused)
        for mbs in self._domain("mbs", divisors(self.run.global_batch // dp), refused):
            mbn = self.run.global_batch // (dp * mbs)
            if not self._allowed("mbn", mbn):
                refused["fixed" if self.options.fixed("mbn") is not None else "bounded"] += 1
                continue
            batch = {**known, "mbs": mbs, "mbn": mbn}
            if self._refused(problem, "mbs", batch, refused):
                continue
            # per vpp: each searched schedule that runs it, with its refusal (rule `schedule`, ndcp/schedules)
            vpp_refusal = {vpp: [(name, first_refusal(problem, "vpp", {**batch, "vpp": vpp, "schedule": name}))
                                 for name in self.options.schedules if SCHEDULES[name].accepts_vpp(vpp)]
                           for vpp in range(1, DEFAULT_MAX_VPP + 1)}
            for ep in self._domain("ep", eps, refused):
                if ep_refusal[ep] is not None:
                    refused[ep_refusal[ep].rule] += 1
                    continue
                for etp in self._domain("etp", etps, refused):
                    if etp_refusal[ep, etp] is not None:
                        refused[etp_refusal[ep, etp].rule] += 1
                        continue
                    for vpp in self._domain("vpp", range(1, DEFAULT_MAX_VPP + 1), refused):
                        if not vpp_refusal[vpp]:
                            refused["schedule"] += 1  # no searched schedule runs vpp chunks
                        for schedule, refusal in vpp_refusal[vpp]:
                            if refusal is not None:
                                refused[refusal.rule] += 1
                                continue
                            for cp_comm in comms:
                                for offload, shard in ((o, s) for o in offloads for s in shards
                                                       if not (o and s)):  # HSDP is ZeRO-3: no optimizer offload
                                    # one Layout per key across the mbs values
                                    key = (ep, etp, vpp, cp_comm, schedule, offload, shard)
                                    if key not in layouts:
                                        layouts[key] = Layout(tp, pp, cp, dp, ep, etp, vpp, cp_comm, schedule,
                                                              offload, shard)
                                    out.batches.append((layouts[key], mbs, mbn))

    def _optimizer_offloads(self, tp: int, pp: int, refused: Counter) -> list[bool]:
        """The optimizer offload settings searched: offload where the trainer runs it under a searched ZeRO stage
        (rule `optimizer_offload`; refused once per (tp, pp, cp) otherwise)."""
        out = []
        for offload in self.options.optimizer_offloads:
            if offload and not set(self._offload_zeros) & set(self._zeros_for(tp, pp)):
                refused["optimizer_offload"] += 1
            else:
                out.append(offload)
        return out

    def _hsdp_shards(self, tp: int, pp: int, cp: int, dp: int, refused: Counter) -> list[int]:
        """The dp_shard values searched: 0 (plain ZeRO) and, when asked, HSDP over the data-parallel ranks of one
        scale-up domain (its ranks / (tp x cp), where it divides dp and leaves more than one replica), on dense models
        under a trainer that runs ZeRO-3 and HSDP (rule `dp_shard`; refused once per (tp, pp, cp) otherwise)."""
        out = [0] if False in self.options.hsdp else []
        if True in self.options.hsdp:
            shard = self.cluster.domain_ranks // (tp * cp)
            if (self.model.moe is None and trainer_named(self.run.trainer).hsdp and 3 in self._zeros_for(tp, pp)
                    and 1 <= shard < dp and dp % shard == 0):
                out.append(shard)
            else:
                refused["dp_shard"] += 1
        return out

    def candidates(self, walk: SpaceWalk | None = None) -> Iterator[Strategy]:
        """Every valid strategy: each (layout, mbs, mbn) times the inner ZeRO x SP x recompute choices."""
        for layout, mbs, mbn in (walk or self.walk()).batches:
            _, sps, modes = self.inner_choices(layout.tp)
            for zero in self.zero_stages(layout):
                for sp in sps:
                    for mode in modes:
                        yield layout.strategy(mbs, mbn, zero, sp, mode)

    def size(self, walk: SpaceWalk) -> int:
        """The number of valid strategies: each batch item times its inner choices (which depend on the layout only
        through tp > 1, pp > 1, optimizer offload and HSDP, so items are counted by those four)."""
        counts, layouts = Counter(), {}
        for layout, _, _ in walk.batches:
            key = (layout.tp > 1, layout.pp > 1, layout.optimizer_offload, layout.dp_shard > 0)
            counts[key] += 1
            layouts.setdefault(key, layout)
        total = 0
        for key, layout in layouts.items():
            _, sps, modes = self.inner_choices(layout.tp)
            total += counts[key] * len(self.zero_stages(layout)) * len(sps) * len(modes)
        return total


__all__ = ["SearchSpace", "SpaceOptions", "SpaceWalk", "Layout", "DIMENSIONS"]
