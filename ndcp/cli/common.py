"""What every `ndcp` command shares: exit codes and errors, the parser, the problem arguments (model, cluster, run:
ndcp.options' tables) and the strategy arguments (--strategy / --strategy-file / --strategy-from). Building the
problem and the strategy from them is ndcp.policy's, shared with the Python API."""
from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import textwrap
from typing import Any

from rich.console import Console

from ..entry import EXIT_INTERRUPTED, EXIT_UNKNOWN, SEARCH_COMMANDS
from ..options import CLUSTER_OPTIONS, RUN_OPTIONS, add_options, strategy_options
from ..policy import build_strategy  # also importable from here (tests)
from ..report.output import printable

# exit codes: a strategy found; proven infeasible; a user error; an internal error; stopped before any strategy was
# verified (status unknown: nothing is known to fit or proven not to)
EXIT_OK, EXIT_INFEASIBLE, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
# EXIT_UNKNOWN (4), EXIT_INTERRUPTED (130) and SEARCH_COMMANDS, the commands whose answer is a search (Ctrl-C before
# it has verified anything is status `unknown`, as a search stopped by its time limit is; once it has, the search
# itself reports what it proved, ndcp.solve.result.finish), are ndcp.entry's: its handler needs them before imports.


class UsageError(Exception):
    """A command-line mistake found by argparse (unknown option, missing argument, bad value)."""


class InternalError(RuntimeError):
    """Something in ndcp itself went wrong (not the user's input)."""


class Parser(argparse.ArgumentParser):
    """argparse that reports errors as one line through `main` instead of usage + exit. A value that starts with
    `-` (`--memory-cap -1GiB`) reads to argparse as another option ("expected one argument"): the error then says
    what is wrong with the value, as `--memory-cap=-1GiB` would."""

    def parse_known_args(self, args=None, namespace=None):
        self._words = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str):  # noqa: D401 - argparse API
        raise UsageError(self._dash_value_error(message) or _spaced_list_hint(message))

    def _dash_value_error(self, message: str) -> str | None:
        """For "argument --X: expected one argument" where the word after --X starts with `-` and a digit or a
        point: the option's own verdict on that word (its type's error), or how to pass it."""
        match = re.fullmatch(r"argument (\S+): expected one argument", message)
        words = getattr(self, "_words", [])
        if match is None:
            return None
        names = match.group(1).split("/")
        at = next((i for i, word in enumerate(words) if word in names), None)
        value = words[at + 1] if at is not None and at + 1 < len(words) else ""
        if not re.match(r"-[0-9.]", value):
            return None
        action = self._option_string_actions.get(names[0])
        try:
            if action is not None and callable(action.type):
                action.type(value)
        except (argparse.ArgumentTypeError, TypeError, ValueError) as error:
            return f"argument {match.group(1)}: {error}"
        return f"argument {match.group(1)}: a value that starts with '-' is written {names[0]}={value}"


def _spaced_list_hint(message: str) -> str:
    """argparse's "unrecognized arguments: pp=2" for `--strategy tp=2 pp=2`, with how such a list is written."""
    match = re.fullmatch(r"unrecognized arguments: (.*)", message)
    if match and any(re.fullmatch(r"[a-z_]+=\S*", word) for word in match.group(1).split()):
        return (f"{message} (key=value settings are one comma-separated list without spaces: --strategy tp=2,pp=2, "
                "--fix tp=8,pp=4)")
    return message


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
    """The message on one line, its control characters escaped (report.output.printable)."""
    return printable(" ".join(str(message).split())) or "unknown error"


# Characters of an `ndcp: error:` line; the longest ndcp writes itself (a list of valid choices) has 584.
MAX_ERROR_LENGTH = 600


def error_line(message: Any) -> str:
    """one_line, at most MAX_ERROR_LENGTH characters: a longer one (a huge value quoted in it) is elided in the
    middle, where the value is, so the field it names and what would be valid stay."""
    text = one_line(message)
    if len(text) <= MAX_ERROR_LENGTH:
        return text
    tail = MAX_ERROR_LENGTH // 3
    return f"{text[:MAX_ERROR_LENGTH - tail - 5]} ... {text[-tail:]}"


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
    closed pipe, exit 0: rich's own ends it with exit 1, ndcp's code for an infeasible search; and the control
    characters of the text it prints (names read from files) escaped (report.output.printable), its own styles
    kept."""

    def _render_buffer(self, buffer) -> str:  # rich.console.Console's: the segments to the text it writes
        return super()._render_buffer(segment if segment.control else segment._replace(text=printable(segment.text))
                                      for segment in buffer)

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
           "console", "one_line", "error_line", "print_note", "print_message", "build_strategy"]
