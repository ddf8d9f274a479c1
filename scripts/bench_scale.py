#!/usr/bin/env python3
"""Scale benchmark: `ndcp search` from 8 to 131,072 GPUs (powers of two plus 1,000 and 24,576), real models, uniform
and per-layer recompute. Each case runs in a fresh subprocess so its peak memory (ru_maxrss) is its own.

Prints per case: wall seconds of the whole search (in the child), the solver's solve seconds, proof status, best
step time and the child's peak RSS. Usage:
  PYTHONPATH=. python scripts/bench_scale.py [--quick] [--time-limit 60] [--markdown]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

MODELS = {  # model: (device, sequence length, global batch per 8 GPUs, minimum global batch)
    "llama3-8b": ("h100", 8192, 8, 32),
    "llama3-70b": ("h100", 8192, 4, 64),
    "llama3.1-405b": ("h100", 8192, 2, 256),
    "mixtral-8x7b": ("h100", 4096, 8, 64),
    "deepseek-v3": ("h800", 4096, 4, 512),
}
GPUS = [8, 16, 32, 64, 128, 256, 512, 1000, 1024, 2048, 4096, 8192, 16384, 24576, 32768, 65536, 131072]
QUICK_GPUS = [8, 64, 1000, 1024, 24576, 131072]
QUICK_MODELS = ["llama3-8b", "llama3.1-405b", "mixtral-8x7b", "deepseek-v3"]

CHILD = r"""
import json, resource, sys, time
from dataclasses import replace
from ndcp.cli import build_parser
from ndcp.solve.certificate import cpsat_search, plan_search
from ndcp.space import SearchSpace
from ndcp.cli import build_problem, build_space_options
argv = json.loads(sys.argv[1])
args = build_parser().parse_args(argv)
t0 = time.perf_counter()
model, cluster, run = build_problem(args)
space = SearchSpace(model, cluster, run, replace(build_space_options(args), max_offset=args.max_offset))
if args.recompute == "per-layer":
    r = plan_search(space, top=args.top, time_limit=args.time_limit, seed=0, workers=1)
else:
    r = cpsat_search(space, top=args.top, time_limit=args.time_limit, seed=0, workers=1)
wall = time.perf_counter() - t0
print(json.dumps({"wall": wall, "solve": r.solve_seconds, "verify": r.verify_seconds, "status": r.status,
                  "gap": r.gap if r.strategies else None,
                  "step": r.best.step_seconds if r.best else None,
                  "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def global_batch(model: str, gpus: int) -> int:
    _, _, per8, low = MODELS[model]
    gbs = max(low, per8 * gpus // 8)
    if gpus & (gpus - 1):  # awkward counts (1,000; 24,576): a multiple of the GPU count, so dp can take any divisor
        return -(-gbs // gpus) * gpus
    return 1 << (gbs - 1).bit_length()  # a power of two >= the target: divisible by many dp


def run_case(model: str, gpus: int, recompute: str, time_limit: float, guard: float) -> dict:
    device, seq, _, _ = MODELS[model]
    argv = ["search", model, "--device", device, "--gpus", str(gpus), "--global-batch", str(global_batch(model, gpus)),
            "--seq-len", str(seq), "--recompute", recompute, "--time-limit", str(time_limit), "--top", "1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    t0 = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(argv)], capture_output=True, text=True,
                              timeout=guard, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"status": f"TIMEOUT>{guard:.0f}s", "outer": time.perf_counter() - t0}
    if done.returncode:
        tail = (done.stderr.strip().splitlines() or ["?"])[-1]
        return {"status": f"ERROR: {tail[:80]}", "outer": time.perf_counter() - t0}
    row = json.loads(done.stdout.strip().splitlines()[-1])
    row["outer"] = time.perf_counter() - t0
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"models {QUICK_MODELS}, GPUs {QUICK_GPUS}")
    parser.add_argument("--time-limit", type=float, default=None, help="solver time limit (default 60; quick 10)")
    parser.add_argument("--guard", type=float, default=None, help="kill a case after this many seconds")
    parser.add_argument("--recompute", default="uniform,per-layer", help="comma-separated (default both)")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    limit = args.time_limit or (10.0 if args.quick else 60.0)
    guard = args.guard or max(120.0, 10 * limit)
    models = QUICK_MODELS if args.quick else list(MODELS)
    gpus_list = QUICK_GPUS if args.quick else GPUS
    header = ("model", "gpus", "gbs", "recompute", "wall s", "solve s", "status", "gap", "step s", "peak RSS MiB")
    sep = " | " if args.markdown else "  "
    print(("| " if args.markdown else "") + sep.join(header) + (" |" if args.markdown else ""))
    if args.markdown:
        print("|" + "|".join("---" for _ in header) + "|")
    for model in models:
        for gpus in gpus_list:
            for recompute in args.recompute.split(","):
                r = run_case(model, gpus, recompute, limit, guard)
                cells = (model, str(gpus), str(global_batch(model, gpus)), recompute,
                         f"{r.get('wall', r['outer']):.2f}", f"{r['solve']:.2f}" if "solve" in r else "-",
                         r["status"], f"{100 * r['gap']:.2f}%" if r.get("gap") is not None else "-",
                         f"{r['step']:.3f}" if r.get("step") else "-",
                         f"{r['maxrss_kib'] / 1024:.0f}" if "maxrss_kib" in r else "-")
                print(("| " if args.markdown else "") + sep.join(cells) + (" |" if args.markdown else ""), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
