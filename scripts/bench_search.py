#!/usr/bin/env python3
"""Benchmark: the per-layer search (per-layer recompute plans over every recompute option, in the trainer-free space:
`--trainer any` where the tree has it, the default before) vs the uniform one (`--recompute uniform`), top 10, on real models from 32 to 131,072 GPUs, dense and MoE, with and without memory caps;
optionally the uniform search vs the exhaustive oracle (`--oracle`).

Each search is one `ndcp search ... --json -` in a fresh process, so none warms the estimators' caches for another.
Per case and method: wall seconds of the whole process (start and imports included) and the solve seconds the search
reports; proof status; the best step time. Each source tree is byte-compiled first (`python -m compileall`), so the
wall time is that of ndcp from its second run on, as users see it: not of compiling ndcp's sources, which a process
with PYTHONDONTWRITEBYTECODE set (as on these machines) would otherwise repeat every time. The summary gives the
median default/uniform ratio of solve seconds (measured in this run: on a shared machine ratios matter more than
absolute times).
With `--against DIR` each case's default search also runs on another source tree (e.g. a worktree of the last
round's commit), alternating with this one, so that the before/after speed-up (of the solve and of the whole
process) is a ratio measured in one run.
Under `--trainer any` the process also searches the default trainer's best plan (shown beside): its wall seconds
include that second search, its solve seconds are the first's.
`--readme` runs the README's eight searches instead (as written there: the default trainer, its flags; the two
DeepSeek-V3 ones under a 40 GiB cap are the slowest), with `--against DIR` alternating with the other tree: solve and
wall seconds of each, the speed-ups, and whether the `--json` answers are identical once the clock is removed.
Usage: python scripts/bench_search.py [--quick | --cases I,J | --readme] [--oracle] [--oracle-limit N] [--tree DIR]
       [--against DIR] [--markdown]
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MATRIX = [  # model, device, gpus, global batch, sequence, memory cap ("" = the device's)
    ("llama3-8b", "h100", 32, 128, 8192, ""),
    ("llama3-8b", "h100", 64, 256, 8192, ""),
    ("gpt3-175b", "a100-80g", 64, 1536, 2048, ""),
    ("llama3-70b", "h100", 64, 128, 8192, ""),
    ("llama3-70b", "h100", 64, 128, 8192, "40GiB"),
    ("mixtral-8x7b", "h100", 64, 256, 4096, ""),
    ("mixtral-8x7b", "h100", 64, 256, 4096, "50GiB"),
    ("gpt3-175b", "a100-80g", 512, 1536, 2048, ""),
    ("gpt3-175b", "a100-80g", 512, 1536, 2048, "24GiB"),
    ("llama3-70b", "h100", 512, 1024, 8192, ""),
    ("qwen2.5-72b", "h200", 1024, 1024, 8192, ""),
    ("qwen3-235b-a22b", "h100", 1024, 2048, 4096, "70GiB"),
    ("llama3.1-405b", "h100", 2048, 1024, 8192, ""),
    ("mixtral-8x22b", "h100", 2048, 2048, 4096, ""),
    ("qwen3-next-80b-a3b", "h100", 256, 256, 131072, ""),  # hybrid: Gated DeltaNet + gated attention, 128k context
    ("deepseek-v3", "h800", 2048, 4096, 4096, ""),
    ("deepseek-v3", "h800", 2048, 4096, 4096, "40GiB"),
    ("qwen3-235b-a22b", "h100", 4096, 4096, 4096, ""),
    ("llama3.1-405b", "h100", 16384, 2048, 8192, ""),
    ("gpt3-175b", "h100", 16384, 4096, 2048, ""),
    ("llama3.1-405b", "h100", 131072, 16384, 8192, ""),
    ("deepseek-v3", "gb200-nvl72", 2048, 8192, 4096, ""),  # EP 64 inside a 72-GPU NVLink domain (trays of 4)
]
QUICK = [0, 2, 4, 6]
README = [  # the README's searches (docs/benchmarks.md §1), the default trainer
    "llama3-70b --device h100 --gpus 512 --global-batch 1024 --seq-len 8192",
    "llama3-70b --device h100 --gpus 512 --global-batch 1024 --seq-len 8192 --headroom 0.1",
    "llama3-70b --device h100 --gpus 512 --global-batch 1024 --seq-len 8192 --trainer any",
    "mixtral-8x7b --device h100 --gpus 64 --global-batch 256 --seq-len 4096 --memory-cap 70GiB",
    "llama3-70b --device h100 --gpus 64 --global-batch 128 --seq-len 8192 --memory-cap 40GiB",
    "deepseek-v3 --device h800 --gpus 2048 --global-batch 4096 --seq-len 4096 --memory-cap 40GiB",
    "deepseek-v3 --device h800 --gpus 2048 --global-batch 4096 --seq-len 4096 --memory-cap 40GiB --schedules all "
    "--overlap ep+p2p",
    "llama3.1-405b --device h100 --gpus 2048 --global-batch 2048 --seq-len 8192",
]


@functools.lru_cache(maxsize=None)
def trainer_free(tree: Path) -> list[str]:
    """The flag that searches every plan in `tree`'s ndcp: `--trainer any` where it plans for a trainer by default,
    nothing in trees from before that default (they search every plan without it)."""
    done = subprocess.run([sys.executable, "-m", "ndcp", "search", "--help"], capture_output=True, text=True,
                          cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)})
    return ["--trainer", "any"] if ",any}" in done.stdout else []  # --trainer {megatron,...,any}


def argv(case: tuple, method: str, time_limit: float, tree: Path = ROOT) -> list[str]:
    """The `ndcp search` arguments of one case and method (default: per-layer, trainer-free; uniform; oracle)."""
    name, device, gpus, gbs, seq, cap = case
    out = ["search", name, "--device", device, "--gpus", str(gpus), "--global-batch", str(gbs), "--seq-len", str(seq),
           "--time-limit", str(time_limit), "--json", "-", "--quiet"]
    if cap:
        out += ["--memory-cap", cap]
    if method != "default":
        out += ["--recompute", "uniform"] + (["--exhaustive"] if method == "oracle" else [])
    return out + trainer_free(tree)


def run(case: tuple, method: str, time_limit: float, tree: Path = ROOT) -> dict:
    """One search in a fresh process, ndcp imported from `tree`: its JSON answer plus `wall` (seconds, process start
    included)."""
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "ndcp"] + argv(case, method, time_limit, tree), capture_output=True,
                          text=True, cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)})
    wall = time.perf_counter() - t0
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv(case, method, time_limit, tree))}: exit {done.returncode}: {done.stderr.strip()}")
    answer = json.loads(done.stdout)
    answer["wall"] = wall
    return answer


def run_readme(search: str, time_limit: float, tree: Path) -> dict:
    """One README search (`search`: its arguments after `ndcp search`) in a fresh process from `tree`: its JSON
    answer plus `wall`."""
    args = ["search", *search.split(), "--time-limit", str(time_limit), "--json", "-", "--quiet"]
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "ndcp", *args], capture_output=True, text=True, cwd=tree,
                          env={**os.environ, "PYTHONPATH": str(tree)})
    wall = time.perf_counter() - t0
    if done.returncode not in (0, 1):
        raise SystemExit(f"ndcp {' '.join(args)}: exit {done.returncode}: {done.stderr.strip()}")
    return {**json.loads(done.stdout), "wall": wall}


def readme_speed(args) -> None:
    """--readme: each README search from --tree (and from --against, run first), its solve and wall seconds and
    the speed-ups; `identical`: the two JSON answers agree once the clock keys are removed."""
    from check_same_answers import strip_clock  # noqa: E402 (it imports this module)

    titles = ["search", "status", "solve s", "wall s"] + (["before s", "speed-up", "before wall s", "wall speed-up",
                                                           "identical"] if args.against else [])
    print_row(titles, args.markdown, header=True)
    speedups = []
    for search in README:
        before = run_readme(search, args.time_limit, args.against) if args.against else None
        after = run_readme(search, args.time_limit, args.tree)
        cells = [search, after["status"], f"{after['solve_seconds']:.2f}", f"{after['wall']:.2f}"]
        if before is not None:
            speedups.append(before["solve_seconds"] / after["solve_seconds"])
            cells += [f"{before['solve_seconds']:.2f}", f"{speedups[-1]:.2f}", f"{before['wall']:.2f}",
                      f"{before['wall'] / after['wall']:.2f}",
                      "yes" if strip_clock(before) == strip_clock(after) else "NO"]
        print_row(cells, args.markdown, header=False)
    if speedups:
        print(f"\nagainst {args.against}: speed-up of the solve median {statistics.median(speedups):.2f} "
              f"(min {min(speedups):.2f}, max {max(speedups):.2f}); load {os.getloadavg()[0]:.2f} on "
              f"{os.cpu_count()} cores")


def steps(answer: dict) -> list[float]:
    return [round(s["time"]["step_seconds"], 9) for s in answer["strategies"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"only cases {QUICK}")
    parser.add_argument("--cases", metavar="I,J,...", help="only these rows of the matrix (0-based)")
    parser.add_argument("--time-limit", type=float, default=60.0, help="solver limit per search (default 60 s)")
    parser.add_argument("--oracle", action="store_true", help="also run the uniform exhaustive oracle")
    parser.add_argument("--oracle-limit", type=int, default=300_000, help="skip the oracle above this many candidates")
    parser.add_argument("--tree", type=Path, default=ROOT, help="run ndcp from this source tree (e.g. a copy of an "
                        "earlier version, to compare before and after)")
    parser.add_argument("--against", type=Path, help="also run each default search from this source tree, "
                        "alternating, and report the speed-up of --tree's over it (solve seconds)")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument("--readme", action="store_true", help="the README's searches instead of the matrix")
    args = parser.parse_args()
    for tree in dict.fromkeys(t for t in (args.tree, args.against) if t is not None):
        compile_tree(tree)
    if args.readme:
        return readme_speed(args)
    chosen = [int(i) for i in args.cases.split(",")] if args.cases else QUICK if args.quick else range(len(MATRIX))
    titles = ["model", "device", "GPUs", "GBS", "seq", "cap", "space", "default s", "wall s", "status", "uniform s",
              "wall s", "status", "ratio", "same best"]
    if args.oracle:
        titles += ["oracle s", "agree"]
    if args.against:
        titles += ["before s", "speed-up", "before wall s", "same answer"]
    print_row(titles, args.markdown, header=True)
    solves, ratios, proven_in, speedups, wall_speedups = [], [], [], [], []
    for i in chosen:
        case = MATRIX[i]
        before = run(case, "default", args.time_limit, args.against) if args.against else None
        default, uniform = (run(case, method, args.time_limit, args.tree) for method in ("default", "uniform"))
        d, u = default["solve_seconds"], uniform["solve_seconds"]
        solves.append(d)
        ratios.append(d / u)
        proven_in.append(d if default["proven"] else None)
        d_best, u_best = (steps(default) or [None])[0], (steps(uniform) or [None])[0]
        same = ("-" if None in (d_best, u_best) else "yes" if d_best == u_best
                else f"{100 * (d_best / u_best - 1):+.2f}%")
        cells = [*map(str, case[:5]), case[5] or "-", f"{default['space']['size']:,}", f"{d:.3f}",
                 f"{default['wall']:.2f}", default["status"], f"{u:.3f}", f"{uniform['wall']:.2f}", uniform["status"],
                 f"{d / u:.2f}", same]
        if args.oracle:
            if uniform["space"]["size"] <= args.oracle_limit:
                oracle = run(case, "oracle", args.time_limit, args.tree)
                agree = steps(oracle) == steps(uniform) and oracle["status"] == uniform["status"]
                cells += [f"{oracle['solve_seconds']:.2f}", "yes" if agree else "NO"]
            else:
                cells += ["-", "-"]
        if before is not None:
            speedups.append(before["solve_seconds"] / d)
            wall_speedups.append(before["wall"] / default["wall"])
            cells += [f"{before['solve_seconds']:.3f}", f"{speedups[-1]:.2f}", f"{before['wall']:.2f}",
                      same_answer(before, default)]
        print_row(cells, args.markdown, header=False)
    proven = [s for s in proven_in if s is not None]
    print(f"\ndefault search: proven on {len(proven)} of {len(solves)} cases, "
          f"median solve {statistics.median(solves):.3f} s, "
          f"max {max(solves):.3f} s; median default/uniform ratio {statistics.median(ratios):.2f} "
          f"(min {min(ratios):.2f}, max {max(ratios):.2f}); load {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    if speedups:
        print(f"against {args.against}: median speed-up {statistics.median(speedups):.2f} "
              f"(min {min(speedups):.2f}, max {max(speedups):.2f}); of the wall time (whole process) "
              f"{statistics.median(wall_speedups):.2f} (min {min(wall_speedups):.2f}, max {max(wall_speedups):.2f})")


def compile_tree(tree: Path) -> None:
    """Byte-compile ndcp's sources in `tree` (compileall writes the caches whatever PYTHONDONTWRITEBYTECODE says)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "ndcp")], check=True)


def same_answer(before: dict, after: dict) -> str:
    """"yes" when both rankings have the same step times, else the largest change of a rank's step time (plans are
    proven optimal within the plan models' tolerance, so near-equal plans may trade places)."""
    old, new = steps(before), steps(after)
    if before["status"] != after["status"] or len(old) != len(new):
        return "NO"
    if old == new:
        return "yes"
    change = max((b / a - 1 for a, b in zip(old, new)), key=abs)
    return f"{100 * change:+.4f}%"


def print_row(cells: list[str], markdown: bool, header: bool) -> None:
    if markdown:
        print("| " + " | ".join(cells) + " |")
        if header:
            print("|" + "---|" * len(cells))
    else:
        print("  ".join(f"{c:>10}" for c in cells), flush=True)


if __name__ == "__main__":
    main()
