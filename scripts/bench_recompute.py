#!/usr/bin/env python3
"""Benchmark: joint per-layer recompute (CP-SAT plan_search, every recompute option: none, selective, full,
Megatron-Core's recompute modules and activation offload) vs the same search over the classic three options only
(none/selective/full, `--recompute classic`) vs the reference planner's greedy recompute vs the best uniform
recompute (CP-SAT cpsat_search), on real models from 64 to 16,384 GPUs under tight to loose memory caps.

Each row, measured in this run: the best step time each method finds, its solve time, and the proof status
(per-layer / classic / uniform: `optimal` = proven, `feasible` = stopped at its time limit with the printed gap;
greedy is a heuristic and never proven); the winner's recompute; per-layer relative to classic, greedy and uniform.
Usage: python scripts/bench_recompute.py [--quick | --cases I,J] [--time-limit S] [--markdown]
"""
from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

from ndcp.solve.certificate import cpsat_search, plan_search
from ndcp.solve.greedy import greedy_search
from ndcp.space import SearchSpace, SpaceOptions
from ndcp.specs import ClusterSpec, RunSpec, device_preset
from ndcp.specs.library import load_model
from ndcp.specs.recompute import CLASSIC_MODES

GIB = 2**30
MATRIX = [  # model, device, gpus, global batch, sequence, memory cap (GiB)
    ("llama3-70b", "h100", 64, 128, 8192, 40),
    ("llama3-70b", "h100", 64, 128, 8192, 60),
    ("llama3-70b", "h100", 512, 1024, 8192, 30),
    ("gpt3-175b", "a100-80g", 512, 1536, 2048, 40),
    ("gpt3-175b", "h100", 16384, 4096, 2048, 60),
    ("llama3.1-405b", "h100", 2048, 1024, 8192, 50),
    ("llama3.1-405b", "h100", 16384, 2048, 8192, 70),
    ("deepseek-v3", "h800", 2048, 4096, 4096, 60),
    ("qwen3-235b-a22b", "h100", 4096, 4096, 4096, 50),
    ("qwen3-235b-a22b", "h100", 1024, 2048, 4096, 70),
    # tighter caps: where uniform recompute must fall back to a heavier mode everywhere
    ("llama3-70b", "h100", 512, 1024, 8192, 20),
    ("gpt3-175b", "a100-80g", 512, 1536, 2048, 24),
    ("deepseek-v3", "h800", 2048, 4096, 4096, 40),
]
QUICK = [0, 1, 3, 5]


def _fmt(seconds):
    return "-" if seconds is None else f"{seconds:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"only cases {QUICK} of the matrix, 20 s limits")
    parser.add_argument("--time-limit", type=float, default=None, help="seconds per method and case (default 60)")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument("--cases", metavar="I,J,...", help="only these rows of the matrix (0-based)")
    args = parser.parse_args()
    limit = args.time_limit or (20.0 if args.quick else 60.0)
    chosen = [int(i) for i in args.cases.split(",")] if args.cases else QUICK if args.quick else range(len(MATRIX))
    cases = [MATRIX[i] for i in chosen]
    header = ("model", "gpus", "cap", "per-layer s", "status", "solve", "recompute", "classic s", "status", "solve",
              "greedy s", "solve", "uniform s", "status", "solve", "vs classic", "vs greedy", "vs uniform")
    rows, gains = [], []
    for name, device, gpus, gbs, seq, cap in cases:
        space = SearchSpace(load_model(name), ClusterSpec(device_preset(device), gpus),
                            RunSpec(global_batch=gbs, seq_len=seq, memory_cap_bytes=cap * GIB))
        classic_space = replace(space, options=SpaceOptions(recompute_modes=CLASSIC_MODES))
        timed = []
        for search, where in ((plan_search, space), (plan_search, classic_space), (greedy_search, space),
                              (cpsat_search, space)):
            t0 = time.perf_counter()
            timed.append((search(where, top=1, time_limit=limit), time.perf_counter() - t0))
        (joint, tj), (classic, tc), (greedy, tg), (uniform, tu) = timed
        j, c, g, u = (r.best.step_seconds if r.best else None for r in (joint, classic, greedy, uniform))
        if None not in (j, c):
            gains.append(1 - j / c)
        rows.append((name, str(gpus), f"{cap}GiB", _fmt(j), _status(joint), f"{tj:.1f}",
                     joint.best.strategy.recompute.summary() if joint.best else "-",
                     _fmt(c), _status(classic), f"{tc:.1f}",
                     _fmt(g) + (" (cut)" if greedy.explanation.startswith("time limit") else ""), f"{tg:.1f}",
                     _fmt(u), _status(uniform), f"{tu:.1f}", _relative(j, c), _relative(j, g), _relative(j, u)))
        print(" | ".join(rows[-1]), flush=True)
    print()
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for row in rows:
            print("| " + " | ".join(row) + " |")
    else:
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
        print("  ".join(h.rjust(w) for h, w in zip(header, widths)))
        for row in rows:
            print("  ".join(c.rjust(w) for c, w in zip(row, widths)))
    won = [x for x in gains if x >= 0.001]
    print(f"\nrecompute modules / offload beat none/selective/full by >= 0.1 % on {len(won)} of {len(gains)} cases"
          + (f" (median {100 * statistics.median(won):.1f} %, max {100 * max(won):.1f} %)" if won else "")
          + f". Time limit {limit:g} s per method and case; greedy '(cut)': stopped at the limit before pricing every "
          "candidate. vs: per-layer step time relative to classic / greedy / uniform (negative = per-layer faster).")


def _status(result) -> str:
    return result.status + (f" {100 * result.gap:.2f}%" if result.status == "feasible" and result.best else "")


def _relative(a, b) -> str:
    return "-" if None in (a, b) else f"{100 * (a / b - 1):+.1f}%"


if __name__ == "__main__":
    main()
