#!/usr/bin/env python3
"""Check that what `ndcp search --emit` writes is the plan: for scripts/bench_search.py's cases (and the README's
first command) and each trainer, run the search with `--emit TRAINER --emit-file F --json -`, then, in another
process, `ndcp estimate --strategy-from F` with the same run options, and compare.

Per case and trainer, the check passes when either
  - the search exits 0, wrote F, and F read back has exactly the winner's step time and peak memory and fits (the
    search's own `emitted` block says so, and the independent estimate agrees), or
  - the search exits 1 with a verified winner, wrote nothing, and its `emitted.reasons` say why (the trainer cannot
    express the plan, or the file would not fit).
An exit 0 with a file that is not the plan or does not fit, or a disagreement between the search's read-back and the
independent estimate, fails. Prints one line per case and a summary; exit 1 on any failure.
Usage: python scripts/check_emitted.py [--cases I,J] [--trainers megatron,torchtitan] [--time-limit S]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from bench_search import MATRIX  # noqa: E402  (the benchmark's cases: one list)

README_CASE = ("llama3-70b", "h100", 512, 1024, 8192, "")


def ndcp(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ndcp", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def problem(case: tuple) -> list[str]:
    name, device, gpus, gbs, seq, cap = case
    return [name, "--device", device, "--gpus", str(gpus), "--global-batch", str(gbs), "--seq-len", str(seq)] + (
        ["--memory-cap", cap] if cap else [])


def check(case: tuple, trainer: str, time_limit: float) -> tuple[bool, str]:
    """(passed, what happened) for one case and trainer."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "emitted"
        done = ndcp(["search", *problem(case), "--time-limit", str(time_limit), "--emit", trainer, "--emit-file",
                     str(path), "--json", "-"])
        if done.returncode not in (0, 1) or not done.stdout:
            return False, f"search exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"
        doc = json.loads(done.stdout)
        emitted, best = doc.get("emitted"), (doc.get("strategies") or [None])[0]
        if best is None:
            return done.returncode == 1, f"{doc['status']}: no strategy (nothing emitted)"
        if done.returncode == 1:
            ok = not path.exists() and bool(emitted["reasons"])
            return ok, "exit 1, not written: " + "; ".join(emitted["reasons"])
        plan = (best["time"]["step_seconds"], best["memory"]["peak_bytes"])
        said = (emitted["step_seconds"], emitted["peak_bytes"])
        back = ndcp(["estimate", *problem(case), "--strategy-from", str(path), "--trainer", trainer, "--json", "-"])
        if back.returncode != 0:
            return False, f"estimate --strategy-from exit {back.returncode}: {back.stderr.strip()}"
        got = json.loads(back.stdout)
        read = (got["time"]["step_seconds"], got["memory"]["peak_bytes"])
        ok = path.exists() and emitted["same_as_plan"] and emitted["fits"] and plan == said == read
        return ok, f"exit 0: step {plan[0]:.3f} s, peak {plan[1] / 2**30:.2f} GiB; read back {read[0]:.3f} s, " \
                   f"{read[1] / 2**30:.2f} GiB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", help="comma-separated indices into bench_search.MATRIX (default: all)")
    parser.add_argument("--trainers", default="megatron,torchtitan")
    parser.add_argument("--time-limit", type=float, default=60.0)
    args = parser.parse_args()
    cases = [MATRIX[int(i)] for i in args.cases.split(",")] if args.cases else [README_CASE, *MATRIX]
    failed = 0
    for case in cases:
        for trainer in args.trainers.split(","):
            passed, what = check(case, trainer, args.time_limit)
            failed += not passed
            name = f"{case[0]} {case[2]} {case[1]}" + (f" {case[5]}" if case[5] else "")
            print(f"{'ok  ' if passed else 'FAIL'} {trainer:<10} {name:<34} {what}", flush=True)
    print(f"{failed} of {len(cases) * len(args.trainers.split(','))} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
