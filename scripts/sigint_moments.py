"""SIGINT at N moments spread over a search (issue #36): each run must answer with a verified plan and its bound
(exit 0, status `optimal` or `feasible`) or status `unknown` (exit 4), print no traceback, and leave its --json file
whole (a complete document, or no file at all).

    python scripts/sigint_moments.py                      # DeepSeek-V3 on 2,048 H100, 20 moments
    python scripts/sigint_moments.py --moments 5 --signal TERM -- tiny --device h100 --gpus 8 --global-batch 16 \
        --seq-len 512

The moments are spread evenly over one uninterrupted run's wall time (measured first), from FIRST_MOMENT on
(before it the interpreter may still be starting, ahead of ndcp's first instruction). Exit 0 when every run
passes; each failure is printed.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
FIRST_MOMENT = 0.25  # seconds
DEEPSEEK = ["deepseek-v3", "--device", "h100", "--gpus", "2048", "--global-batch", "8192", "--seq-len", "4096"]


class Outcome(NamedTuple):
    moment: float
    code: int
    status: str | None  # the --json document's status (None: no document)
    problem: str  # empty when the run passed


def _search(problem: list[str], json_path: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "ndcp", "search", *problem, "--quiet", "--json", str(json_path)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _judge(moment: float, code: int, err: str, json_path: Path) -> Outcome:
    document = None
    if json_path.exists():
        try:
            document = json.loads(json_path.read_text())
        except ValueError:
            return Outcome(moment, code, None, "the --json file is not whole")
    status = document["status"] if document else None
    if "Traceback" in err:
        return Outcome(moment, code, status, "a traceback: " + err.strip().splitlines()[-1])
    if code == 0 and (status not in ("optimal", "feasible") or not document["strategies"]
                      or document["lower_bound_seconds"] is None):
        return Outcome(moment, code, status, "exit 0 without a verified plan and bound")
    if code == 4 and status not in (None, "unknown"):
        return Outcome(moment, code, status, "exit 4 with a document that is not `unknown`")
    if code not in (0, 4):
        return Outcome(moment, code, status, f"exit {code}: {err.strip()[-200:]}")
    return Outcome(moment, code, status, "")


def interrupt_at(problem: list[str], moment: float, signum: int) -> Outcome:
    """One search, sent `signum` `moment` seconds after it starts."""
    with tempfile.TemporaryDirectory() as folder:
        json_path = Path(folder) / "out.json"
        process = _search(problem, json_path)
        try:
            process.wait(timeout=moment)
        except subprocess.TimeoutExpired:
            process.send_signal(signum)
        try:
            _, err = process.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()
            return Outcome(moment, -1, None, "still running 120 s after the signal")
        return _judge(moment, process.returncode, err, json_path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--moments", type=int, default=20)
    parser.add_argument("--signal", choices=["INT", "TERM"], default="INT")
    parser.add_argument("problem", nargs="*", help="ndcp search's arguments (default: DeepSeek-V3 on 2,048 H100)")
    args = parser.parse_args(argv)
    problem = args.problem or DEEPSEEK
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        _search(problem, Path(folder) / "out.json").communicate()
        duration = time.perf_counter() - start
    signum = getattr(signal, "SIG" + args.signal)
    span = max(0.0, duration - FIRST_MOMENT)
    outcomes = [interrupt_at(problem, FIRST_MOMENT + span * (i + 0.5) / args.moments, signum)
                for i in range(args.moments)]
    for outcome in outcomes:
        print(f"{outcome.moment:7.2f} s  exit {outcome.code}  {outcome.status or '-':9}  {outcome.problem or 'ok'}")
    failed = [o for o in outcomes if o.problem]
    print(f"{len(outcomes) - len(failed)} of {len(outcomes)} passed (an uninterrupted run: {duration:.1f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
