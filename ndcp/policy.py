"""What a planning command checks and decides before anything is estimated or solved, for the command line and the
Python API alike (ndcp.api): the problem (model, cluster, run) from the options, a strategy from its keys, and the
search policy: the space options, the --fix checks, and which trainer's plans a search returns (`planned_trainer`:
--trainer, else --emit's, else the --strategy-from file's, else megatron; `--trainer any` lifts the restriction) with
what that trainer runs (its recompute method and schedules).

`values` is the options' values by name (an argparse Namespace from the command line, or ndcp.options.keyword_values
from API keywords: the same names and defaults). Anything the user can fix raises SpecError with the message the
command line prints.
"""
from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from .estimate.fp8 import check_fp8
from .estimate.overlap import asked_overlaps
from .estimate.trainers import loss_kernel
from .options import RUN_OPTIONS, cp_comm_types
from .rules import (Problem, check_given_degrees, check_images, check_positions, check_strategy, first_refusal,
                    hsdp_refusal, recompute_option_refusal, refusal_error)
from .schedules import default_schedule
from .space import DEFAULT_SCHEDULES, DIMENSIONS, SearchSpace, SpaceOptions
from .specs import strategy_input
from .specs.device import ClusterSpec
from .specs.device_file import load_device
from .specs.fields import SpecError, near_key
from .specs.library import load_model
from .specs.model import ModelSpec
from .specs.recompute import CLASSIC_MODES, NO_RECOMPUTE
from .specs.run import RunSpec
from .specs.strategy import CP_COMM_TYPES, RECOMPUTE_MODES, Strategy
from .specs.strategy_input import OFF_WORDS, ON_WORDS
from .specs.units import GIB
from .trainers import file_loss_kernel, file_overlap, file_trainer, read_values, trainer_named
from .trainers.megatron_model import LOSS_KERNEL_STATED

SEARCH_KEYS = DIMENSIONS + ("sp",)
WALKED = ("tp", "pp", "cp", "dp", "ep", "etp", "vpp", "mbs", "mbn")  # the degrees the space walk chooses


def gib_text(n: int) -> str:
    return f"{n / GIB:.2f} GiB"


# -- the problem -------------------------------------------------------------------------------------------------
def check_expert_options(model: ModelSpec, run: RunSpec) -> None:
    """A MoE option given for a model without experts is refused, as --images-per-sample is for one without a vision
    encoder: it would change nothing, and a user who set it believes otherwise."""
    if model.moe is not None:
        return
    default = RunSpec(run.global_batch, run.seq_len)
    for field, flag in (("moe_dispatcher", "--moe-dispatcher"), ("moe_load_imbalance", "--moe-load-imbalance")):
        if getattr(run, field) != getattr(default, field):
            raise SpecError(f"{field}={getattr(run, field)!r} is not valid: {model.name} has no experts; drop {flag} "
                            "or give a MoE model")


def build_problem(values: argparse.Namespace) -> tuple[ModelSpec, ClusterSpec, RunSpec]:
    """The model, cluster (preset + overrides) and run the cluster and run options describe. Raises SpecError."""
    model = load_model(values.model)
    cluster = ClusterSpec(load_device(values.device), values.gpus).with_overrides(
        memory_bytes=values.device_memory,
        devices_per_node=values.devices_per_node,
        intra_node_bandwidth=values.intra_node_bandwidth,
        inter_node_bandwidth=values.inter_node_bandwidth,
    )
    memory = cluster.device.memory_bytes
    cap = values.memory_cap
    if cap is not None:
        if cap <= 0:
            raise SpecError(f"--memory-cap={cap} bytes is not valid; expected a positive size, e.g. 70GiB")
        if cap > memory:
            raise SpecError(f"--memory-cap={gib_text(cap)} exceeds the {cluster.device.name} device memory "
                            f"({gib_text(memory)}); lower the cap or override --device-memory")
    run = build_run(values)
    if values.fp8_recipe is not None and not run.fp8:
        raise SpecError(f"--fp8-recipe={values.fp8_recipe} needs --precision fp8 (got --precision {values.precision})")
    check_fp8(run, cluster.device)
    check_positions(model, run)
    check_images(model, run)
    check_expert_options(model, run)
    capacity = run.capacity(memory)
    if values.reserve is not None and values.reserve >= capacity:
        raise SpecError(f"--reserve={gib_text(values.reserve)} leaves no memory: the capacity per device is "
                        f"{gib_text(capacity)}")
    return shared_spec(model), shared_spec(cluster), shared_spec(run)


_BUILT: dict = {}  # the specs build_problem returned in this process, each its own key (shared_spec)


def shared_spec(spec):
    """`spec`, or an equal spec built before in this process (a frozen spec equal in every field: the same numbers
    everywhere). The estimators' caches are keyed by the specs: a second search of the same problem (--trainer any's
    search of the trainer's own plans) then finds their entries by identity, where an equal copy had every hit
    compare the whole model, cluster and run field by field (GPT-3 175B on 64 A100: 143,516 model comparisons)."""
    if len(_BUILT) > 256:  # a long-lived caller (a sweep, the tests): forget the old ones
        _BUILT.clear()
    return _BUILT.setdefault(spec, spec)


def build_run(values: argparse.Namespace) -> RunSpec:
    """The RunSpec of the run options: each field from its option (ndcp.options.RUN_OPTIONS), the options left out
    meaning the field's default (no cap: 0; the trainer: `priced_trainer`; no --fp8-recipe: delayed)."""
    fields = {option.field: getattr(values, option.name) for option in RUN_OPTIONS}
    fields.update(memory_cap_bytes=values.memory_cap or 0, trainer=priced_trainer(values),
                  fp8_recipe=values.fp8_recipe or "delayed", overlap=run_overlap(values),
                  loss_kernel=run_loss_kernel(values))
    run = RunSpec(**fields)
    run.check_as_read()
    return run


def run_overlap(values: argparse.Namespace) -> str:
    """--overlap; left out, a --strategy-from file's (the overlaps its flags state), else trainer. An --overlap
    that names other overlaps than the file's is a usage error."""
    path = getattr(values, "strategy_from", None)
    stated = file_overlap(path)
    given = None if values.overlap is None else str(values.overlap).strip().lower()
    if given is None or stated is None:
        return given or stated or "trainer"
    default = trainer_named(values.trainer or file_trainer(path) or "megatron").behaviour.default_overlaps
    if asked_overlaps(given, default) != asked_overlaps(stated, default):
        raise SpecError(f"--overlap {given} contradicts --strategy-from {path}, whose flags run --overlap {stated}; "
                        "drop --overlap to take the file's")
    return given


def run_loss_kernel(values: argparse.Namespace) -> str:
    """--loss-kernel; `trainer` (the default: the loss its files run) with a --strategy-from file, the file's (a
    Megatron script without --cross-entropy-loss-fusion runs Megatron-LM's unfused one). A kernel given that the
    file does not run is refused where the file is read (pinned_by_file)."""
    given = getattr(values, "loss_kernel", None) or "trainer"
    stated = file_loss_kernel(getattr(values, "strategy_from", None)) if given == "trainer" else None
    return stated or given


def check_max_offset(max_offset: int, model: ModelSpec) -> None:
    if not 0 <= max_offset <= model.layers:
        raise SpecError(f"--max-offset={max_offset} is not valid; expected an integer from 0 to the "
                        f"{model.layers} layers of {model.name}")


# -- strategies --------------------------------------------------------------------------------------------------
def strategy_values(values: argparse.Namespace, model: ModelSpec | None = None, run: RunSpec | None = None
                    ) -> dict[str, Any]:
    """--strategy-file's keys, then --strategy-from's (needs the model and run), overridden by --strategy's."""
    keys = strategy_input.load_strategy_file(values.strategy_file) if values.strategy_file else {}
    if getattr(values, "strategy_from", None):
        keys.update(read_values(values.strategy_from, model, run))
    keys.update(strategy_input.parse_strategy_string(values.strategy))
    return keys


def pinned_by_file(values: argparse.Namespace, model: ModelSpec, run: RunSpec) -> str:
    """The --fix items a --strategy-from file pins for a search (its degrees, batch split and ZeRO stage; its SP
    through --sp), less those --fix names itself; its recompute plan and layout are the search's to choose."""
    if not getattr(values, "strategy_from", None):
        return values.fix
    given = {item.partition("=")[0].strip().lower() for item in str(values.fix or "").split(",") if item.strip()}
    keys = read_values(values.strategy_from, model, run)
    if "sp" not in given and getattr(values, "sp", "both") == "both":
        values.sp = "on" if keys.get("sp") else "off"  # --sp, as --fix takes sp=on only
    pins = [f"{k}={keys[k]}" for k in ("tp", "pp", "cp", "dp", "ep", "etp", "vpp", "mbs", "mbn", "zero")
            if k in keys and k not in given]
    return ",".join([values.fix] * bool(values.fix) + pins)


def assemble_strategy(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, values: dict[str, Any]) -> Strategy:
    """A Strategy from parsed keys, before the rulebook: tp, pp, cp, ep, etp, vpp, mbs default to 1 and zero to 1;
    dp is the rest of the GPUs, mbn the rest of the global batch; the schedule is the default for vpp. The run's
    precision and FP8 recipe must match the strategy's, if it states them."""
    v = dict(values)
    v.pop("overlap", None)  # a run setting (build_run took it from the file)
    dispatcher = v.pop("moe_dispatcher", None)  # a run setting: must match the run
    if dispatcher is not None and dispatcher != run.moe_dispatcher:
        raise SpecError(f"the file's MoE token dispatcher {dispatcher} does not match the run's --moe-dispatcher "
                        f"{run.moe_dispatcher}; set --moe-dispatcher {dispatcher}")
    deferral = v.pop("wgrad_deferral_limit", None)  # a run setting: must match the run
    if deferral is not None and deferral != run.wgrad_deferral_limit:
        stated = "not deferred" if run.wgrad_deferral_limit is None else run.wgrad_deferral_limit
        raise SpecError(f"the file's --wgrad-deferral-limit {deferral} does not match the run's ({stated}); set "
                        f"--wgrad-deferral-limit {deferral}")
    if v.pop("delay_wgrad_compute", False) and not run.delay_wgrad_compute:  # a run setting: must match the run
        raise SpecError("the file's --delay-wgrad-compute does not match the run's (not delayed); set "
                        "--delay-wgrad-compute")
    bf16 = v.pop("bf16_layers", None)  # a run setting (a Megatron file's BF16 first/last layers): must match the run
    if bf16 is not None and tuple(bf16) != run.bf16_layers:
        raise SpecError(f"the file keeps {bf16[0]} first and {bf16[1]} last layers in BF16 (--first-last-layers-bf16), "
                        f"the run {run.bf16_layers[0]} and {run.bf16_layers[1]}; set --first-layers-bf16 {bf16[0]} "
                        f"--last-layers-bf16 {bf16[1]}")
    kernel = v.pop("loss_kernel", None)  # a run setting (a Megatron file's loss): must match the run's
    if kernel is not None and kernel != loss_kernel(run):
        raise SpecError(f"the file's loss kernel {kernel} ({LOSS_KERNEL_STATED[kernel]}) does not match the run's "
                        f"({loss_kernel(run)}); set --loss-kernel {kernel}")
    precision, recipe = v.pop("precision", None), v.pop("fp8_recipe", None)  # run settings: must match the run
    if precision is not None and precision != run.precision:
        raise SpecError(f"strategy precision={precision} does not match the run's --precision {run.precision}; "
                        f"set --precision {precision}")
    if recipe is not None and (not run.fp8 or recipe != run.fp8_recipe):
        raise SpecError(f"strategy fp8_recipe={recipe} does not match the run (--precision {run.precision}"
                        + (f", --fp8-recipe {run.fp8_recipe}" if run.fp8 else "") + f"); set --precision fp8 "
                        f"--fp8-recipe {recipe}")
    v.setdefault("pp", 1)
    strategy_input.resolve_layout(v, model.layers, model.mtp_depth)  # layout= / first/last stage layers
    strategy_input.resolve_recompute_modules(v)
    for key in strategy_input.DEFAULT_ONE:
        v.setdefault(key, 1)
    check_given_degrees(model, cluster, run, v)
    strategy_input.derive_batch_split(cluster, run, v)
    v.setdefault("schedule", default_schedule(v["vpp"]))
    v["recompute"] = strategy_input.recompute_plan(v.get("recompute", NO_RECOMPUTE))
    if "layers_per_stage" in v:
        v["layers_per_stage"] = tuple(v["layers_per_stage"])
    return Strategy(**v)


def build_strategy(model: ModelSpec, cluster: ClusterSpec, run: RunSpec, values: dict[str, Any]) -> Strategy:
    """A checked Strategy from parsed keys (assemble_strategy's defaults). Every rule is the rulebook's
    (ndcp.rules), so estimate accepts exactly what the search walks."""
    strategy = assemble_strategy(model, cluster, run, values)
    check_strategy(model, cluster, run, strategy)
    return strategy


# -- the search space --------------------------------------------------------------------------------------------
def parse_degree_bounds(option: str, text: str) -> tuple[tuple[str, int], ...]:
    """`--fix tp=8,pp=16` / `--max tp=8` -> ((name, value), ...) over the space dimensions and sp (on/off = 1/0)."""
    keys = SEARCH_KEYS
    out: dict[str, int] = {}
    for item in str(text or "").split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        key, value = key.strip().lower().replace("-", "_"), value.strip()
        if not sep or not value:
            raise SpecError(f"{option}: {item!r} is not key=value; valid keys: {', '.join(keys)}")
        if key not in keys:
            raise SpecError(f"{option}: unknown key {key!r}{near_key(key, keys)}; valid keys: {', '.join(keys)}")
        if key in out:
            raise SpecError(f"{option}: {key} is given twice")
        if key == "sp":
            word = value.lower()
            if word not in ON_WORDS + OFF_WORDS:
                raise SpecError(f"{option}: sp={value!r} is not valid; valid: on, off")
            out[key] = int(word in ON_WORDS)
            continue
        try:
            number = int(value)
        except ValueError:
            raise SpecError(f"{option}: {key}={value!r} is not valid; expected an integer") from None
        if key == "zero" and not 0 <= number <= 3:
            raise SpecError(f"{option}: zero={number} is not valid; valid: 0, 1, 2, 3")
        if key != "zero" and number < 1:
            raise SpecError(f"{option}: {key}={number} is not valid; expected an integer >= 1")
        out[key] = number
    return tuple(out.items())


def check_bounds_agree(fixed: dict, bounds: dict) -> None:
    """--fix and --max that contradict each other (a pinned value above its bound, sp=on with tp pinned or bounded
    to 1) are usage errors, not an empty search."""
    for key, value in fixed.items():
        if key in bounds and value > bounds[key]:
            raise SpecError(f"--fix {key}={value} contradicts --max {key}={bounds[key]}; drop one of them")
    if fixed.get("sp") == 1 and min(fixed.get("tp", 2), bounds.get("tp", 2)) == 1:
        raise SpecError("--fix sp=on needs tp > 1 (sequence parallelism splits along the TP group); drop it or "
                        "allow tp > 1")


def check_recompute_runs(space: SearchSpace) -> None:
    """A --recompute MODE the model or the trainer cannot run is a usage error that says why, not an empty search
    (the space drops the options rules.recompute_option_refusal refuses; with one option asked, nothing is left)."""
    if space.inner_choices(1)[2]:
        return
    modes = space.options.recompute_modes
    refusal = next(r for r in (recompute_option_refusal(space.model, space.run, m) for m in modes) if r)
    raise SpecError(f"--recompute {','.join(modes)}: {refusal.message}")


def check_fixed_values(space: SearchSpace) -> None:
    """Each --fix degree must be one that some valid strategy takes, as `ndcp estimate` checks its strategy: tp by
    the rulebook's message, the others against the values the unpinned space walks (valid values listed); and
    together they must leave a strategy."""
    options = space.options
    fixed = {k: v for k, v in options.fix if k in WALKED}
    if not fixed:
        return
    problem = Problem(space.model, space.cluster, space.run)
    if "tp" in fixed and (refusal := first_refusal(problem, "tp", {"tp": fixed["tp"]})) is not None:
        raise SpecError(f"--fix {refusal_error(refusal, fixed)}")
    free = SearchSpace(space.model, space.cluster, space.run, dataclasses.replace(options, fix=(), max=()))
    batches = free.walk().batches
    for key, value in fixed.items():
        valid = sorted({mbs if key == "mbs" else mbn if key == "mbn" else getattr(layout, key)
                        for layout, mbs, mbn in batches})
        if value not in valid:
            raise SpecError(f"--fix {key}={value} is not valid: no strategy for {space.model.name} on "
                            f"{space.cluster.count} GPUs with global batch {space.run.global_batch} has it; valid "
                            f"{key}: {', '.join(map(str, valid)) or 'none'}")
    if batches and not space.walk().batches:
        given = ",".join(f"{k}={v}" for k, v in fixed.items())
        with_max = " with --max" if options.max else ""
        raise SpecError(f"--fix {given}: each value is valid, but together{with_max} they leave no valid strategy "
                        f"for {space.cluster.count} GPUs and global batch {space.run.global_batch}; relax or drop one")


def split_fixed_cp_comm(text: str, searched: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """`--fix ...,cp_comm=allgather,...`: (the rest of --fix, the CP communication types then searched). A pinned type
    must be among --cp-comm's when that option names several."""
    rest, pinned = [], None
    for item in str(text or "").split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip().lower().replace("-", "_") == "cp_comm":
            try:
                (pinned,) = cp_comm_types(value)
            except (argparse.ArgumentTypeError, ValueError):
                raise SpecError(f"--fix cp_comm={value.strip()!r} is not valid; valid: {', '.join(CP_COMM_TYPES)}"
                                ) from None
        else:
            rest.append(item)
    if pinned is None:
        return str(text or ""), searched
    if len(searched) > 1 and pinned not in searched:
        raise SpecError(f"--fix cp_comm={pinned} contradicts --cp-comm {','.join(searched)}; drop one of them")
    return ",".join(rest), (pinned,)


# -- which trainer's plans, and what it runs ---------------------------------------------------------------------
DEFAULT_TRAINER = "megatron"
ANY_TRAINER = "any"  # --trainer any: every plan ndcp prices, whether or not a trainer runs it
# The uniform-plan method searching the same space as each per-layer one (ndcp.solve.search.METHODS).
UNIFORM_OF = {"per-layer": "uniform", "exhaustive per-layer": "exhaustive"}


def _implied_trainer(values: argparse.Namespace) -> str:
    """The trainer a run means when --trainer names none: --emit's, else the --strategy-from file's, else megatron."""
    return (getattr(values, "emit", None) or file_trainer(getattr(values, "strategy_from", None))
            or DEFAULT_TRAINER)


def planned_trainer(values: argparse.Namespace) -> str | None:
    """The trainer whose plans a search returns: only plans it runs exactly as --emit writes them (its recompute
    method, schedules, recompute options). --trainer, else `_implied_trainer`; None under --trainer any."""
    given = getattr(values, "trainer", None)
    if given == ANY_TRAINER:
        return None
    return given or _implied_trainer(values)


def priced_trainer(values: argparse.Namespace) -> str:
    """The trainer whose behaviour the estimators price (RunSpec.trainer): the planned one; under --trainer any,
    `_implied_trainer`."""
    return planned_trainer(values) or _implied_trainer(values)


def trainer_method(values: argparse.Namespace, method: str) -> tuple[str, str]:
    """(the method searched, a note for the user or ""): when the planned trainer runs one recompute option on every
    layer (torchtitan; Megatron, whose block count per stage is not searched), per-layer plans it cannot express are
    not searched: the uniform method is (said in a note when --trainer or --emit named the trainer)."""
    trainer = planned_trainer(values)
    if trainer and method in UNIFORM_OF and trainer_named(trainer).recompute != "per-stage":
        said = getattr(values, "trainer", None) or getattr(values, "emit", None)  # the default goes without saying
        return UNIFORM_OF[method], (f"{trainer} runs one recompute option on every layer: searching those (uniform "
                                    "plans); --trainer any plans per stage") if said else ""
    return method, ""


def trainer_schedules(values: argparse.Namespace, schedules: tuple[str, ...]) -> tuple[str, ...]:
    """The searched schedules the planned trainer runs (its Trainer, ndcp/trainers); all of them under any."""
    trainer = planned_trainer(values)
    if not trainer:
        return schedules
    runs = tuple(s for s in schedules if s in trainer_named(trainer).schedules)
    if not runs:
        raise SpecError(f"--schedules {','.join(schedules)}: {trainer} runs none of them; it runs "
                        f"{', '.join(trainer_named(trainer).schedules)} (--trainer any searches every schedule)")
    return runs


ON_OFF_BOTH = {"on": (True,), "off": (False,), "both": (False, True)}  # --sp, --optimizer-offload, --hsdp


def build_space_options(values: argparse.Namespace) -> SpaceOptions:
    """SpaceOptions from the search options. Raises SpecError for contradictions."""
    fix_text, cp_comms = split_fixed_cp_comm(values.fix, values.cp_comm)
    fix = parse_degree_bounds("--fix", fix_text)
    bounds = parse_degree_bounds("--max", values.max_)
    fixed = dict(fix)
    check_bounds_agree(fixed, dict(bounds))
    if "zero" in fixed and fixed["zero"] not in values.zero:
        raise SpecError(f"--fix zero={fixed['zero']} is not among the searched stages --zero "
                        f"{','.join(map(str, values.zero))}")
    sp_choices = ON_OFF_BOTH[values.sp]
    if "sp" in fixed and bool(fixed["sp"]) not in sp_choices:
        raise SpecError(f"--fix sp={'on' if fixed['sp'] else 'off'} contradicts --sp {values.sp}")
    offload = getattr(values, "optimizer_offload", "off")
    trainer = priced_trainer(values)
    if offload == "on" and not trainer_named(trainer).optimizer_offload_zero:
        raise SpecError(f"--optimizer-offload on: {trainer} has no optimizer offload "
                        f"({trainer_named(trainer).version}); plan with --trainer megatron")
    hsdp = getattr(values, "hsdp", "off")
    if hsdp == "on" and not trainer_named(trainer).hsdp:
        raise SpecError(f"--hsdp on: HSDP is refused: {hsdp_refusal(trainer)}")
    recompute = (RECOMPUTE_MODES if values.recompute in ("uniform", "per-layer", "greedy")
                 else CLASSIC_MODES if values.recompute == "classic" else (values.recompute,))
    return SpaceOptions(fix=fix, max=bounds, recompute_modes=recompute, zero_stages=tuple(values.zero),
                        sp_choices=sp_choices, tp_cp_bound=values.tp_cp_bound, max_offset=values.max_offset,
                        cp_comms=cp_comms,
                        schedules=trainer_schedules(values, getattr(values, "schedules", DEFAULT_SCHEDULES)),
                        optimizer_offloads=ON_OFF_BOTH[offload], hsdp=ON_OFF_BOTH[hsdp])


__all__ = ["build_problem", "build_run", "run_overlap", "check_max_offset", "strategy_values", "pinned_by_file",
           "build_strategy", "parse_degree_bounds", "check_bounds_agree", "check_recompute_runs", "check_fixed_values",
           "split_fixed_cp_comm", "assemble_strategy", "planned_trainer", "priced_trainer", "trainer_method",
           "trainer_schedules", "build_space_options", "gib_text", "SEARCH_KEYS", "WALKED", "UNIFORM_OF", "ON_OFF_BOTH",
           "DEFAULT_TRAINER", "ANY_TRAINER"]
