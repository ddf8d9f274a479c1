#!/usr/bin/env python3
"""Benchmark: a 16-point sweep run serially (one process) and on N local worker processes, in one run.

Points: Llama-3-8B and Llama-3-70B on H100, 64/128/256/512 GPUs, global batch 512 and 1024, sequence 8192 (per-layer
recompute, the `ndcp sweep` default). Each side runs in a fresh process and is timed inside it from the first point
to the last (imports excluded; the worker processes' start-up and imports included, as `ndcp sweep` pays them).
Prints both times, the speed-up and whether every answer agrees (status, strategy, step time). Also the CPU
seconds each side used (its worker processes included): on a machine shared with other work the wall-clock
speed-up measures the share the scheduler gave this run (Linux autogroups share CPU per session, not per
process), while serial CPU / (parallel CPU / workers) is the speed-up the same work reaches on idle cores.
Usage: python scripts/bench_sweep.py [--workers N] [--markdown]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ndcp.space import SpaceOptions
from ndcp.specs import ClusterSpec, RunSpec, device_preset
from ndcp.specs.library import load_model
from ndcp.sweep import Job, SweepPoint, run_jobs

ROOT = Path(__file__).resolve().parents[1]
POINTS = [(model, gpus, batch) for model in ("llama3-8b", "llama3-70b") for gpus in (64, 128, 256, 512)
          for batch in (512, 1024)]
SEQ = 8192


def jobs() -> list[Job]:
    out = []
    for name, gpus, batch in POINTS:
        out.append(Job(SweepPoint("h100", gpus, batch, SEQ), load_model(name), ClusterSpec(device_preset("h100"), gpus),
                       RunSpec(global_batch=batch, seq_len=SEQ), SpaceOptions(), "per-layer"))
    return out


def _child(workers: int) -> None:
    todo = jobs()
    started = time.perf_counter()
    answers = dict(run_jobs(todo, "local", workers))
    seconds = time.perf_counter() - started
    children = resource.getrusage(resource.RUSAGE_CHILDREN)  # the worker processes, joined by now
    cpu = time.process_time() + children.ru_utime + children.ru_stime
    print(json.dumps({"seconds": seconds, "cpu_seconds": cpu, "answers": [answers[i] for i in range(len(todo))]}))


def _run(workers: int) -> dict:
    done = subprocess.run([sys.executable, __file__, "--child", str(workers)], capture_output=True, text=True,
                          check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2, help="local worker processes for the parallel side")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        _child(args.child)
        return
    serial, parallel = _run(1), _run(args.workers)
    same = all((a["status"], a["strategy"], a["step_seconds"]) == (b["status"], b["strategy"], b["step_seconds"])
               for a, b in zip(serial["answers"], parallel["answers"]))
    proven = sum(a["status"] == "optimal" for a in serial["answers"])
    median = statistics.median(a["solve_seconds"] for a in serial["answers"])
    speedup = serial["seconds"] / parallel["seconds"]
    idle = serial["cpu_seconds"] / (parallel["cpu_seconds"] / args.workers)
    row = [len(POINTS), f"{proven}/{len(POINTS)}", f"{median:.2f}", f"{serial['seconds']:.1f}", args.workers,
           f"{parallel['seconds']:.1f}", f"{speedup:.2f}x", f"{serial['cpu_seconds']:.1f}",
           f"{parallel['cpu_seconds']:.1f}", f"{idle:.2f}x", "yes" if same else "NO"]
    header = ["points", "proven", "median point s", "serial s", "workers", "parallel s", "speed-up", "serial CPU s",
              "parallel CPU s", "speed-up on idle cores", "same answers"]
    if args.markdown:
        print("| " + " | ".join(header) + " |\n|" + "---|" * len(header) + "\n| " + " | ".join(map(str, row)) + " |")
    else:
        print("  ".join(f"{h}: {v}" for h, v in zip(header, row)))
    print(f"cores: {os.cpu_count()}, load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
