"""The output options the commands share: --json, --emit/--emit-file and --plot, and who gets stdout.

Every file goes through ndcp.report.output.write_output, so an unwritable path is one `ndcp: error:` line, exit 2.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable

from ..launch import LaunchCheck
from ..policy import ANY_TRAINER
from ..report.emit import KINDS, launch_lines
from ..report.jsonout import write_json
from ..report.output import STDOUT, write_output
from ..specs.fields import SpecError
from .common import one_line, print_message

EMIT_KINDS = KINDS  # the emitters ndcp.report.emit has


def output_path(text: str) -> str:
    """The argparse type of every output option (--json, --csv, --plot, --emit-file, --jsonl, --output): an empty
    path is refused (it would otherwise read as the option not given, and nothing be written)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is an empty path; give a file path")
    return text


def add_json_argument(parser) -> None:
    parser.add_argument("--json", metavar="PATH|-", dest="json", type=output_path,
                        help="also write the result as JSON to PATH; `-` writes only the JSON to stdout")


def emit_json(args: argparse.Namespace, doc: Any) -> bool:
    """Write `doc` if --json was given. Returns True when it went to stdout (print nothing else there then)."""
    path = getattr(args, "json", None)
    if not path:
        return False
    write_json(doc, path)
    return path == STDOUT


def stdout_owners(args: argparse.Namespace) -> tuple[bool, bool]:
    """(--json -, --csv -): which of them writes only its document to stdout; both at once is a user error."""
    json_only, csv_only = getattr(args, "json", None) == STDOUT, getattr(args, "csv", None) == STDOUT
    if json_only and csv_only:
        raise SpecError("--json - and --csv - both write to stdout; give one of them a file path")
    return json_only, csv_only


# -- trainer configurations (search, estimate, recompute) --------------------------------------------------------
def add_emit_arguments(parser, what: str) -> None:
    parser.add_argument("--emit", choices=EMIT_KINDS,
                        help=f"print the launch configuration of {what} for a trainer: Megatron-LM's "
                             "pretrain_gpt.py arguments, torchtitan's command-line arguments (--module/--config "
                             "and overrides), each with the settings you fill in (tokenizer, data, steps, "
                             "learning-rate schedule, checkpoints) last, as <PLACEHOLDERS>, or a MindFormers YAML; "
                             "checked first: read back as --strategy-from reads it, it must run the plan (same step "
                             "time and peak) and fit, else nothing is written and the exit status is 1; without "
                             "--trainer, --emit X plans for X")
    parser.add_argument("--emit-file", metavar="PATH", type=output_path,
                        help="write the --emit configuration to PATH instead of stdout")
    parser.add_argument("--emit-anyway", action="store_true",
                        help="write the --emit configuration even when it is not the plan or does not fit (its "
                             "first lines say so)")


def check_emit_arguments(args: argparse.Namespace, stdout_taken: bool) -> None:
    emit_kind, emit_file = getattr(args, "emit", None), getattr(args, "emit_file", None)
    if (emit_file or getattr(args, "emit_anyway", False)) and not emit_kind:
        raise SpecError(f"{'--emit-file' if emit_file else '--emit-anyway'} needs --emit "
                        + "|".join(EMIT_KINDS))
    if emit_kind and not emit_file and stdout_taken:
        raise SpecError("--emit writes to stdout, which --json -/--csv - already use; add --emit-file PATH")
    planned = getattr(args, "trainer", None)
    if emit_kind and planned not in (None, ANY_TRAINER, emit_kind):
        # refused before any search: the plans would be the other trainer's, priced with its behaviour
        raise SpecError(f"--emit {emit_kind} with --trainer {planned}: the plans would be {planned}'s; use --trainer "
                        f"{emit_kind} (or leave --trainer out: --emit's trainer is planned), or --trainer any")


def write_launch(args: argparse.Namespace, check: LaunchCheck) -> bool:
    """Write the checked --emit configuration to --emit-file or stdout when it is the plan and fits, or under
    --emit-anyway (then its first lines say what is wrong); what the check found goes to stderr. Returns whether
    the command may exit 0: the file was the plan and fits, or --emit-anyway."""
    if not check.ok and not args.emit_anyway:
        for line in launch_lines(check):
            print_message(line)
        print_message(f"not written: the {check.trainer} configuration is not an answer (--emit-anyway writes it)")
        return False
    warning = "".join(f"# ndcp: WARNING: {reason}\n" for reason in check.reasons)
    write_output(warning + check.text, args.emit_file or STDOUT, "--emit-file")  # an unwritable path: exit 2 here
    for line in launch_lines(check):
        print_message(line)
    if args.emit_file:
        print_message(f"wrote the {check.trainer} configuration to {args.emit_file}")
    return True


# -- plots (search, recompute) -----------------------------------------------------------------------------------
def check_plot_path(path: str | None) -> None:
    if path and Path(path).suffix.lower() not in (".png", ".svg"):
        raise SpecError(f"--plot {path}: the file name must end in .png or .svg")


def write_plot(path: str, draw: Callable[[str], Any]) -> None:
    """Draw and write the plot (report.plots writes through write_output); matplotlib missing or a drawing
    failure is a user error too."""
    try:
        draw(path)
    except SpecError:
        raise
    except (RuntimeError, ValueError, OSError) as error:
        raise SpecError(f"--plot {path}: {one_line(error)}") from None
    print(f"ndcp: wrote the plot to {path}", file=sys.stderr)


__all__ = ["output_path", "add_json_argument", "emit_json", "stdout_owners", "EMIT_KINDS", "add_emit_arguments",
           "check_emit_arguments", "write_launch", "check_plot_path", "write_plot"]
