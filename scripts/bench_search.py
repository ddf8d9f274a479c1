#!/usr/bin/env python3
"""Benchmark: CP-SAT search vs the exhaustive oracle on real models from 64 to 16,384 GPUs.

Prints one row per case, measured in this run: space size, oracle seconds (when its space is small enough to
finish in reasonable time), CP-SAT seconds, their ratio, proof status, and whether the two answers agree. Each
search runs in a fresh process and is timed inside it (imports excluded), so neither warms the estimators' caches
for the other: both pay their own first evaluations.
Usage: python scripts/bench_search.py [--quick] [--oracle-limit CANDIDATES] [--markdown]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ndcp.solve.certificate import cpsat_search
from ndcp.solve.exhaustive import exhaustive_search
from ndcp.space import SearchSpace
from ndcp.specs import ClusterSpec, RunSpec, device_preset
from ndcp.specs.library import load_model

ROOT = Path(__file__).resolve().parents[1]
MATRIX = [  # model, device, gpus, global batch, sequence
    ("llama3-8b", "h100", 64, 256, 8192),
    ("llama3-70b", "h100", 64, 128, 8192),
    ("mixtral-8x7b", "h100", 64, 256, 4096),
    ("gpt3-175b", "a100-80g", 512, 1536, 2048),
    ("llama3-70b", "h100", 512, 1024, 8192),
    ("qwen2.5-72b", "h200", 1024, 1024, 8192),
    ("llama3.1-405b", "h100", 2048, 1024, 8192),
    ("mixtral-8x22b", "h100", 2048, 2048, 4096),
    ("llama3.1-405b", "h100", 16384, 2048, 8192),
    ("deepseek-v3", "h800", 2048, 4096, 4096),
    ("qwen3-235b-a22b", "h100", 4096, 4096, 4096),
    ("gpt3-175b", "h100", 16384, 4096, 2048),
]


def _child(method: str, case: int) -> None:
    """Run one search of one case and print its timing and answer as JSON (in a fresh process)."""
    name, device, gpus, gbs, seq = MATRIX[case]
    space = SearchSpace(load_model(name), ClusterSpec(device_preset(device), gpus), RunSpec(global_batch=gbs, seq_len=seq))
    t0 = time.perf_counter()
    result = (cpsat_search(space, top=10, time_limit=120) if method == "cpsat"
              else exhaustive_search(space, top=10))
    seconds = time.perf_counter() - t0
    print(json.dumps({"seconds": seconds, "status": result.status, "size": space.size(space.walk()),
                      "steps": [e.step_seconds for e in result.strategies], "verified": result.verified,
                      "expanded": result.expanded}))


def _run(method: str, case: int) -> dict:
    done = subprocess.run([sys.executable, __file__, "--child", method, str(case)], capture_output=True, text=True,
                          check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="only the first four cases")
    parser.add_argument("--oracle-limit", type=int, default=300_000, help="skip the oracle above this many candidates")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument("--child", nargs=2, metavar=("METHOD", "CASE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child[0], int(args.child[1]))
        return
    rows, ratios, solves = [], [], []
    for case, (name, device, gpus, gbs, seq) in enumerate(MATRIX[:4] if args.quick else MATRIX):
        solved = _run("cpsat", case)
        cpsat_s, size = solved["seconds"], solved["size"]
        solves.append(cpsat_s)
        oracle_s, agree = None, "-"
        if size <= args.oracle_limit:
            oracle = _run("oracle", case)
            oracle_s = oracle["seconds"]
            same = [round(t, 9) for t in oracle["steps"]] == [round(t, 9) for t in solved["steps"]]
            agree = "yes" if same and oracle["status"] == solved["status"] else "NO"
            ratios.append(oracle_s / cpsat_s)
        best = solved["steps"][0] if solved["steps"] else None
        rows.append((f"{name}", device, gpus, gbs, seq, size, oracle_s, cpsat_s, solved["status"], agree,
                     best, solved["verified"], solved["expanded"]))
        print_row(rows[-1], args.markdown, header=len(rows) == 1)
    summary = f"median CP-SAT {statistics.median(solves):.3f} s over {len(solves)} cases"
    if ratios:
        summary += (f"; oracle/CP-SAT ratio: median {statistics.median(ratios):.1f}x, min {min(ratios):.1f}x, "
                    f"max {max(ratios):.1f}x over {len(ratios)} cases the oracle finished")
    print(summary)


def print_row(row, markdown: bool, header: bool) -> None:
    name, device, gpus, gbs, seq, size, oracle_s, cpsat_s, status, agree, best, verified, expanded = row
    cells = [name, device, str(gpus), str(gbs), str(seq), f"{size:,}", "-" if oracle_s is None else f"{oracle_s:.2f}",
             f"{cpsat_s:.3f}", "-" if oracle_s is None else f"{oracle_s / cpsat_s:.1f}x", status, agree,
             "-" if best is None else f"{best:.3f}", str(verified), str(expanded)]
    titles = ["model", "device", "GPUs", "GBS", "seq", "space", "oracle s", "CP-SAT s", "ratio", "status", "agree",
              "best step s", "verified", "expanded"]
    if markdown:
        if header:
            print("| " + " | ".join(titles) + " |")
            print("|" + "---|" * len(titles))
        print("| " + " | ".join(cells) + " |")
    else:
        if header:
            print("  ".join(f"{t:>12}" for t in titles))
        print("  ".join(f"{c:>12}" for c in cells), flush=True)


if __name__ == "__main__":
    main()
