"""The declared strategy space: degree domains and named validity rules, shared by the oracle and the CP-SAT model.

The space is walked in the reference planner's order (SAPP ND, sapp.md §2.2): TP -> PP -> CP -> MBS -> EP -> ETP ->
VPP, then the inner choices ZeRO x SP x recompute, which are independent of each other. A refused value is counted
once under its rule's name at the loop level where it is refused.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterator

from .specs.device import ClusterSpec
from .specs.fields import SpecError, divisors
from .specs.model import ModelSpec
from .specs.run import RunSpec
from .specs.strategy import RECOMPUTE_MODES, RecomputePlan, Strategy

_UNIFORM = {mode: RecomputePlan.uniform(mode) for mode in RECOMPUTE_MODES}
DIMENSIONS = ("tp", "pp", "cp", "dp", "ep", "etp", "vpp", "mbs", "mbn", "zero")
DEFAULT_MAX_VPP = 8

# Rule name -> what it requires (shown in reports and errors).
RULES = {
    "tp_heads": "tp divides the attention heads and the KV heads",
    "tp_cp_node": "tp x cp within the bound (default: tp within a node)",
    "pp_layers": "pp <= layers / vpp",
    "cp_sequence": "sequence divisible by 2 x cp (load-balanced ring attention)",
    "global_batch": "dp x mbs divides the global batch",
    "mbn_pp": "micro-batches per step >= pp",
    "ep_experts": "ep divides the routed experts",
    "ep_ranks": "ep divides dp x cp (experts spread over data ranks)",
    "etp_tp": "etp divides tp",
    "moe_dims": "ep = etp = 1 on dense models",
    "vpp_layers": "interleaving needs layers divisible by pp x vpp and pp > 1",
    "vpp_mbn": "interleaving needs mbn a multiple of pp",
    "sp_tp": "sequence parallelism only with tp > 1",
    "devices": "dp x tp x pp x cp = GPUs",
    "fixed": "pinned by --fix",
    "bounded": "above a --max bound",
}


@dataclass(frozen=True)
class SpaceOptions:
    """What the user pins or bounds, and which inner choices are searched."""

    fix: tuple[tuple[str, int], ...] = ()
    max: tuple[tuple[str, int], ...] = ()
    recompute_modes: tuple[str, ...] = RECOMPUTE_MODES
    zero_stages: tuple[int, ...] = (0, 1, 2, 3)
    sp_choices: tuple[bool, ...] = (False, True)
    tp_cp_bound: int = 0  # 0 = tp within a node, cp unbounded

    def __post_init__(self):
        for name, value in self.fix + self.max:
            if name not in DIMENSIONS + ("sp",):
                raise SpecError(f"{name}: not a searchable dimension; valid: {', '.join(DIMENSIONS + ('sp',))}")
            if value < 0 or (name != "zero" and value < 1):
                raise SpecError(f"{name}={value} is not valid; expected a positive integer")

    def fixed(self, name: str) -> int | None:
        return dict(self.fix).get(name)

    def bound(self, name: str) -> int | None:
        return dict(self.max).get(name)


@dataclass(frozen=True)
class Layout:
    """The degrees that decide where layers and ranks go; dp is what is left of the GPUs."""

    tp: int
    pp: int
    cp: int
    dp: int
    ep: int
    etp: int
    vpp: int

    def strategy(self, mbs: int, mbn: int, zero: int, sp: bool, recompute: str) -> Strategy:
        """The strategy at this layout (the space's rules already hold, so it is built without re-validation)."""
        return Strategy.trusted(dp=self.dp, tp=self.tp, pp=self.pp, cp=self.cp, ep=self.ep, etp=self.etp,
                                vpp=self.vpp, mbs=mbs, mbn=mbn, zero=zero, sp=sp,
                                schedule="interleaved" if self.vpp > 1 else "1f1b", recompute=_UNIFORM[recompute],
                                layers_per_stage=())


def partition_offset(model: ModelSpec, layout: Layout, max_offset: int) -> int:
    """How far a stage's layer count may move from the default partition in per-layer plans: uneven partitions are
    searched only for single-kind models without interleaving (0 = the partition is fixed)."""
    single_kind = model.moe is None or model.dense_layers == 0
    return max_offset if single_kind and layout.vpp == 1 and layout.pp > 1 else 0


@dataclass
class SpaceWalk:
    """The result of walking the space: valid (layout, mbs, mbn) triples and refusal counts by rule."""

    batches: list[tuple[Layout, int, int]] = field(default_factory=list)
    refused: Counter = field(default_factory=Counter)


@dataclass(frozen=True)
class SearchSpace:
    model: ModelSpec
    cluster: ClusterSpec
    run: RunSpec
    options: SpaceOptions = SpaceOptions()

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
        """ZeRO stages, SP settings (SP only with tp > 1) and recompute modes searched for a layout."""
        zero = [z for z in self.options.zero_stages if self._allowed("zero", z)]
        sp_fixed = self.options.fixed("sp")
        sp = [s for s in self.options.sp_choices if (not s or tp > 1) and (sp_fixed is None or int(s) == sp_fixed)]
        return zero, sp, list(self.options.recompute_modes)

    def _allowed(self, name: str, value: int) -> bool:
        fixed, bound = self.options.fixed(name), self.options.bound(name)
        return (fixed is None or value == fixed) and (bound is None or value <= bound)

    def walk(self) -> SpaceWalk:
        """Every valid (layout, mbs, mbn), in the reference planner's loop order, with refusals counted by rule."""
        m, run, n = self.model, self.run, self.cluster.count
        out = SpaceWalk()
        refused = out.refused
        node = self.cluster.device.devices_per_node
        for tp in self._domain("tp", divisors(n), refused):
            if m.heads % tp or m.num_kv_heads % tp:
                refused["tp_heads"] += 1
                continue
            if not all(self.inner_choices(tp)):
                refused["sp_tp"] += 1  # e.g. only sp=on searched, which needs tp > 1
                continue
            if tp > (self.options.tp_cp_bound or node):
                refused["tp_cp_node"] += 1
                continue
            for pp in self._domain("pp", divisors(n // tp), refused):
                if pp > m.layers:
                    refused["pp_layers"] += 1
                    continue
                for cp in self._domain("cp", divisors(n // (tp * pp)), refused):
                    if cp > 1 and run.seq_len % (2 * cp):
                        refused["cp_sequence"] += 1
                        continue
                    if self.options.tp_cp_bound and tp * cp > self.options.tp_cp_bound:
                        refused["tp_cp_node"] += 1
                        continue
                    dp = n // (tp * pp * cp)
                    if not self._allowed("dp", dp):
                        refused["fixed" if self.options.fixed("dp") is not None else "bounded"] += 1
                        continue
                    if run.global_batch % dp:
                        refused["global_batch"] += 1
                        continue
                    self._walk_batch(out, tp, pp, cp, dp)
        return out

    def _walk_batch(self, out: SpaceWalk, tp: int, pp: int, cp: int, dp: int) -> None:
        m, refused = self.model, out.refused
        for mbs in self._domain("mbs", divisors(self.run.global_batch // dp), refused):
            mbn = self.run.global_batch // (dp * mbs)
            if not self._allowed("mbn", mbn):
                refused["fixed" if self.options.fixed("mbn") is not None else "bounded"] += 1
                continue
            if mbn < pp:
                refused["mbn_pp"] += 1
                continue
            for ep in self._domain("ep", divisors(m.moe.experts) if m.moe else [1], refused):
                if (dp * cp) % ep:
                    refused["ep_ranks"] += 1
                    continue
                for etp in self._domain("etp", divisors(tp) if m.moe else [1], refused):
                    for vpp in self._domain("vpp", range(1, DEFAULT_MAX_VPP + 1), refused):
                        reason = self._vpp_refusal(pp, vpp, mbn)
                        if reason:
                            refused[reason] += 1
                            continue
                        out.batches.append((Layout(tp, pp, cp, dp, ep, etp, vpp), mbs, mbn))

    def _vpp_refusal(self, pp: int, vpp: int, mbn: int) -> str | None:
        if vpp == 1:
            return None
        if pp == 1 or self.model.layers % (pp * vpp):
            return "vpp_layers"
        if mbn % pp:
            return "vpp_mbn"
        return None

    def candidates(self, walk: SpaceWalk | None = None) -> Iterator[Strategy]:
        """Every valid strategy: each (layout, mbs, mbn) times the inner ZeRO x SP x recompute choices."""
        for layout, mbs, mbn in (walk or self.walk()).batches:
            zeros, sps, modes = self.inner_choices(layout.tp)
            for zero in zeros:
                for sp in sps:
                    for mode in modes:
                        yield layout.strategy(mbs, mbn, zero, sp, mode)

    def size(self, walk: SpaceWalk) -> int:
        total = 0
        for layout, _, _ in walk.batches:
            zeros, sps, modes = self.inner_choices(layout.tp)
            total += len(zeros) * len(sps) * len(modes)
        return total


def check_strategy(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, strategy: Strategy) -> None:
    """Raise a SpecError naming the first rule the strategy breaks, its value, and the valid values."""
    n, tp = cluster.count, strategy.tp
    valid_tp = [d for d in divisors(model.heads) if model.num_kv_heads % d == 0]
    checks = [
        (model.heads % tp == 0 and model.num_kv_heads % tp == 0, "tp", tp,
         f"must divide {model.heads} attention heads and {model.num_kv_heads} KV heads; valid tp: "
         f"{', '.join(map(str, valid_tp))}"),
        (strategy.devices == n, "dp", strategy.dp,
         f"dp*tp*pp*cp = {strategy.devices} must equal --gpus {n} (tp={tp}, pp={strategy.pp}, cp={strategy.cp})"),
        (strategy.global_batch == run.global_batch, "mbn", strategy.mbn,
         f"dp*mbs*mbn = {strategy.global_batch} must equal the global batch {run.global_batch}"),
        (strategy.virtual_stages <= model.layers, "pp", strategy.pp,
         f"pp*vpp must be <= {model.layers} layers"),
        (strategy.cp == 1 or run.seq_len % (2 * strategy.cp) == 0, "cp", strategy.cp,
         f"the sequence ({run.seq_len}) must be divisible by 2*cp"),
        (model.moe is not None or (strategy.ep == 1 and strategy.etp == 1), "ep", strategy.ep,
         "ep and etp must be 1 on a dense model"),
        (model.moe is None or model.moe.experts % strategy.ep == 0, "ep", strategy.ep,
         f"must divide {model.moe.experts if model.moe else 0} routed experts"),
        ((strategy.dp * strategy.cp) % strategy.ep == 0, "ep", strategy.ep, f"must divide dp*cp = {strategy.dp * strategy.cp}"),
        (tp % strategy.etp == 0, "etp", strategy.etp, f"must divide tp = {tp}"),
        (strategy.vpp == 1 or model.layers % strategy.virtual_stages == 0, "vpp", strategy.vpp,
         f"interleaving needs {model.layers} layers divisible by pp*vpp = {strategy.virtual_stages}"),
        (strategy.vpp == 1 or strategy.mbn % strategy.pp == 0, "mbn", strategy.mbn,
         f"interleaving needs mbn a multiple of pp = {strategy.pp}"),
    ]
    for ok, name, value, valid in checks:
        if not ok:
            raise SpecError(f"{name}={value} is not valid: {valid}")
    if strategy.layers_per_stage and sum(strategy.layers_per_stage) != model.layers:
        raise SpecError(f"layers_per_stage sums to {sum(strategy.layers_per_stage)}; it must sum to {model.layers} layers")
