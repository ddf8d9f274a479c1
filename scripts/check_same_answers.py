#!/usr/bin/env python3
"""Check that two source trees give the same answers: the `--json` of the README's, docs/benchmarks.md's, the
examples' and `scripts/bench_search.py`'s searches (and a few estimates), byte for byte once wall-clock fields are
removed.

A refactor that claims "behaviour unchanged" runs this against a worktree of the commit before it:
    git worktree add /tmp/before HEAD~3
    python scripts/check_same_answers.py --against /tmp/before [--quick] [--jobs 2] [--allow-new-keys]
`--extra "--confidence 0"` adds arguments to this tree's commands only (a new option whose value gives the answers
of before). `--busy N` runs this tree's commands beside N busy processes (pure Python loops, stopped after each
command) and the other tree's on the machine as it is: with `--against .` it checks that the answers do not depend
on the machine's load (docs/solver.md §9, Determinism).
Each command runs in a fresh process (`python -m ndcp`, PYTHONPATH set to the tree), so no cache carries over.
Removed before comparing: `solve_seconds`, `timing` and `wall` keys anywhere (the clock, not the answer). Exit 0
when every case agrees, 1 when one differs (its first differing path is printed).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from bench_search import MATRIX, argv as bench_argv  # noqa: E402

CLOCK_KEYS = {"solve_seconds", "timing", "wall"}
# The README's, docs/benchmarks.md's and the examples' commands (their flags as written there), beyond the bench
# matrix.
DOCUMENTED = [
    "search llama3-70b --device h100 --gpus 512 --global-batch 1024 --seq-len 8192",
    "search llama3-70b --device h100 --gpus 512 --global-batch 1024 --seq-len 8192 --headroom 0.1",
    "search mixtral-8x7b --device h100 --gpus 64 --global-batch 256 --seq-len 4096 --memory-cap 70GiB",
    "search llama3-70b --device h100 --gpus 64 --global-batch 128 --seq-len 8192 --memory-cap 40GiB",
    "search llama3-70b --device h100 --gpus 64 --global-batch 128 --seq-len 8192 --memory-cap 40GiB "
    "--recompute uniform",
    "search llama3-70b --device h100 --gpus 512 --global-batch 1024 --seq-len 8192 --recompute classic",
    "search llama3-70b --device h100 --gpus 64 --global-batch 128 --seq-len 8192 --trainer megatron",
    "search llama3-70b --device h100 --gpus 64 --global-batch 128 --seq-len 8192 --trainer torchtitan",
    "search llama3-8b --device h100 --gpus 8 --global-batch 32 --seq-len 4096 --trainer mindformers",
    "search mixtral-8x7b --device h100 --gpus 64 --global-batch 256 --seq-len 4096 --top 5 --max-offset 1",
    "search llama3-8b --device h100 --gpus 64 --global-batch 256 --seq-len 8192 --precision fp8",
    "search llama3-8b --device h100 --gpus 32 --global-batch 128 --seq-len 32768 --cp-comm all",
    "estimate llama3-8b --device h100 --gpus 8 --global-batch 32 --seq-len 4096 --strategy tp=2,sp=on",
    "estimate llama3-70b --device h100 --gpus 64 --global-batch 128 --seq-len 8192 "
    "--strategy tp=4,pp=8,vpp=2,mbs=1,zero=1,sp=on,recompute=selective",
    "estimate deepseek-v3 --device h800 --gpus 2048 --global-batch 4096 --seq-len 4096 "
    "--strategy tp=1,pp=1,ep=16,mbs=2,zero=3,recompute=full",
    "recompute llama3.1-405b --device h100 --gpus 2048 --global-batch 2048 --seq-len 8192 "
    "--strategy tp=8,pp=16,mbs=1,zero=1,sp=on --max-offset 0 --points 6",
]
SLOW = {"search deepseek-v3 --device h800 --gpus 2048 --global-batch 4096 --seq-len 4096 --memory-cap 40GiB "
        "--schedules all --overlap ep+p2p"}


def cases(quick: bool) -> list[list[str]]:
    """Every command, as ndcp arguments with `--json FILE` appended by the runner."""
    out = [c.split() for c in DOCUMENTED]
    matrix = MATRIX if not quick else MATRIX[:8]
    for case in matrix:
        args = bench_argv(case, "default", 60.0)
        out.append([a for a in args if a not in ("--json", "-", "--quiet")])
    if not quick:
        out += [c.split() for c in sorted(SLOW)]
    return out


def strip_clock(value):
    """The document without its wall-clock fields."""
    if isinstance(value, dict):
        return {k: strip_clock(v) for k, v in value.items() if k not in CLOCK_KEYS}
    if isinstance(value, list):
        return [strip_clock(v) for v in value]
    return value


def answer(tree: Path, args: list[str]) -> tuple[int, object]:
    """(exit code, the JSON answer less its clock) of one command run from `tree` in a fresh process."""
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "out.json"
        done = subprocess.run([sys.executable, "-m", "ndcp", *args, "--json", str(target), "--quiet"],
                              capture_output=True, text=True, cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)})
        if not target.exists():
            return done.returncode, done.stderr.strip().splitlines()[-1:]
        return done.returncode, strip_clock(json.loads(target.read_text()))


@contextlib.contextmanager
def busy(count: int):
    """`count` processes spinning in a pure Python loop while the block runs; each stopped (by its own id) after it,
    also when the block fails."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def first_difference(a, b, path: str = "") -> str:
    """The path of the first place two documents differ."""
    if type(a) is not type(b):
        return f"{path or '.'}: {a!r} vs {b!r}"[:300]
    if isinstance(a, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                return f"{path}.{key}: only in {'after' if key in a else 'before'}"
            if a[key] != b[key]:
                return first_difference(a[key], b[key], f"{path}.{key}")
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} vs {len(b)} entries"
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return first_difference(x, y, f"{path}[{i}]")
    return f"{path or '.'}: {a!r} vs {b!r}"[:300]


def without_new_keys(after, before, path: str = "", found: set | None = None):
    """`after` less the keys `before` lacks (their paths, with list indices as [], added to `found`)."""
    if isinstance(after, dict) and isinstance(before, dict):
        out = {}
        for key, value in after.items():
            if key not in before:
                if found is not None:
                    found.add(f"{path}.{key}")
                continue
            out[key] = without_new_keys(value, before[key], f"{path}.{key}", found)
        return out
    if isinstance(after, list) and isinstance(before, list) and len(after) == len(before):
        return [without_new_keys(a, b, f"{path}[]", found) for a, b in zip(after, before)]
    return after


def compare(args: list[str], against: Path, new_keys: set | None = None, extra: tuple[str, ...] = (),
            load: int = 0) -> str | None:
    """None when both trees answer `args` alike (this tree's with `extra` added, beside `load` busy processes), else
    what differs. Given `new_keys` (a set), keys only the tree under test writes are allowed (additions to the JSON
    contract) and collected there."""
    with busy(load):
        after = answer(ROOT, args + list(extra))
    before = answer(against, args)
    if new_keys is not None:
        after = (after[0], without_new_keys(after[1], before[1], "", new_keys))
    if after == before:
        return None
    if after[0] != before[0]:
        return f"exit {after[0]} vs {before[0]}: {after[1] if after[0] > 1 else before[1]}"
    return first_difference(after[1], before[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", type=Path, required=True, help="the other source tree (e.g. a git worktree)")
    parser.add_argument("--quick", action="store_true", help="the documented commands and the first 8 bench cases")
    parser.add_argument("--jobs", type=int, default=1, help="commands run at once (default 1)")
    parser.add_argument("--allow-new-keys", action="store_true",
                        help="keys only this tree writes are additions, not differences (they are listed)")
    parser.add_argument("--extra", default="", help="arguments added to this tree's commands only")
    parser.add_argument("--busy", type=int, default=0, metavar="N",
                        help="run this tree's commands beside N busy processes (default 0)")
    options = parser.parse_args()
    options.against = options.against.resolve()
    todo = cases(options.quick)
    new_keys: set | None = set() if options.allow_new_keys else None
    with ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
        results = list(pool.map(lambda args: compare(args, options.against, new_keys, tuple(options.extra.split()),
                                                     options.busy), todo))
    differing = 0
    for args, diff in zip(todo, results):
        print(("same     " if diff is None else "DIFFERS  ") + " ".join(args))
        if diff is not None:
            differing += 1
            print(f"         {diff}")
    if new_keys:
        print("keys added: " + ", ".join(sorted(new_keys)))
    print(f"{len(todo) - differing} of {len(todo)} commands answer the same")
    return 1 if differing else 0


if __name__ == "__main__":
    raise SystemExit(main())
