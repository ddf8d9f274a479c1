"""The `ndcp` command line: one module per command, registered in COMMANDS.

Adding a command: a module with `register(subparsers)` that calls `common.subparser(...)`, adds its arguments
(`common.add_problem_arguments` for the model/cluster/run, `outputs.add_json_argument` for --json) and sets
`func=run`; `run(args)` calls the Python API (ndcp.api, ndcp.policy: `build_problem(args)` builds the problem) and
prints, returning the exit code. Options the API takes too are defined once, in ndcp.options. Raise SpecError for
anything the user can fix: `main` turns it into one `ndcp: error: ...` line, exit 2.

Exit codes: 0 success (an estimate that does not fit is still a success), 1 infeasible (search), 2 user error,
3 internal error.
"""
from __future__ import annotations

import argparse
import sys
import traceback
from typing import Callable

from .. import __version__
from ..entry import interrupted, signalled
from ..report.output import all_or_nothing
from ..specs.fields import SpecError
from . import calibrate, estimate, listings, recompute, replan, search, sweep, validate
from ..policy import build_problem, build_space_options, build_strategy
from .common import (EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_UNKNOWN, EXIT_USAGE, SEARCH_COMMANDS, Formatter,
                     InternalError, Parser, UsageError, error_line)
from .startup import before_exit, collect_less, defer_pandas
from .streams import guarded_stdout

# Registration functions, in the order `ndcp --help` lists them.
COMMANDS: list[Callable] = [estimate.register, search.register, recompute.register, listings.register_models,
                            listings.register_devices, validate.register, sweep.register, replan.register,
                            calibrate.register]


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="ndcp", formatter_class=Formatter,
                    description="Find (or check) the fastest LLM-training parallel strategy that fits in memory.",
                    epilog="examples:\n  ndcp models\n  ndcp devices\n  " + estimate.EXAMPLE.replace("\n", "\n  ")
                           + "\n\nrun `ndcp COMMAND --help` for each command's options.")
    parser.add_argument("--debug", action="store_true", default=False, help="show tracebacks for errors")
    parser.add_argument("--version", action="version", version=f"ndcp {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=Parser)
    for register in COMMANDS:
        register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns the exit code (0 ok, 1 infeasible, 2 user error, 3 internal error, 4 unknown, 130
    interrupted)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    defer_pandas()
    debug = "--debug" in argv
    try:
        with guarded_stdout():
            args = build_parser().parse_args(argv)
            debug = debug or getattr(args, "debug", False)
            with all_or_nothing():  # the command's output files appear together when it ends, or none does
                return int(args.func(args) or EXIT_OK)
    except UsageError as error:
        print(f"ndcp: error: {error_line(error)}", file=sys.stderr)
        return EXIT_USAGE
    except SpecError as error:
        if debug:
            traceback.print_exc()
        print(f"ndcp: error: {error_line(error)}", file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as exit_:  # --help / --version
        code = exit_.code
        return code if isinstance(code, int) else (EXIT_OK if code is None else EXIT_USAGE)
    except KeyboardInterrupt:
        return interrupted(argv)
    except BrokenPipeError:
        return EXIT_OK
    except Exception as error:  # noqa: BLE001 - the last line of defence
        if signalled():  # e.g. ImportError from a C extension that Ctrl-C interrupted while it initialised
            return interrupted(argv)
        if debug:
            traceback.print_exc()
        what = error_line(error if isinstance(error, InternalError) else f"{type(error).__name__}: {error}")
        print(f"ndcp: internal error: {what}" + ("" if debug else " (rerun with --debug for the traceback)"),
              file=sys.stderr)
        return EXIT_INTERNAL


def console() -> int:
    """The command line in a process of its own (ndcp.entry.console calls it, its signal handler in place): `main`,
    its garbage collector tuned for one command (startup.collect_less, before_exit). Library callers and tests call
    `main`."""
    collect_less()
    try:
        return main()
    finally:
        before_exit()


# Also importable from here (scripts/ and tests use them): build_problem, build_strategy, build_space_options.
__all__ = ["main", "console", "build_parser", "COMMANDS", "build_problem", "build_strategy", "build_space_options"]
