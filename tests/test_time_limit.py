"""`ndcp search --time-limit T` returns within 1.1 T + 1 s on large problems: the search's own clock (JSON
`solve_seconds`, from before the walk to the answer), in a fresh process as a user runs it.

Measured (2-core container, --time-limit 1):
  deepseek-v3 on 16,384 H100, global batch 8192, seq 4096: 8.2-10.7 s before the item bounds checked the deadline
    (~36k items); then about 1.5 s with the walk (181,753 items) and its count before the first check; now the walk
    checks it too: 1.00-1.01 s of search, 1.08-1.14 s for the whole command in-process.
  llama3.1-405b on 16,384 H100 --recompute per-layer: 1.02 s (honoured).
  llama3.1-405b on 16,384 H100 (uniform): 1.05-1.13 s (honoured).
In-process inside the full test suite the same call took 2.50 and 2.63 s in two of three runs (alone, and in a
fresh process, 1.1 s; the cause was not found), hence a fresh process, whose start and imports (about 1 s) get
their own allowance.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

LIMIT = 1.0
ALLOWED = 1.1 * LIMIT + 1.0
PROCESS_START = 3.0  # seconds more for the whole command: starting Python and importing OR-Tools (about 1 s)

CASES = {
    "deepseek-v3-16384": pytest.param(
        ["deepseek-v3", "--device", "h100", "--gpus", "16384", "--global-batch", "8192", "--seq-len", "4096"]),
    "llama3.1-405b-16384-per-layer": pytest.param(
        ["llama3.1-405b", "--device", "h100", "--gpus", "16384", "--global-batch", "2048", "--seq-len", "8192",
         "--recompute", "per-layer"]),
    "llama3.1-405b-16384-uniform": pytest.param(
        ["llama3.1-405b", "--device", "h100", "--gpus", "16384", "--global-batch", "2048", "--seq-len", "8192",
         "--recompute", "uniform"]),
    # the oracle and greedy price one strategy at a time (the oracle: 228,760 strategies, 57 s in full)
    "llama3-70b-512-exhaustive": pytest.param(
        ["llama3-70b", "--device", "h100", "--gpus", "512", "--global-batch", "1024", "--seq-len", "8192",
         "--exhaustive", "--recompute", "uniform"]),
    "llama3-70b-512-greedy": pytest.param(
        ["llama3-70b", "--device", "h100", "--gpus", "512", "--global-batch", "1024", "--seq-len", "8192",
         "--recompute", "greedy"]),
}


@pytest.mark.parametrize("argv", list(CASES.values()), ids=list(CASES))
def test_search_honours_time_limit(argv):
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "ndcp", "search", *argv, "--time-limit", str(LIMIT), "--top", "10",
                           "--json", "-", "--quiet"], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    # found (0), proven infeasible (1), or stopped before any strategy was verified (4, status unknown)
    assert done.returncode in (0, 1, 4), done.stderr
    answer = json.loads(done.stdout)
    assert (answer["status"] == "unknown") == (done.returncode == 4) == (not answer["strategies"]
                                                                       and answer["status"] != "infeasible")
    searched = answer["solve_seconds"]
    assert searched <= ALLOWED, f"search took {searched:.2f} s for --time-limit {LIMIT} (allowed {ALLOWED:.2f} s)"
    assert wall <= ALLOWED + PROCESS_START, f"the command took {wall:.2f} s (allowed {ALLOWED + PROCESS_START:.2f} s)"
