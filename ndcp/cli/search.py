"""`ndcp search`: the fastest strategy that fits, with a proof (or the best found with its bound and gap)."""
from __future__ import annotations

import argparse
import dataclasses
import sys

from ..report.csvout import write_ranking_csv
from ..report.emit import print_comparison
from ..report.jsonout import search_document
from ..report.plots import plot_search
from ..report.progress import SearchProgress
from ..report.search import one_line as result_line, render_search
from ..rules import Problem, first_refusal, recompute_option_refusal, refusal_error
from ..schedules import SCHEDULES
from ..trainers import trainer_named
from ..space import DEFAULT_SCHEDULES, DIMENSIONS, SearchSpace, SpaceOptions
from ..specs.fields import SpecError
from ..specs.recompute import CLASSIC_MODES
from ..specs.strategy import CP_COMM_TYPES, RECOMPUTE_MODES
from ..specs.strategy_input import OFF_WORDS, ON_WORDS
from .common import (EXIT_INFEASIBLE, EXIT_OK, add_max_offset_argument, add_problem_arguments, add_quiet_argument,
                     add_strategy_from_argument, build_problem, check_max_offset, console, int32, one_line,
                     pinned_by_file, positive_int, positive_seconds, subparser, workers)
from .outputs import (add_emit_arguments, add_json_argument, check_emit_arguments, check_plot_path, emit_json,
                      stdout_owners, write_emitted, write_plot)

EXAMPLE = ("ndcp search llama3-70b --device h100 --gpus 1024 --global-batch 1024 --seq-len 8192 \\\n"
           "    --memory-cap 75GiB --top 10\n"
           "ndcp search tiny --device h100 --gpus 8 --global-batch 32 --seq-len 1024 --fix tp=2 --json -")
SEARCH_KEYS = DIMENSIONS + ("sp",)
WALKED = ("tp", "pp", "cp", "dp", "ep", "etp", "vpp", "mbs", "mbn")  # the degrees the space walk chooses


def register(subparsers) -> None:
    parser = subparser(
        subparsers, "search", "the fastest strategy that fits, with a proof",
        "Search the parallel strategies (tp, pp, cp, dp, ep, etp, vpp, mbs, mbn, ZeRO, SP, recompute) for the\n"
        "fastest step time that fits in memory. CP-SAT solves a relaxation and verifies its best points with the\n"
        "full estimators until no unverified strategy can enter the top K (status `optimal`); at the time limit\n"
        "it reports the best verified strategies with the proven bound and the gap (status `feasible`).\n"
        "--exhaustive prices every valid strategy instead (the reference oracle).\n\n"
        "--fix and --max take comma-separated key=value over tp, pp, cp, dp, ep, etp, vpp, mbs, mbn, zero, sp.\n"
        "Exit 0 when a strategy is found, 1 when none fits (the reason is printed), 2 for usage errors.",
        EXAMPLE)
    add_problem_arguments(parser)
    group = parser.add_argument_group("search space")
    group.add_argument("--fix", metavar="K=V,...", default="", help="pin dimensions, e.g. tp=8,pp=16 (and cp_comm=allgather: the CP communication type)")
    group.add_argument("--max", metavar="K=V,...", default="", dest="max_", help="bound dimensions, e.g. tp=8")
    group.add_argument("--recompute", choices=("uniform", "per-layer", "greedy", "classic") + RECOMPUTE_MODES,
                       default="per-layer", metavar="MODE",
                       help="activation recompute: `per-layer` (default) decides per stage how many layers run each "
                            "recompute option -- none, selective, full and Megatron's recompute modules (layernorm, "
                            "mlp, moe_act, moe, mla_up_proj and combinations, where the model has them) -- jointly "
                            "with the degrees (never slower than uniform); `classic`: per-layer over none/selective/"
                            "full only (faster); `uniform` one option for every layer (faster still); `greedy` gives "
                            "every candidate the reference planner's greedy per-stage plan (status `heuristic`: no "
                            "proof, for comparison); or one option for every layer (e.g. full, layernorm+mlp)")
    add_max_offset_argument(group)
    group.add_argument("--zero", metavar="STAGES", type=zero_stages, default=(0, 1, 2, 3),
                       help="ZeRO stages to search (default 0,1,2,3)")
    group.add_argument("--sp", choices=("on", "off", "both"), default="both",
                       help="sequence parallelism (only with tp > 1; default both)")
    group.add_argument("--tp-cp-bound", metavar="N", type=positive_int, default=0,
                       help="bound tp x cp (default: tp within a node, cp unbounded)")
    group.add_argument("--schedules", metavar="NAMES", type=schedule_names, default=DEFAULT_SCHEDULES,
                       help="pipeline schedules to search, jointly with everything else: all, or a comma-separated "
                            f"list of {', '.join(SCHEDULES)} (default {','.join(DEFAULT_SCHEDULES)}: what Megatron-LM "
                            "and torchtitan run out of the box)")
    group.add_argument("--optimizer-offload", choices=("off", "on", "both"), default="off",
                       help="optimizer states and step on the host (Megatron --optimizer-cpu-offload; ZeRO 0/1): "
                            "off (default), on, or both searched jointly (twice the candidates)")
    group.add_argument("--cp-comm", metavar="TYPES", type=cp_comm_types, default=("p2p",),
                       help="context-parallel communication types to search when cp > 1, comma-separated from "
                            f"{', '.join(CP_COMM_TYPES)}, or all (default p2p: each extra type adds as many cp > 1 "
                            "candidates again, measured 2-3x the search time)")
    group = parser.add_argument_group("solver")
    group.add_argument("--top", metavar="K", type=positive_int, default=10, help="strategies to rank (default 10)")
    group.add_argument("--exhaustive", action="store_true", help="price every valid strategy (no solver)")
    group.add_argument("--time-limit", metavar="SECONDS", type=positive_seconds, default=60.0,
                       help="CP-SAT time limit (default 60)")
    group.add_argument("--workers", metavar="N", type=workers, default=1,
                       help="CP-SAT search workers (default 1: deterministic)")
    group.add_argument("--seed", metavar="S", type=int32, default=0, help="CP-SAT random seed (default 0)")
    group = parser.add_argument_group("output")
    add_json_argument(parser)
    group.add_argument("--csv", metavar="PATH|-", help="also write the ranked strategies as CSV; `-` writes only the "
                                                       "CSV to stdout")
    add_quiet_argument(group)
    add_emit_arguments(group, "the winner")
    add_strategy_from_argument(group, "pin the degrees, batch split, ZeRO stage and SP (what --fix takes)")
    group.add_argument("--plot", metavar="PATH", help="plot the ranking and the winner's memory (.png or .svg; needs "
                                                      "matplotlib)")
    parser.set_defaults(func=run)


def zero_stages(text: str) -> tuple[int, ...]:
    stages = set()
    for item in str(text).split(","):
        item = item.strip()
        if not item:
            continue
        if item not in ("0", "1", "2", "3"):
            raise argparse.ArgumentTypeError(f"invalid ZeRO stage {item!r}: valid stages 0, 1, 2, 3 (e.g. 0,1,2,3)")
        stages.add(int(item))
    if not stages:
        raise argparse.ArgumentTypeError("no ZeRO stage given: valid stages 0, 1, 2, 3 (e.g. 0,1,2,3)")
    return tuple(sorted(stages))


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
            raise SpecError(f"{option}: unknown key {key!r}; valid keys: {', '.join(keys)}")
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


def schedule_names(text: str) -> tuple[str, ...]:
    """--schedules: "all" or a comma-separated list of registered schedules (ndcp/schedules)."""
    if text.strip().lower() == "all":
        return tuple(SCHEDULES)
    names = tuple(dict.fromkeys(t.strip().lower() for t in text.split(",") if t.strip()))
    wrong = [t for t in names if t not in SCHEDULES]
    if not names or wrong:
        raise argparse.ArgumentTypeError(f"{text!r}: expected all or a comma-separated list of {', '.join(SCHEDULES)}")
    return names


def cp_comm_types(text: str) -> tuple[str, ...]:
    """--cp-comm: "all" or a comma-separated list of CP communication types."""
    if text.strip().lower() == "all":
        return CP_COMM_TYPES
    types = tuple(dict.fromkeys(t.strip().lower() for t in text.split(",") if t.strip()))
    wrong = [t for t in types if t not in CP_COMM_TYPES]
    if not types or wrong:
        raise argparse.ArgumentTypeError(f"{text!r}: expected all or a comma-separated list of "
                                         f"{', '.join(CP_COMM_TYPES)}")
    return types


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


# The uniform-plan method searching the same space as each per-layer one (ndcp.solve.search.METHODS).
UNIFORM_OF = {"per-layer": "uniform", "exhaustive per-layer": "exhaustive"}


def trainer_method(args: argparse.Namespace, method: str) -> str:
    """Under an explicit --trainer whose recompute is one option on every layer (torchtitan; Megatron, whose block
    count per stage is not searched), per-layer plans it cannot express are not searched: the uniform method is."""
    trainer = getattr(args, "trainer", None)
    if trainer and method in UNIFORM_OF and trainer_named(trainer).recompute != "per-stage":
        print(f"ndcp: note: --trainer {trainer} runs one recompute option on every layer: searching those (uniform "
              "plans); drop --trainer to plan per stage (--emit then shows what the trainer runs)", file=sys.stderr)
        return UNIFORM_OF[method]
    return method


def trainer_schedules(args: argparse.Namespace, schedules: tuple[str, ...]) -> tuple[str, ...]:
    """The searched schedules an explicit --trainer runs (its Trainer, ndcp/trainers)."""
    trainer = getattr(args, "trainer", None)
    if not trainer:
        return schedules
    runs = tuple(s for s in schedules if s in trainer_named(trainer).schedules)
    if not runs:
        raise SpecError(f"--schedules {','.join(schedules)}: --trainer {trainer} runs none of them; it runs "
                        f"{', '.join(trainer_named(trainer).schedules)}")
    return runs


ON_OFF_BOTH = {"on": (True,), "off": (False,), "both": (False, True)}  # --sp, --optimizer-offload: values searched


def build_space_options(args: argparse.Namespace) -> SpaceOptions:
    """SpaceOptions from the search arguments. Raises SpecError for contradictions."""
    fix_text, cp_comms = split_fixed_cp_comm(args.fix, args.cp_comm)
    fix = parse_degree_bounds("--fix", fix_text)
    bounds = parse_degree_bounds("--max", args.max_)
    fixed = dict(fix)
    check_bounds_agree(fixed, dict(bounds))
    if "zero" in fixed and fixed["zero"] not in args.zero:
        raise SpecError(f"--fix zero={fixed['zero']} is not among the searched stages --zero "
                        f"{','.join(map(str, args.zero))}")
    sp_choices = ON_OFF_BOTH[args.sp]
    if "sp" in fixed and bool(fixed["sp"]) not in sp_choices:
        raise SpecError(f"--fix sp={'on' if fixed['sp'] else 'off'} contradicts --sp {args.sp}")
    offload = getattr(args, "optimizer_offload", "off")
    trainer = getattr(args, "trainer", None) or "megatron"
    if offload == "on" and not trainer_named(trainer).optimizer_offload_zero:
        raise SpecError(f"--optimizer-offload on: {trainer} has no optimizer offload "
                        f"({trainer_named(trainer).version}); plan with --trainer megatron")
    recompute = (RECOMPUTE_MODES if args.recompute in ("uniform", "per-layer", "greedy")
                 else CLASSIC_MODES if args.recompute == "classic" else (args.recompute,))
    return SpaceOptions(fix=fix, max=bounds, recompute_modes=recompute, zero_stages=tuple(args.zero),
                        sp_choices=sp_choices, tp_cp_bound=args.tp_cp_bound, max_offset=args.max_offset,
                        cp_comms=cp_comms,
                        schedules=trainer_schedules(args, getattr(args, "schedules", DEFAULT_SCHEDULES)),
                        optimizer_offloads=ON_OFF_BOTH[offload])


def run(args: argparse.Namespace) -> int:
    # Imported here, not at the top: the solvers import OR-Tools (~1 s, measured), which `ndcp models`, `devices`,
    # `estimate` and `validate` (~0.2 s each) should not pay for.
    from ..solve.search import SearchOptions, search, search_method

    model, cluster, run_spec = build_problem(args)
    check_max_offset(args.max_offset, model)
    args.fix = pinned_by_file(args, model, run_spec)
    space = SearchSpace(model, cluster, run_spec, build_space_options(args))
    check_recompute_runs(space)
    check_fixed_values(space)
    json_only, csv_only = stdout_owners(args)
    greedy = args.recompute == "greedy"
    if greedy and args.exhaustive:
        raise SpecError("--recompute greedy prices every candidate's greedy plan already; drop --exhaustive")
    check_emit_arguments(args, stdout_taken=json_only or csv_only)
    check_plot_path(args.plot)
    shown = not (json_only or csv_only or args.quiet)
    with SearchProgress(shown, "exhaustive" if args.exhaustive else "greedy" if greedy else "cp-sat") as progress:
        options = SearchOptions(top=args.top, time_limit=args.time_limit, seed=args.seed, workers=args.workers,
                                progress=progress)
        result = search(space, trainer_method(args, search_method(args.recompute, args.exhaustive)), options)
    found = bool(result.strategies)
    code = EXIT_OK if found else EXIT_INFEASIBLE
    if args.plot:
        write_plot(args.plot, lambda path: plot_search(result, path))
    if found and args.emit and args.emit_file:
        write_emitted(args, model, run_spec, result.best.strategy)
        print_comparison(args.emit, model, cluster, run_spec, result.best.strategy)
    if args.csv:
        write_ranking_csv(result, args.csv)
    emit_json(args, search_document(model, cluster, run_spec, space, result))
    if json_only or csv_only:  # stdout holds one document: nothing else goes there
        if not found:
            print(f"ndcp: {result.status}: {one_line(result.explanation or 'no strategy found')}", file=sys.stderr)
        return code
    if args.quiet:
        print(result_line(result))
    else:
        render_search(console(), model, cluster, run_spec, space, result)
    if found and args.emit and not args.emit_file:
        write_emitted(args, model, run_spec, result.best.strategy)
        print_comparison(args.emit, model, cluster, run_spec, result.best.strategy)
    return code


__all__ = ["register", "run", "parse_degree_bounds", "build_space_options", "zero_stages", "check_fixed_values",
           "check_bounds_agree", "EXAMPLE"]
