"""`ndcp replan FILE --gpus N`: a running job's configuration planned again for another GPU count (ndcp.replanning),
with what changes, what that means for the checkpoint, and the new configuration for the same trainer (--emit PATH).
This module parses, calls ndcp.replanning and prints."""
from __future__ import annotations

import argparse
import sys

from ..options import SOLVER_OPTIONS, SPACE_OPTIONS, add_options
from ..replan_options import REPLAN_OPTIONS, REPLAN_OVERRIDES
from ..replanning import run_replan
from ..report.output import STDOUT
from ..report.progress import SearchProgress
from ..report.replan import render_replan, summary_lines
from ..solve.result import UNKNOWN
from ..specs.fields import SpecError
from .common import (EXIT_INFEASIBLE, EXIT_OK, EXIT_UNKNOWN, add_quiet_argument, console, one_line, print_note,
                     subparser)
from .outputs import add_json_argument, emit_json, output_path, write_launch

EXAMPLE = ("ndcp search llama3-70b --device h100 --gpus 1024 --global-batch 1024 \\\n"
           "    --seq-len 8192 --memory-cap 75GiB --emit megatron --emit-file run.sh\n"
           "ndcp replan run.sh --gpus 1536 --keep tp,pp --emit run-1536.sh")


def register(subparsers) -> None:
    parser = subparser(
        subparsers, "replan", "the best plan for another GPU count, and what that changes",
        "Plan a running job again for another GPU count: the proven best plan on --gpus N for the same model, "
        "sequence length, global batch (so the same tokens per step) and trainer -- `ndcp search` for the new count, "
        "so with nothing kept it is that search's answer -- with a table of what changes (degrees, batch split, "
        "layout), which dimensions the checkpoint reshards and whether the trainer's checkpoint format loads them "
        "(Megatron distributed checkpointing, torchtitan DCP, MindFormers transformation: docs/trainers.md §6), and "
        "the change in step time and in GPU-seconds per token. When no plan uses every GPU (no degrees multiply to "
        "the count with the global batch), it is the fastest plan on fewer whole nodes (each count searched, down to "
        "where the model FLOPs at the device's peak alone outlast the best step found).\n\n"
        "FILE is a configuration --strategy-from reads; its `# ndcp problem:` line (every --emit writes one) states "
        "the model, cluster and run, which the options below complete or override (a file ndcp did not write needs "
        "--model, --device and --from-gpus). Exit 0 when a plan is found, 1 when none fits (or the --emit file is "
        "not written), 2 for usage errors, 3 for an internal error, 4 when stopped before any strategy was verified.",
        EXAMPLE)
    parser.add_argument("file", metavar="FILE", help="the running job's configuration: Megatron-LM arguments, "
                                                     "torchtitan arguments or a MindFormers YAML")
    add_options(parser.add_argument_group("replan"), REPLAN_OPTIONS)
    add_options(parser.add_argument_group("the file's problem (default: its '# ndcp problem:' line)"),
                REPLAN_OVERRIDES)
    add_options(parser.add_argument_group("search space"), SPACE_OPTIONS)
    add_options(parser.add_argument_group("solver"), SOLVER_OPTIONS)
    group = parser.add_argument_group("output")
    add_json_argument(group)
    add_quiet_argument(group)
    group.add_argument("--emit", metavar="PATH", dest="emit_file", type=output_path,
                       help="write the new plan's configuration for the file's trainer to PATH (`-`: stdout), checked "
                            "as search --emit checks it (read back, the plan, fits), else not written and exit 1")
    group.add_argument("--emit-anyway", action="store_true",
                       help="write the --emit configuration even when it is not the plan or does not fit")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    json_only = args.json == STDOUT
    if json_only and args.emit_file == STDOUT:
        raise SpecError("--emit - and --json - both write to stdout; give one of them a file path")
    if args.emit_anyway and not args.emit_file:
        raise SpecError("--emit-anyway needs --emit PATH")
    shown = not (json_only or args.quiet)
    with SearchProgress(shown, "exhaustive" if args.exhaustive else "cp-sat") as progress:
        replanned = run_replan(args, progress)
    result = replanned.answer.result
    code = EXIT_OK if result.best else EXIT_UNKNOWN if result.status == UNKNOWN else EXIT_INFEASIBLE
    launch = replanned.answer.launch
    if launch is not None and args.emit_file != STDOUT and not write_launch(args, launch):
        code = EXIT_INFEASIBLE
    emit_json(args, replanned.document())
    if json_only:
        if result.best is None:
            print(f"ndcp: {result.status}: {one_line(result.explanation or 'no strategy found')}", file=sys.stderr)
        return code
    for note in replanned.answer.planned.notes if shown else ():
        print_note(note)
    if args.quiet:
        print(summary_lines(replanned)[1].removeprefix("to    "))
    else:
        render_replan(console(), replanned)
    if launch is not None and args.emit_file == STDOUT and not write_launch(args, launch):
        code = EXIT_INFEASIBLE
    return code


__all__ = ["register", "run", "EXAMPLE"]
