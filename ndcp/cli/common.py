"""What every `ndcp` command shares: exit codes and errors, the parser, the problem arguments (model, cluster, run:
ndcp.options' tables) and the strategy arguments (--strategy / --strategy-file / --strategy-from). Building the
problem and the strategy from them is ndcp.policy's, shared with the Python API."""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import textwrap
from typing import Any

from rich.console import Console

from ..options import CLUSTER_OPTIONS, RUN_OPTIONS, add_options, strategy_options
from ..policy import build_strategy  # also importable from here (tests)

# exit codes: a strategy found; proven infeasible; a user error; an internal error; stopped before any strategy was
# verified (status unknown: nothing is known to fit or proven not to)
EXIT_OK, EXIT_INFEASIBLE, EXIT_USAGE, EXIT_INTERNAL, EXIT_UNKNOWN = 0, 1, 2, 3, 4
EXIT_INTERRUPTED = 130  # Ctrl-C where no search answer is at stake (128 + SIGINT, the shells' convention)
# Commands whose answer is a search: Ctrl-C before it has verified anything is status `unknown` (exit 4), as a search
# stopped by its time limit is; once it has, the search itself reports what it proved (ndcp.solve.result.finish).
SEARCH_COMMANDS = ("search", "sweep", "recompute")


class UsageError(Exception):
    """A command-line mistake found by argparse (unknown option, missing argument, bad value)."""


class InternalError(RuntimeError):
    """Something in ndcp itself went wrong (not the user's input)."""


class Parser(argparse.ArgumentParser):
    """argparse that reports errors as one line through `main` instead of usage + exit."""

    def error(self, message: str):  # noqa: D401 - argparse API
        raise UsageError(message)


MAX_HELP_WIDTH = 100  # columns of --help on a wider terminal (longer lines read badly)


class Formatter(argparse.HelpFormatter):
    """argparse's help wrapped to the terminal (argparse reads its width from COLUMNS): the help of an argument, and
    each paragraph of a description or epilog (its lines not indented), wrap between words, never inside one (nor
    at a hyphen); indented lines (examples) are kept as written. Wider terminals read at most MAX_HELP_WIDTH."""

    def __init__(self, prog):
        super().__init__(prog, max_help_position=34,
                         width=min(shutil.get_terminal_size().columns, MAX_HELP_WIDTH) - 2)  # argparse's margin

    def _split_lines(self, text: str, width: int) -> list[str]:
        return _wrap(text, width)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        lines: list[str] = []
        paragraph: list[str] = []
        for line in text.splitlines() + [""]:
            if line.strip() and not line[0].isspace():
                paragraph.append(line)
                continue
            lines += [indent + wrapped for wrapped in _wrap(" ".join(paragraph), width - len(indent))]
            paragraph = []
            lines.append(indent + line if line.strip() else "")
        return "\n".join(lines[:-1])


def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(" ".join(text.split()), max(width, 20), break_long_words=False, break_on_hyphens=False)


def one_line(message: Any) -> str:
    return " ".join(str(message).split()) or "unknown error"


def print_note(note: str) -> None:
    """`ndcp: note: ...` on stderr (print_message)."""
    print_message(f"note: {note}")


def print_message(message: str) -> None:
    """`ndcp: MESSAGE` on stderr: on a terminal wrapped between words to its width (following lines indented),
    else one line (a log keeps one line per message)."""
    text = f"ndcp: {one_line(message)}"
    if sys.stderr.isatty():
        text = "\n".join(textwrap.wrap(text, shutil.get_terminal_size().columns - 1, subsequent_indent="    ",
                                       break_long_words=False, break_on_hyphens=False))
    print(text, file=sys.stderr)


# -- parsers and the problem arguments ---------------------------------------------------------------------------
def subparser(subparsers, name: str, help: str, description: str, example: str) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(name, help=help, description=description, formatter_class=Formatter,
                                   epilog="example:\n  " + example.replace("\n", "\n  "))
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks for errors")
    return parser


def add_problem_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments every planning command shares: the model, the cluster and the run (ndcp.options: the run's
    flags are RunSpec's fields, their help the fields' docstrings)."""
    parser.add_argument("model", metavar="MODEL",
                        help="library model name (see `ndcp models`), a model YAML spec, or a Hugging Face config.json")
    add_options(parser.add_argument_group("cluster"), CLUSTER_OPTIONS)
    add_options(parser.add_argument_group("run"), RUN_OPTIONS)


def add_quiet_argument(group) -> None:
    """--quiet / -q, on every command: only the one-line result (a list command: only the names)."""
    group.add_argument("--quiet", "-q", action="store_true", help="print only the one-line result")


class _Console(Console):
    """rich's console, but a reader that stops early (`ndcp models | head -3`) ends the command as main() ends any
    closed pipe, exit 0: rich's own ends it with exit 1, ndcp's code for an infeasible search."""

    def on_broken_pipe(self) -> None:
        # stdout to /dev/null first, so nothing fails again writing at exit (Python's signal docs, "Note on SIGPIPE")
        self.quiet = True
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise BrokenPipeError


def console() -> Console:
    """The console for human-readable output (stdout)."""
    return _Console(highlight=False)


# -- strategies --------------------------------------------------------------------------------------------------
def add_strategy_arguments(parser: argparse.ArgumentParser, strategy_help: str, file_help: str) -> None:
    """--strategy K=V,... and --strategy-file PLAN.yaml (read by policy.strategy_values)."""
    add_options(parser.add_argument_group("strategy"), strategy_options(strategy_help, file_help))


__all__ = ["EXIT_OK", "EXIT_INFEASIBLE", "EXIT_USAGE", "EXIT_INTERNAL", "EXIT_UNKNOWN", "EXIT_INTERRUPTED",
           "SEARCH_COMMANDS", "UsageError", "InternalError",
           "Parser", "Formatter", "subparser", "add_problem_arguments", "add_strategy_arguments", "add_quiet_argument",
           "console", "one_line", "print_note", "print_message", "build_strategy"]
