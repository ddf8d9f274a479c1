"""`ndcp sweep`: a proven search per (device, GPUs, global batch, sequence length) point, turned into time to train,
GPU-hours and cost (ideal, and expected with failures: docs/goodput.md); local worker processes or a Ray cluster; a
JSONL log that --resume continues from."""
from __future__ import annotations

import argparse
import contextlib
import copy
import os
import re
import sys

from ..estimate.goodput import (DEFAULT_AGGREGATE_BANDWIDTH, DEFAULT_GPU_MTBF_HOURS, DEFAULT_NODE_BANDWIDTH,
                                DEFAULT_RESTART_SECONDS, FailureSettings, Storage)
from ..report.output import check_writable, write_output
from ..options import SPACE_OPTIONS, bandwidth, int32, positive_int, positive_seconds
from ..policy import build_problem, build_space_options, trainer_method
from ..specs.fields import SpecError
from ..sweep.executors import EXECUTORS, run_jobs
from ..sweep.points import parse_counts, parse_devices, parse_gpus, parse_lengths, sweep_points
from ..sweep.report import SweepProgress, plot_sweep, print_sweep
from ..sweep.journal import FAILED, Journal
from ..sweep.results import sweep_csv, sweep_document
from ..sweep.solve import Job, derive
from ..specs.units import parse_count
from .common import EXIT_OK, add_problem_arguments, console, subparser
from .outputs import add_json_argument, check_plot_path, emit_json, output_path, stdout_owners, write_plot

EXAMPLE = ("ndcp sweep llama3-70b --device h100 --gpus 256,512,1024 \\\n"
           "    --global-batch 1024 --seq-len 8k --tokens 1T --price-per-gpu-hour 2.5 \\\n"
           "    --jsonl sweep.jsonl\n"
           "ndcp sweep llama3-8b --device h100,b200 --gpus 64..1024 \\\n"
           "    --global-batch 512,1024 --seq-len 8k --tokens 15T \\\n"
           "    --executor ray --ray-address auto --json sweep.json")


def register(subparsers) -> None:
    parser = subparser(
        subparsers, "sweep", "time to train, GPU-hours and cost over GPU counts, batches and devices",
        "Run one proven search (as `ndcp search`, top 1) per point of devices x GPU counts x global batches x "
        "sequence lengths, and turn each best strategy into time to train --tokens, GPU-hours and cost: ideal "
        "(no failure) and expected, with failures, checkpoints and restarts at the goodput the strategy's checkpoint "
        "allows (docs/goodput.md). "
        "Points run in --workers local processes (default: the cores) or on a Ray cluster (--executor ray); each "
        "search uses one CP-SAT worker and --seed, so the answers equal the serial ones. --jsonl appends each "
        "answer as it finishes; --resume reuses the answers already there for the same problem.",
        EXAMPLE)
    parser.conflict_handler = "resolve"  # the four list options below replace add_problem_arguments' single values
    add_problem_arguments(parser)
    group = parser.add_argument_group("sweep points (comma-separated lists; every combination is searched)")
    group.add_argument("--device", metavar="D[,D2...]", required=True, type=_argument_type(parse_devices),
                       help="device presets or device YAML files")
    group.add_argument("--gpus", metavar="LIST|START..END", required=True, type=_argument_type(parse_gpus),
                       help="GPU counts, e.g. 256,512,1024, or START..END: START doubling up to END")
    group.add_argument("--global-batch", metavar="LIST", required=True,
                       type=_argument_type(lambda text: parse_counts("--global-batch", text)),
                       help="global batches in sequences, e.g. 1024,2048")
    group.add_argument("--seq-len", metavar="LIST", required=True,
                       type=_argument_type(lambda text: parse_lengths("--seq-len", text)),
                       help="sequence lengths in tokens, e.g. 4096,8k")
    group = parser.add_argument_group("training run")
    group.add_argument("--tokens", metavar="N", required=True, type=_argument_type(parse_count),
                       help="tokens to train on, e.g. 1T or 15T (decimal suffixes)")
    group.add_argument("--price-per-gpu-hour", metavar="P", type=_price, help="price of one GPU-hour: adds cost")
    _add_failure_arguments(parser.add_argument_group("failures and checkpoints (docs/goodput.md)"))
    group = parser.add_argument_group("search (per point)")
    for name in ("fix", "hsdp"):
        next(o for o in SPACE_OPTIONS if o.name == name).add_to(group)
    group.add_argument("--recompute", choices=("per-layer", "uniform"), default="per-layer",
                       help="per-layer plans (default) or one recompute mode for every layer (faster)")
    group.add_argument("--time-limit", metavar="SECONDS", type=positive_seconds, default=60.0,
                       help="CP-SAT time limit per point (default 60)")
    group.add_argument("--seed", metavar="S", type=int32, default=0, help="CP-SAT random seed (default 0)")
    group = parser.add_argument_group("executor")
    group.add_argument("--executor", choices=EXECUTORS, default="local",
                       help="local worker processes (default) or a Ray cluster (pip install 'ndcp[ray]')")
    group.add_argument("--workers", metavar="N", type=positive_int, default=os.cpu_count() or 1,
                       help="local worker processes (default: the cores, %(default)s here; 1 runs in this process)")
    group.add_argument("--ray-address", metavar="ADDR",
                       help="the Ray cluster to join (e.g. auto or ray://head:10001; default: start a local Ray)")
    group = parser.add_argument_group("output")
    add_json_argument(parser)
    group.add_argument("--csv", metavar="PATH|-", type=output_path,
                       help="also write the points as CSV; `-` writes only the CSV to stdout")
    group.add_argument("--jsonl", metavar="PATH", type=output_path,
                       help="append each point's answer to PATH as it finishes")
    group.add_argument("--resume", action="store_true",
                       help="reuse the answers in --jsonl PATH for the same problems; search only the rest")
    group.add_argument("--quiet", "-q", action="store_true", help="no progress bar and no table")
    group.add_argument("--plot", metavar="PATH", type=output_path,
                       help="plot time to train and cost against GPUs, the knee marked (.png or .svg; needs "
                            "matplotlib)")
    # The search space of each point: everything `ndcp search` searches by default (--recompute is its own).
    parser.set_defaults(func=run, **{o.name: o.unset for o in SPACE_OPTIONS
                                     if o.name not in ("recompute", "fix", "hsdp")})


def _add_failure_arguments(group) -> None:
    group.add_argument("--mtbf", metavar="HOURS",
                       type=_number("value", "a positive number of hours, e.g. 50000", True),
                       default=DEFAULT_GPU_MTBF_HOURS,
                       help="mean time between failures of ONE GPU, in hours that GPU runs (the job's: this / its "
                            f"GPUs); default {DEFAULT_GPU_MTBF_HOURS:,.0f}, the Llama 3 report's 419 interruptions "
                            "in 54 days on 16,384 H100")
    group.add_argument("--checkpoint-bandwidth", metavar="NODE[,TOTAL]", type=_storage,
                       default=Storage(DEFAULT_NODE_BANDWIDTH, DEFAULT_AGGREGATE_BANDWIDTH),
                       help="checkpoint storage bandwidth in GB/s per node, and optionally of the whole file system "
                            f"(default {DEFAULT_NODE_BANDWIDTH / 1e9:g},{DEFAULT_AGGREGATE_BANDWIDTH / 1e9:g}: a DGX "
                            "SuperPOD node's storage fabric, the Llama 3 report's file system)")
    group.add_argument("--async-checkpoint", action="store_true",
                       help="asynchronous save (Megatron --async-save, torchtitan checkpoint.async_mode): the steps "
                            "wait only for the copy to host memory, when the rank's states fit there")
    group.add_argument("--restart-time", metavar="SECONDS",
                       type=_number("value", "a positive number of seconds, e.g. 600", True),
                       default=DEFAULT_RESTART_SECONDS,
                       help=f"fixed part of a restart after a failure, before the checkpoint is read (default "
                            f"{DEFAULT_RESTART_SECONDS:g}; unvalidated, docs/goodput.md)")


def _storage(text: str) -> Storage:
    """`--checkpoint-bandwidth 40` (per node; the file system's default kept) or `40,2000` (GB/s)."""
    parts = str(text).split(",")
    if len(parts) > 2:
        raise argparse.ArgumentTypeError(f"invalid bandwidth {text!r}: expected NODE[,TOTAL] in GB/s, e.g. 40,2000")
    node, *total = (bandwidth(part) for part in parts)
    return Storage(node, total[0] if total else DEFAULT_AGGREGATE_BANDWIDTH)


def failure_settings(args: argparse.Namespace) -> FailureSettings:
    return FailureSettings(args.mtbf, args.checkpoint_bandwidth, args.async_checkpoint, args.restart_time)


def _argument_type(parse):
    """An argparse type from a SpecError-raising parser; argparse names the option, so the message does not
    again ("--gpus: ..." and "--gpus='0' is not valid" lose their option)."""
    def convert(text: str):
        try:
            return parse(text)
        except SpecError as error:
            raise argparse.ArgumentTypeError(re.sub(r"^--[\w-]+(: |=)", "", str(error))) from None
    return convert


def _number(what: str, expected: str, positive: bool, most: float = 1e12):
    """An argparse type for a number above 0 (`positive`) or at least 0, below `most`."""
    def convert(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = -1.0
        if not ((value > 0) if positive else (value >= 0)) or not value < most:
            raise argparse.ArgumentTypeError(f"invalid {what} {text!r}: expected {expected}")
        return value
    return convert


_price = _number("price", "a number >= 0, e.g. 2.5", positive=False, most=1e9)


def build_jobs(args: argparse.Namespace) -> list[Job]:
    """One validated Job per point (every user error is found here, before any search starts)."""
    points = sweep_points(args.device, args.gpus, args.global_batch, args.seq_len)
    method, note = trainer_method(args, "per-layer" if args.recompute == "per-layer" else "uniform")
    if note:
        print(f"ndcp: note: {note}", file=sys.stderr)
    jobs = []
    for point in points:
        single = copy.copy(args)
        single.device, single.gpus, single.global_batch, single.seq_len = point.key()
        model, cluster, run_spec = build_problem(single)
        jobs.append(Job(point, model, cluster, run_spec, build_space_options(single), method, args.time_limit,
                        args.seed))
    return jobs


def run(args: argparse.Namespace) -> int:
    json_only, csv_only = stdout_owners(args)
    check_plot_path(args.plot)
    if args.resume and not args.jsonl:
        raise SpecError("--resume reads the answers of --jsonl PATH; add --jsonl PATH")
    if args.ray_address and args.executor != "ray":
        raise SpecError("--ray-address needs --executor ray")
    jobs = build_jobs(args)
    shown = not (json_only or csv_only or args.quiet)
    if args.jsonl:
        check_writable(args.jsonl, "--jsonl")  # a FIFO no one reads: refused, not waited on
    with Journal.open(args.jsonl) if args.jsonl else contextlib.nullcontext() as journal:
        answers = _reused(jobs, journal, args.resume, shown)
        todo = [i for i in range(len(jobs)) if i not in answers]
        running = run_jobs([jobs[i] for i in todo], args.executor, args.workers, args.ray_address)  # workers start
        with SweepProgress(shown, len(jobs), len(answers)) as progress:
            for index, answer in running:
                answers[todo[index]] = answer
                if journal:
                    journal.append(answer)
                progress.advance()
    failures = failure_settings(args)
    rows = [derive(answers[i], args.tokens, args.price_per_gpu_hour, failures) for i in range(len(jobs))]
    _note_failed(rows)
    priced = args.price_per_gpu_hour is not None
    if args.plot:
        write_plot(args.plot, lambda path: plot_sweep(rows, path, priced, f"ndcp sweep {jobs[0].model.name}"))
    if args.csv:
        write_output(sweep_csv(rows), args.csv, "--csv")
    emit_json(args, sweep_document(rows, jobs[0].model, args.tokens, args.price_per_gpu_hour, failures))
    if shown:
        print_sweep(console(), jobs[0].model, rows, priced)
    return EXIT_OK


def _reused(jobs: list[Job], journal: Journal | None, resume: bool, shown: bool) -> dict[int, dict]:
    """With --resume, the journal's answers for these very points (same problem key and point; a `failed` point, or
    one an older ndcp journaled without its checkpoint facts, is searched again), by job index."""
    if not (resume and journal):
        return {}
    answers = {}
    for index, job in enumerate(jobs):
        answer = journal.answers.get(job.key())
        if answer is not None and answer["status"] != FAILED and "checkpoint" in answer and _same_point(answer, job):
            answers[index] = answer
    if shown:
        print(f"ndcp: resuming: {len(answers)} of {len(jobs)} points answered in {journal.path}", file=sys.stderr)
    return answers


def _same_point(answer: dict, job: Job) -> bool:
    return (answer["device"], answer["gpus"], answer["global_batch"], answer["seq_len"]) == (
        job.cluster.device.name, job.point.gpus, job.point.global_batch, job.point.seq_len)


def _note_failed(rows: list[dict]) -> None:
    """One line naming the points no search answered (exit status stays 0: the other points are answers)."""
    failed = [f"{r['device']} x {r['gpus']}, GBS {r['global_batch']}, seq {r['seq_len']}" for r in rows
              if r["status"] == FAILED]
    if failed:
        print(f"ndcp: note: {len(failed)} point{'s' * (len(failed) > 1)} failed (the worker process died on each "
              f"try): {'; '.join(failed[:5])}{' ...' if len(failed) > 5 else ''}; --resume searches them again",
              file=sys.stderr)


__all__ = ["register", "run", "build_jobs", "failure_settings", "EXAMPLE"]
