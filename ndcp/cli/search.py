"""`ndcp search`: the fastest strategy that fits, with a proof (or the best found with its bound and gap).

The flags of the search space and the solver are ndcp.options'; what is searched (the checks, the space options,
what an explicit --trainer runs) is ndcp.policy's and ndcp.api's, so `ndcp.search(...)` answers as this command
does: this module parses, calls ndcp.api and prints.
"""
from __future__ import annotations

import argparse
import sys

from ..api import answer_search, plan_search
from ..options import SEARCH_STRATEGY_FROM, SOLVER_OPTIONS, SPACE_OPTIONS, add_options
from ..policy import parse_degree_bounds  # also importable from here (tests)
from ..report.csvout import write_ranking_csv
from ..report.emit import trainer_best_lines
from ..report.plots import plot_search
from ..report.progress import SearchProgress
from ..report.search import one_line as result_line, render_search
from ..report.validated import validated_lines
from ..solve.result import UNKNOWN
from .common import (EXIT_INFEASIBLE, EXIT_OK, EXIT_UNKNOWN, add_problem_arguments, add_quiet_argument, console,
                     one_line, print_message, print_note, subparser)
from .outputs import (add_emit_arguments, add_json_argument, check_emit_arguments, check_plot_path, emit_json,
                      output_path, stdout_owners, write_launch, write_plot)

EXAMPLE = ("ndcp search llama3-70b --device h100 --gpus 1024 --global-batch 1024 \\\n"
           "    --seq-len 8192 --memory-cap 75GiB --top 10\n"
           "ndcp search tiny --device h100 --gpus 8 --global-batch 32 --seq-len 1024 \\\n"
           "    --fix tp=2 --json -")


def register(subparsers) -> None:
    parser = subparser(
        subparsers, "search", "the fastest strategy that fits, with a proof",
        "Search the parallel strategies (tp, pp, cp, dp, ep, etp, vpp, mbs, mbn, ZeRO, SP, recompute) for the "
        "fastest step time that fits in memory. CP-SAT solves a relaxation and verifies its best points with the "
        "full estimators until no unverified strategy can enter the top K (status `optimal`); at the time limit "
        "it reports the best verified strategies with the proven bound and the gap (status `feasible`); stopped "
        "(time limit or Ctrl-C) before any strategy was verified, status `unknown`. --exhaustive prices every valid "
        "strategy instead (the reference oracle).\n\n"
        "--fix and --max take comma-separated key=value over tp, pp, cp, dp, ep, etp, vpp, mbs, mbn, zero, sp. "
        "Exit 0 when a strategy is found, 1 when none fits (status `infeasible`, proven; the reason is printed), "
        "2 for usage errors, 3 for an internal error, 4 when stopped before any strategy was verified (`unknown`).",
        EXAMPLE)
    add_problem_arguments(parser)
    add_options(parser.add_argument_group("search space"), SPACE_OPTIONS)
    add_options(parser.add_argument_group("solver"), SOLVER_OPTIONS)
    group = parser.add_argument_group("output")
    add_json_argument(parser)
    group.add_argument("--csv", metavar="PATH|-", type=output_path,
                       help="also write the ranked strategies as CSV; `-` writes only the CSV to stdout")
    add_quiet_argument(group)
    add_emit_arguments(group, "the winner")
    SEARCH_STRATEGY_FROM.add_to(group)
    group.add_argument("--plot", metavar="PATH", type=output_path,
                       help="plot the ranking and the winner's memory (.png or .svg; needs matplotlib)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    planned = plan_search(args)
    model, cluster, run_spec, space = planned.model, planned.cluster, planned.run, planned.space
    json_only, csv_only = stdout_owners(args)
    check_emit_arguments(args, stdout_taken=json_only or csv_only)
    check_plot_path(args.plot)
    shown = not (json_only or csv_only or args.quiet)
    greedy = args.recompute == "greedy"
    with SearchProgress(shown, "exhaustive" if args.exhaustive else "greedy" if greedy else "cp-sat") as progress:
        for note in planned.notes:
            print_note(note)
        answer = answer_search(planned, args, progress)
    result = answer.result
    found = bool(result.strategies)
    code = EXIT_OK if found else EXIT_UNKNOWN if result.status == UNKNOWN else EXIT_INFEASIBLE
    if args.plot:
        write_plot(args.plot, lambda path: plot_search(result, path))
    if answer.launch is not None and args.emit_file and not write_launch(args, answer.launch):
        code = EXIT_INFEASIBLE
    if args.csv:
        write_ranking_csv(result, args.csv)
    emit_json(args, answer.document())
    if json_only or csv_only:  # stdout holds one document: nothing else goes there
        if not found:
            print(f"ndcp: {result.status}: {one_line(result.explanation or 'no strategy found')}", file=sys.stderr)
        return code
    if args.quiet:
        print(result_line(result))
    else:
        out = console()
        render_search(out, model, cluster, run_spec, space, result, planned.trainer)
        for line in validated_lines(result, answer.validated):
            out.print(line)
    if answer.trainer_best is not None:
        for line in trainer_best_lines(answer.trainer_best):
            print_message(line)
    if answer.launch is not None and not args.emit_file and not write_launch(args, answer.launch):
        code = EXIT_INFEASIBLE
    return code

__all__ = ["register", "run", "parse_degree_bounds", "EXAMPLE"]
