#!/usr/bin/env python3
"""Fit the GEMM model's physical parameters on the published runs, with a leave-one-source-out figure.

Fitted (docs/calibration.md §7): the GEMM ceiling `compute_efficiency` of each GPU generation (Ampere: A100;
Hopper: H100, H200, H800), nothing else. Everything else comes from datasheets and papers (ndcp/specs/device.py: SM
counts, tile shape, FlashAttention efficiencies) or is derived from them (estimate/gemm.py: a tile's write-back
overhead from the ridge point). The objective is the mean absolute MFU error,
in points, over the runs `ndcp validate` compares, estimated through the same path (ndcp.validation) with the
candidate values put on each run's device.

Search: the exact minimum over a grid of ceilings 0.50-0.95 (ndcp.validation.fit.grid_minimum). A ceiling only
moves its own generation's runs, so each generation is searched on its own; every (run, ceiling) error is computed
once and reused, by the leave-one-source-out folds too (ndcp.validation.fit: the runs, the error cache and the
folds are the ones `ndcp calibrate` uses). A generation with no run left in a fold keeps its preset value.

Usage: python scripts/calibrate.py [RUNS.yaml] [--json] [--write]
  --json   print the result as JSON instead of text
  --write  put the fitted numbers into ndcp/specs/device.py (AMPERE_/HOPPER_GEMM_EFFICIENCY)
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ndcp.specs import device as device_module  # noqa: E402
from ndcp.validation.fit import Errors, grid_minimum, leave_one_source_out, load_runs, statistics  # noqa: E402
from ndcp.validation.runs import MeasuredRun  # noqa: E402

# generation -> (presets in it, the device.py constant holding its fitted ceiling)
GENERATIONS = {"ampere": (("a100-40g", "a100-80g"), "AMPERE_GEMM_EFFICIENCY"),
               "hopper": (("h100", "h200", "h800"), "HOPPER_GEMM_EFFICIENCY")}


def generation(row: MeasuredRun) -> str | None:
    return next((g for g, (names, _) in GENERATIONS.items() if row.cluster.device.name in names), None)


def fit(errors: Errors, runs: list[int]) -> dict:
    """The grid minimum of the mean |MFU error| over `runs`; generations without a run keep their preset."""
    params = {}
    for g, (_, constant) in GENERATIONS.items():
        members = [i for i in runs if generation(errors.rows[i]) == g]
        params[f"{g}_compute_efficiency"] = (
            grid_minimum(lambda c: sum(abs(errors(i, {"compute_efficiency": c})) for i in members)) if members
            else getattr(device_module, constant))
    return params


def evaluate(errors: Errors, params: dict, runs: list[int]) -> dict[str, float]:
    def ceiling(i: int) -> float:
        return params[f"{generation(errors.rows[i])}_compute_efficiency"]

    return {errors.rows[i].id: errors(i, {"compute_efficiency": ceiling(i)}) for i in runs}


def calibrate(path: Path) -> dict:
    errors = Errors(load_runs(path, lambda row: generation(row) is not None))
    everything = list(range(len(errors.rows)))
    params = fit(errors, everything)
    in_sample = evaluate(errors, params, everything)
    folds = leave_one_source_out(errors, everything, lambda runs: fit(errors, runs),
                                 lambda fold_params, runs: evaluate(errors, fold_params, runs))
    return {"runs_file": str(path), "parameters": params,
            "in_sample": {**statistics(list(in_sample.values())), "errors": in_sample},
            "leave_one_source_out": folds}


def preset_lines(params: dict) -> list[str]:
    lines = [f"{constant} = {params[f'{g}_compute_efficiency']!r}" for g, (_, constant) in GENERATIONS.items()]
    return lines


def write_presets(params: dict, target: Path = ROOT / "ndcp" / "specs" / "device.py") -> None:
    """Replace only the numbers of the fitted constants' assignment lines (comments and layout stay)."""
    text = target.read_text(encoding="utf-8")
    for line in preset_lines(params):
        name, value = line.split(" = ")
        text, n = re.subn(rf"^({name} = )[0-9.eE+-]+", rf"\g<1>{value}", text, count=1, flags=re.M)
        if n != 1:
            raise SystemExit(f"{target}: no `{name} = <number>` line to rewrite")
    target.write_text(text, encoding="utf-8")


def report(result: dict) -> str:
    p, ins, loso = result["parameters"], result["in_sample"], result["leave_one_source_out"]
    out = [f"Fitted on {ins['runs']} runs of {result['runs_file']} (mean |MFU error|, points):"]
    out += [f"  {line}" for line in preset_lines(p)]
    out.append(f"In-sample MFU error: mean {ins['mean']:.2f}, max {ins['max']:.2f} points")
    out.append(f"Leave-one-source-out: mean {loso['mean']:.2f}, max {loso['max']:.2f} points over "
               f"{loso['runs']} held-out runs")
    for fold in loso["folds"]:
        fp = fold["parameters"]
        fitted = ", ".join(f"{k.split('_')[0]} {v:g}" for k, v in fp.items())
        out.append(f"  held out {fold['source']:<16} {fold['runs']:>2} runs: mean {fold['mean']:.2f}, "
                   f"max {fold['max']:.2f}  (fitted on the rest: {fitted})")
    worst = sorted(ins["errors"].items(), key=lambda kv: -abs(kv[1]))[:6]
    out.append("Worst runs in sample: " + ", ".join(f"{k} {v:+.2f}" for k, v in worst))
    out.append("Paste into ndcp/specs/device.py (or run with --write):")
    out += [f"  {line}" for line in preset_lines(p)]
    return "\n".join(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="?", default=str(ROOT / "examples" / "published_runs.yaml"))
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--write", action="store_true", help="rewrite the fitted numbers in ndcp/specs/device.py")
    args = parser.parse_args(argv)
    result = calibrate(Path(args.runs))
    print(json.dumps(result, indent=2) if args.json else report(result))
    if args.write:
        write_presets(result["parameters"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
