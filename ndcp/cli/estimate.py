"""`ndcp estimate`: memory per pipeline stage and step time of one given strategy."""
from __future__ import annotations

import argparse

from ..api import estimate_strategy
from ..launch import check_launch
from ..options import ESTIMATE_STRATEGY, ESTIMATE_STRATEGY_FROM, add_options
from ..report.terminal import estimate_line, render_estimate
from .common import EXIT_INFEASIBLE, EXIT_OK, add_problem_arguments, add_quiet_argument, console, subparser
from .outputs import add_emit_arguments, add_json_argument, check_emit_arguments, emit_json, write_launch

EXAMPLE = ("ndcp estimate llama3-8b --device h100 --gpus 16 --global-batch 64 \\\n"
           "    --seq-len 4096 --strategy tp=2,pp=2,zero=1,sp=on,recompute=selective\n"
           "ndcp estimate gpt3-175b --device a100-80g --gpus 1024 --global-batch 1536 \\\n"
           "    --seq-len 2048 --strategy tp=8,pp=16,mbs=1,sp=on,recompute=selective \\\n"
           "    --memory-cap 75GB --json plan.json")


def register(subparsers) -> None:
    parser = subparser(
        subparsers, "estimate", "memory and step time of one given strategy",
        "Estimate per-device memory (per pipeline stage) and step time of one parallel strategy.\n\n"
        "--strategy is comma-separated key=value over dp, tp, pp, cp, ep, etp, vpp, mbs, mbn, zero (0-3), "
        "sp (on/off), recompute (none|selective|full) and schedule (1f1b|interleaved); HSDP as dp_shard=N (ZeRO-3 "
        "over N data-parallel ranks of a replica, replicated over dp/N) or dp_replicate=R. Unspecified: tp, pp, cp, "
        "ep, etp, vpp, mbs = 1, zero = 1, sp off, recompute none; dp = gpus / (tp*pp*cp); mbn = global batch / "
        "(dp*mbs); schedule interleaved when vpp > 1. --strategy-file is a YAML with the same keys plus "
        "`layers_per_stage: [...]` and `recompute: {stages: [{none: N, selective: N, full: N}, ...]}`; "
        "keys given in --strategy override the file. Exit 0 even when the strategy does not fit.",
        EXAMPLE)
    add_problem_arguments(parser)
    add_options(parser.add_argument_group("strategy"), ESTIMATE_STRATEGY)
    ESTIMATE_STRATEGY_FROM.add_to(parser)
    add_json_argument(parser)
    add_quiet_argument(parser)
    add_emit_arguments(parser, "the strategy")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    done = estimate_strategy(args)
    model, cluster, run_spec, strategy, memory, time = (done.model, done.cluster, done.run, done.strategy,
                                                        done.memory, done.time)
    check_emit_arguments(args, stdout_taken=getattr(args, "json", None) == "-")
    launch = check_launch(args.emit, args, (model, cluster, run_spec), strategy) if args.emit else None
    document = done.document()
    if launch is not None:
        document["emitted"] = launch.document()
    if emit_json(args, document):
        pass
    elif args.quiet:
        print(estimate_line(strategy, memory, time))
    else:
        render_estimate(console(), model, cluster, run_spec, strategy, memory, time, [])
    if launch is not None and not write_launch(args, launch):
        return EXIT_INFEASIBLE
    return EXIT_OK


__all__ = ["register", "run", "EXAMPLE"]
