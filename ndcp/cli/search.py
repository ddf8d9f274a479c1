"""`ndcp search`: the fastest strategy that fits, with a proof (or the best found with its bound and gap)."""
from __future__ import annotations

import argparse
import sys

from ..report.csvout import write_ranking_csv
from ..report.jsonout import search_document
from ..report.plots import plot_search
from ..report.progress import SearchProgress
from ..report.search import one_line as result_line, render_search
from ..space import DIMENSIONS, SearchSpace, SpaceOptions
from ..specs.fields import SpecError
from ..specs.strategy import CP_COMM_TYPES, RECOMPUTE_MODES
from ..specs.strategy_input import OFF_WORDS, ON_WORDS
from .common import (EXIT_INFEASIBLE, EXIT_OK, add_problem_arguments, build_problem, check_max_offset, console, int32,
                     one_line, positive_int, positive_seconds, subparser, workers)
from .outputs import (add_emit_arguments, add_json_argument, check_emit_arguments, check_plot_path, emit_json,
                      stdout_owners, write_emitted, write_plot)

EXAMPLE = ("ndcp search llama3-70b --device h100 --gpus 1024 --global-batch 1024 --seq-len 8192 \\\n"
           "    --memory-cap 75GiB --top 10\n"
           "ndcp search tiny --device h100 --gpus 8 --global-batch 32 --seq-len 1024 --fix tp=2 --json -")
SEARCH_KEYS = DIMENSIONS + ("sp",)


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
    group.add_argument("--fix", metavar="K=V,...", default="", help="pin dimensions, e.g. tp=8,pp=16")
    group.add_argument("--max", metavar="K=V,...", default="", dest="max_", help="bound dimensions, e.g. tp=8")
    group.add_argument("--recompute", choices=("uniform", "per-layer", "greedy", "none", "selective", "full"),
                       default="per-layer",
                       help="activation recompute: `per-layer` (default) decides per stage how many layers keep, "
                            "selectively or fully recompute activations, jointly with the degrees (never slower than "
                            "uniform); `uniform` searches none/selective/full applied to every layer (faster); "
                            "`greedy` gives every candidate the reference planner's greedy per-stage plan "
                            "(status `heuristic`: no proof, for comparison); or one mode for every layer")
    group.add_argument("--max-offset", metavar="N", type=int32, default=0,
                       help="per-layer: layers a stage may hold above or below the even partition (default 0: the "
                            "even partition; each unit widens the plan models and slows the proof)")
    group.add_argument("--zero", metavar="STAGES", type=zero_stages, default=(0, 1, 2, 3),
                       help="ZeRO stages to search (default 0,1,2,3)")
    group.add_argument("--sp", choices=("on", "off", "both"), default="both",
                       help="sequence parallelism (only with tp > 1; default both)")
    group.add_argument("--tp-cp-bound", metavar="N", type=positive_int, default=0,
                       help="bound tp x cp (default: tp within a node, cp unbounded)")
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
    group.add_argument("--quiet", "-q", action="store_true", help="print only the one-line result")
    add_emit_arguments(group, "the winner")
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


def build_space_options(args: argparse.Namespace) -> SpaceOptions:
    """SpaceOptions from the search arguments. Raises SpecError for contradictions."""
    fix = parse_degree_bounds("--fix", args.fix)
    bounds = parse_degree_bounds("--max", args.max_)
    fixed = dict(fix)
    if "zero" in fixed and fixed["zero"] not in args.zero:
        raise SpecError(f"--fix zero={fixed['zero']} is not among the searched stages --zero "
                        f"{','.join(map(str, args.zero))}")
    sp_choices = {"on": (True,), "off": (False,), "both": (False, True)}[args.sp]
    if "sp" in fixed and bool(fixed["sp"]) not in sp_choices:
        raise SpecError(f"--fix sp={'on' if fixed['sp'] else 'off'} contradicts --sp {args.sp}")
    recompute = RECOMPUTE_MODES if args.recompute in ("uniform", "per-layer", "greedy") else (args.recompute,)
    return SpaceOptions(fix=fix, max=bounds, recompute_modes=recompute, zero_stages=tuple(args.zero),
                        sp_choices=sp_choices, tp_cp_bound=args.tp_cp_bound, max_offset=args.max_offset,
                        cp_comms=args.cp_comm)


def run(args: argparse.Namespace) -> int:
    # Imported here, not at the top: the solvers import OR-Tools (~1 s, measured), which `ndcp models`, `devices`,
    # `estimate` and `validate` (~0.2 s each) should not pay for.
    from ..solve.search import SearchOptions, search, search_method

    model, cluster, run_spec = build_problem(args)
    check_max_offset(args.max_offset, model)
    space = SearchSpace(model, cluster, run_spec, build_space_options(args))
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
        result = search(space, search_method(args.recompute, args.exhaustive), options)
    found = bool(result.strategies)
    code = EXIT_OK if found else EXIT_INFEASIBLE
    if args.plot:
        write_plot(args.plot, lambda path: plot_search(result, path))
    if found and args.emit and args.emit_file:
        write_emitted(args, model, run_spec, result.best.strategy)
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
    return code


__all__ = ["register", "run", "parse_degree_bounds", "build_space_options", "zero_stages", "EXAMPLE"]
