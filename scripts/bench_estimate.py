#!/usr/bin/env python3
"""Benchmark: the full step-time and memory estimators on one plan, the work the search's verification repeats per
candidate (docs/benchmarks.md §3). Prints microseconds per call, the best of several rounds (a shared machine's
noise only ever adds time); with `--against DIR`, the same plans on another source tree (e.g. a worktree of the last
round's commit), alternating round by round in subprocesses, and the ratio of the two, measured in one run.

Usage: python scripts/bench_estimate.py [--calls N] [--rounds R] [--against DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# model, device, gpus, global batch, sequence, strategy: dense and MoE plans with pipelines and recompute
PLANS = [
    ("gpt3-175b", "a100-80g", 1024, 1536, 2048, "tp=8,pp=16,vpp=2,mbs=1,zero=1,sp=on,recompute=selective"),
    ("llama3.1-405b", "h100", 2048, 2048, 8192, "tp=8,pp=16,mbs=1,zero=1,sp=on,recompute=full"),
    ("deepseek-v3", "h800", 2048, 4096, 4096, "tp=1,pp=16,ep=64,mbs=1,zero=1,recompute=none"),
]
# One child per tree and round: it times `calls` estimates (step time and memory) of each plan after one warm-up
# estimate (the estimators' caches warm, as they are during a search) and prints the seconds per call as JSON.
CHILD = """
import json, sys, time
from ndcp.api import estimate_strategy, estimate_values
from ndcp.estimate.memory import estimate_memory
from ndcp.estimate.time import estimate_time
calls, plans = int(sys.argv[1]), json.loads(sys.argv[2])
out = []
for model, device, gpus, batch, seq, strategy in plans:
    e = estimate_strategy(estimate_values(model, device=device, gpus=gpus, global_batch=batch, seq_len=seq,
                                          strategy=strategy))
    start = time.perf_counter()
    for _ in range(calls):
        estimate_time(e.model, e.cluster, e.run, e.strategy)
        estimate_memory(e.model, e.cluster, e.run, e.strategy)
    out.append((time.perf_counter() - start) / calls)
print(json.dumps(out))
"""


def timings(tree: Path, calls: int) -> list[float]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    done = subprocess.run([sys.executable, "-c", CHILD, str(calls), json.dumps(PLANS)], env=env, cwd=tree,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="estimates per plan and round (default 200)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; each plan's best round counts (default 5)")
    parser.add_argument("--against", type=Path, help="also time this source tree, alternating round by round")
    args = parser.parse_args(argv)
    trees = [ROOT] + ([args.against] if args.against else [])
    best = {tree: [float("inf")] * len(PLANS) for tree in trees}
    for _ in range(args.rounds):
        for tree in trees:
            best[tree] = [min(a, b) for a, b in zip(best[tree], timings(tree, args.calls))]
    for i, (model, device, gpus, *_rest, strategy) in enumerate(PLANS):
        line = f"{model} {gpus} {device} {strategy}: {best[ROOT][i] * 1e6:.0f} us per estimate"
        if args.against:
            other = best[args.against][i]
            line += f"; against {args.against}: {other * 1e6:.0f} us (ratio {other / best[ROOT][i]:.2f})"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
