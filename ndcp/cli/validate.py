"""`ndcp validate`: estimated vs measured MFU, step time and memory for a file of measured runs."""
from __future__ import annotations

import argparse

from ..options import positive_seconds
from ..validation.unknowns import PINNED_TIME_LIMIT
from .common import EXIT_OK, add_quiet_argument, console, subparser
from .outputs import add_json_argument, emit_json


def register(subparsers) -> None:
    parser = subparser(subparsers, "validate", "compare estimates with measured runs",
                       "Estimate every run in a file of measured training runs (YAML or CSV) and report how far the "
                       "memory and step-time estimates are from the measurements.",
                       "ndcp validate runs.yaml\nndcp validate runs.csv --json report.json\n"
                       "ndcp validate runs.yaml --time-limit 30")
    parser.add_argument("runs", metavar="RUNS.yaml|RUNS.csv", help="measured runs")
    parser.add_argument("--time-limit", metavar="SECONDS", type=positive_seconds, default=None,
                        help="time limit of the whole command (default: none), checked before each run: a run already "
                             "started finishes (a run that leaves knobs unknown searches them for at most "
                             f"{PINNED_TIME_LIMIT:g} s); the runs not reached are listed as skipped, with the summary "
                             "of those compared (--json: `complete` false, their `skipped` entries `reached` false)")
    add_json_argument(parser)
    add_quiet_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Imported here, not at the top: ndcp.validation imports numpy (+0.1 s, measured: +60 % on `ndcp models`),
    # which only this command needs.
    from ..report.validation import render_validation, summary_line
    from ..validation import validate_file

    result = validate_file(args.runs, args.time_limit)
    if emit_json(args, result.as_dict()):
        return EXIT_OK
    if args.quiet:
        print(summary_line(result))
    else:
        render_validation(result, console())
    return EXIT_OK


__all__ = ["register", "run"]
