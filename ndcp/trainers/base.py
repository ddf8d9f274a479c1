"""What every trainer module shares: the Trainer it defines, the emitted configuration, and the pinned flag facts.

A trainer module (megatron.py, torchtitan.py, mindformers.py) defines one Trainer, TRAINER, at its end: the
trainer's behaviour as the estimators price it (specs/trainer_behaviour.py, held here as `behaviour`), what it can
run at a stated version, how its configuration is recognised, `nearest` (the strategy it runs for a plan: the plan
itself when it can express it, else the closest one that recomputes at least as much and shards at least as much),
`emit` (its launch configuration) and `read` (a configuration back into strategy values, for --strategy-from).
ndcp/trainers/__init__.py registers the Trainers; everything that depends on the trainer asks the registry. Pure
functions of (model, run, strategy): nothing here estimates.
"""
from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable, NamedTuple

from ..estimate.layout import partition
from ..estimate.overlap import strategy_overlaps
from ..schedules import default_schedule, schedule_named
from ..specs.fields import SpecError
from ..specs.files import parse_yaml, read_text
from ..specs.model import ModelSpec
from ..specs.recompute import HEAVIEST, NO_RECOMPUTE, RECOMPUTE_MODES, modules_cover, recompute_option
from ..specs.run import OVERLAPS, RunSpec
from ..specs.strategy import RecomputePlan, StageRecompute, Strategy, default_partition
from ..specs.strategy_input import resolve_layout
from ..specs.trainer_behaviour import TrainerBehaviour
from .checkpoints import Resharding

FACTS_DIR = Path(__file__).parent / "facts"


@dataclass(frozen=True)
class Emitted:
    """One trainer's configuration, the strategy it runs (None: the plan itself), the run it runs (None: the plan's;
    else the run with the precision and overlaps the configuration states) and what it changed."""

    text: str
    notes: list[str] = field(default_factory=list)
    strategy: Strategy | None = None
    run: RunSpec | None = None
    # what the configuration lacks to launch beyond the user's placeholders (e.g. a model the trainer has no config
    # for): a file that lacks something is no answer (ndcp.launch)
    missing: tuple[str, ...] = ()

    @property
    def recompute(self) -> RecomputePlan | None:
        """The recompute plan the text expresses (None: the plan's own)."""
        return None if self.strategy is None else self.strategy.recompute

    @property
    def same_as_plan(self) -> bool:
        """Whether the configuration runs the plan as planned: its strategy and its run."""
        return self.strategy is None and self.run is None


class Placeholder(NamedTuple):
    """A setting the user fills in before launching: the trainer's option, its placeholder value, what it is."""

    option: str
    value: str  # <NAME>: obviously not a value
    meaning: str


def fill_in_comment(placeholders: tuple[Placeholder, ...]) -> str:
    """The comment above a configuration naming the settings at its end that the user fills in."""
    lines = [f"# FILL IN before launching: the last {len(placeholders)} options below "
             f"(from {placeholders[0].option}) hold placeholders:"]
    seen = set()
    for p in placeholders:
        if p.value not in seen:
            seen.add(p.value)
            lines.append(f"#   {p.value}: {p.meaning}")
    return "\n".join(lines) + "\n"


def option_lines(args: list[str], starts_line: Callable[[str], bool] = lambda a: a.startswith("--")) -> str:
    """Arguments as a shell continuation block, one option (with its values) per line."""
    lines: list[list[str]] = []
    for arg in args:
        if starts_line(arg) or not lines:
            lines.append([arg])
        else:
            lines[-1].append(arg)
    return " \\\n".join(" ".join(shlex.quote(x) for x in line) for line in lines) + "\n"


def overlap_value(overlaps: set[str], default: frozenset[str]) -> str:
    """A RunSpec.overlap value for a set of overlaps (specs.run.OVERLAPS order): trainer when it is the trainer's
    default, none when empty."""
    if overlaps == default:
        return "trainer"
    return "+".join(o for o in OVERLAPS if o in overlaps) or "none"


@dataclass(frozen=True, eq=False)  # one object per trainer: compared (and hashed) by identity
class Trainer:
    """One trainer: how the estimators price it, what it can run (read from its source at `version`,
    ndcp/trainers/facts/<name>.yaml), and its launch configuration written, recognised and read back. Every field
    is required: a trainer supplies every part (tests/trainers/test_registry.py)."""

    # -- how the estimators price it (the pure-data part, defined in specs so the estimators can look it up)
    behaviour: TrainerBehaviour
    # -- what it runs
    version: str  # the release its capabilities below were read from
    zero_stages: tuple[int, ...]  # ZeRO stages it runs (how: `zero_how`)
    zero_how: tuple[str, ...]  # per stage in zero_stages: the trainer's own name for it
    # ZeRO stages of zero_stages it runs only with data parallelism alone (no TP, PP, CP or EP): a search takes the
    # others (rules.trainer_zero_stages)
    zero_dp_alone: tuple[int, ...]
    # ZeRO stages of zero_stages it runs only without pipeline parallelism (pp 1): a search offers them to
    # single-stage layouts only (rule trainer_zero, SearchSpace.zero_stages)
    zero_without_pipeline: tuple[int, ...]
    # How it runs HSDP (Strategy.dp_shard: ZeRO-3 sharded over dp_shard x cp ranks, the gradient shards all-reduced
    # across dp / dp_shard replicas, docs/formulas.md §7.3), in its own words; "" when it does not run it as ndcp
    # prices it: a search under it returns no HSDP plan (rule dp_shard)
    hsdp: str
    recompute: str  # "uniform" (one mode, every layer), "count" (one full count per stage), "per-stage" (any plan)
    # The recompute options (specs/recompute.py OPTIONS) it runs on a layer; the search offers it these only
    # (rules.recompute_option_refusal), and `nearest` turns any other into one of them that covers it.
    recompute_options: tuple[str, ...]
    precisions: tuple[str, ...]  # specs.run.PRECISIONS it emits
    fp8_recipes: tuple[str, ...]  # specs.run.FP8_RECIPES it emits
    # The FP8 recipe a run under this trainer used when a measured run does not state one (validation/runs.py)
    default_fp8_recipe: str
    cp_comms: tuple[str, ...]  # specs.strategy.CP_COMM_TYPES it runs
    expert_tensor_parallel: bool  # an etp other than 1
    layouts: str  # how it places layers: "any" (an explicit per-stage list) or "even" (layers per stage alike)
    schedules: tuple[str, ...]  # ndcp/schedules names it runs
    # Its own name for each schedule it takes by name (empty: it picks the schedule from the shape, as Megatron and
    # MindFormers interleave when given virtual stages)
    schedule_names: dict[str, str]
    optimizer_offload_zero: tuple[int, ...]  # ZeRO stages under which it keeps the optimizer on the host
    # FP8 recipes under which it keeps the optimizer on the host beside FP8 parameter gathers (ZeRO >= 1 under FP8);
    # under the others only ZeRO-0 offloads (rules.optimizer_offload_zero)
    optimizer_offload_fp8_recipes: tuple[str, ...]
    # -- its launch configuration
    config_kind: str  # what its configuration is, for messages ("Megatron-LM arguments")
    recognises: Callable[[str], bool]  # whether a configuration's text is this trainer's (--strategy-from)
    # The strategy it runs for a plan (the plan itself when it can express it) and what changed
    nearest: Callable[[ModelSpec, RunSpec, Strategy], tuple[Strategy, list[str]]]
    emit: Callable[[ModelSpec, RunSpec, Strategy, int], Emitted]  # its configuration for a strategy (domain ranks)
    read: Callable[[str, ModelSpec], dict]  # a configuration's text back into strategy values
    # The run's overlaps (a RunSpec.overlap value) a configuration's text states, for --strategy-from without
    # --overlap (policy.build_run); `read` gives the same as its "overlap" value
    read_overlap: Callable[[str], str]
    # The loss kernel (a RunSpec.loss_kernel value) a configuration's text states, for --strategy-from without
    # --loss-kernel (policy.build_run); "trainer" where its configuration cannot state one
    read_loss_kernel: Callable[[str], str]
    # -- its checkpoint: whether a dimension's shards load under new degrees (dimension, before, after), checkpoints.py
    reshard: Callable[[str, Strategy, Strategy], Resharding]

    @property
    def name(self) -> str:
        """Its name (specs.run.TRAINERS), its behaviour's."""
        return self.behaviour.name


def nearest_schedule(trainer: Trainer, strategy: Strategy, notes: list[str]) -> Strategy:
    """The strategy on a schedule the trainer runs: its own, else the default schedule for its vpp."""
    if strategy.schedule in trainer.schedules:
        return strategy
    fallback = default_schedule(strategy.vpp)
    notes.append(f"{trainer.name} has no {strategy.schedule} schedule ({trainer.version}): emitted {fallback}")
    return strategy.with_(schedule=fallback)


def nearest_optimizer_offload(trainer: Trainer, strategy: Strategy, notes: list[str]) -> Strategy:
    """The strategy with its optimizer on the device when the trainer cannot keep it on the host at its ZeRO
    stage (the device then holds the optimizer states: more memory than planned)."""
    if not strategy.optimizer_offload or strategy.zero in trainer.optimizer_offload_zero:
        return strategy
    notes.append(f"{trainer.name} has no optimizer offload" + (f" with ZeRO-{strategy.zero}" if
                 trainer.optimizer_offload_zero else "") + ": emitted the optimizer on the device, which needs "
                 "more device memory than planned")
    return strategy.with_(optimizer_offload=False)


def planned_overlaps(run: RunSpec, strategy: Strategy) -> frozenset:
    """The overlaps a plan runs beyond its schedule's own (estimate/overlap.py): those a configuration must ask
    the trainer for."""
    return strategy_overlaps(run, strategy) - frozenset(schedule_named(strategy.schedule).hides)


def unstated_overlaps(trainer: Trainer, run: RunSpec, strategy: Strategy, notes: list[str]) -> str | None:
    """For a trainer whose configuration states no overlaps (it runs its defaults): None when the plan runs those,
    else "trainer" (the overlap its configuration runs, Emitted.overlap) and a note on what is not overlapped."""
    default = dataclasses.replace(run, overlap="trainer")
    lost = planned_overlaps(run, strategy) - planned_overlaps(default, strategy)
    gained = planned_overlaps(default, strategy) - planned_overlaps(run, strategy)
    if not lost and not gained:
        return None
    notes.append(f"{trainer.name} ({trainer.version}) has no setting for the planned overlaps: it runs its own "
                 f"({', '.join(sorted(planned_overlaps(default, strategy))) or 'none'}), not the plan's "
                 f"({', '.join(sorted(planned_overlaps(run, strategy))) or 'none'})")
    return "trainer"


def stage_plans(model: ModelSpec, strategy: Strategy) -> list[StageRecompute]:
    """Recompute counts per virtual stage (uniform plans expanded to per-stage counts)."""
    counts = partition(model, strategy)
    return [strategy.recompute.for_stage(v, n) for v, n in enumerate(counts)]


def used_options(plans: list[StageRecompute]) -> set[str]:
    """The recompute options a per-stage plan runs on at least one layer, "none" left out."""
    return {m for p in plans for m in RECOMPUTE_MODES if m != NO_RECOMPUTE and p.count(m)}


def option_words(options: set[str]) -> str:
    """Recompute option names as a note writes them: `layernorm, offload`."""
    return ", ".join(sorted(options))


def _modules(p: StageRecompute) -> set[str]:
    return {name for m in RECOMPUTE_MODES if p.count(m) for name in recompute_option(m).modules}


def covers(plan: list[StageRecompute], original: list[StageRecompute]) -> bool:
    """Whether `plan` recomputes at least as much as `original` on every stage: at least as many fully recomputed
    layers, at least as many layers recomputing anything, and every recompute module the original runs there."""
    def recomputed(p: StageRecompute) -> int:
        return p.layers - p.count(NO_RECOMPUTE)

    return len(plan) == len(original) and all(
        p.count(HEAVIEST) >= o.count(HEAVIEST) and recomputed(p) >= recomputed(o)
        and modules_cover(_modules(p), _modules(o))
        for p, o in zip(plan, original))


def uniform_cover(plans: list[StageRecompute], offered: tuple[str, ...] = RECOMPUTE_MODES) -> str:
    """The lightest single option among `offered` whose recompute modules cover every module the plan runs (full,
    which recomputes everything, when none does)."""
    used = used_options(plans)
    if not used:
        return NO_RECOMPUTE
    wanted = {name for m in used for name in recompute_option(m).modules}
    fits = [m for m in offered if m != NO_RECOMPUTE and modules_cover(recompute_option(m).modules, wanted)]
    return min(fits, key=lambda m: recompute_option(m).weight) if fits else HEAVIEST


def with_plan(model: ModelSpec, strategy: Strategy, plans: list[StageRecompute]) -> Strategy:
    """The strategy with this per-stage plan, written as a uniform mode when it is one."""
    counts = partition(model, strategy)
    for mode in RECOMPUTE_MODES:
        if all(p.count(mode) == n for p, n in zip(plans, counts)):
            return strategy.with_(recompute=RecomputePlan.uniform(mode))
    return strategy.with_(recompute=RecomputePlan(mode="per-stage", stages=tuple(plans)))


def partition_of(values: dict, model: ModelSpec) -> tuple[int, ...]:
    """Layers per virtual stage of read strategy values: their layout keys resolved into layers_per_stage (and vpp)
    in place, as the strategy will be built (specs.strategy_input.resolve_layout), else the default partition."""
    values.setdefault("pp", 1)
    resolve_layout(values, model.layers, model.mtp_depth)
    return values.get("layers_per_stage") or default_partition(model.layers, values["pp"] * values.get("vpp", 1))


# -- pinned flag facts -------------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def facts(trainer: str) -> dict:
    """The pinned facts of one trainer version: its flags (or keys) with type and choices, and where they come
    from (ndcp/trainers/facts/<trainer>.yaml)."""
    path = FACTS_DIR / f"{trainer}.yaml"
    return parse_yaml(read_text(path, str(path), "trainer facts"), str(path))


def read_error(trainer: str, message: str) -> SpecError:
    return SpecError(f"--strategy-from ({trainer}): {message}")


__all__ = ["Trainer", "Emitted", "Placeholder", "fill_in_comment", "option_lines", "overlap_value", "planned_overlaps",
           "unstated_overlaps", "stage_plans", "used_options", "option_words", "covers", "uniform_cover", "with_plan",
           "partition_of", "facts",
           "read_error", "FACTS_DIR", "nearest_schedule", "nearest_optimizer_offload"]
