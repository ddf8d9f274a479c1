#!/usr/bin/env python3
"""Fit the GEMM model's physical parameters on the published runs, with a leave-one-source-out figure.

Fitted (docs/calibration.md §7): the GEMM ceiling `compute_efficiency` of each GPU generation (Ampere: A100;
Hopper: H100, H200, H800), nothing else. Everything else comes from datasheets and papers (ndcp/specs/device.py: SM
counts, tile shape, FlashAttention efficiencies) or is derived from them (estimate/gemm.py: a tile's write-back
overhead from the ridge point). The objective is the mean absolute MFU error,
in points, over the runs `ndcp validate` compares, estimated through the same path (ndcp.validation) with the
candidate values put on each run's device.

Search: the exact minimum over a grid of ceilings 0.50-0.95. A ceiling only moves its own generation's runs, so each
generation is searched on its own (steps of 0.01, then 0.005 around the best); every (run, ceiling) error is computed
once and reused, by the leave-one-source-out folds too. Ties go to the smaller ceiling, so the result is
deterministic.

Leave-one-source-out: runs are grouped by publication, the id prefix before the first "_" (narayanan2021,
korthikanti2022, mcore, dgxc, torchtitan, ...); each group is held out in turn, the parameters are fitted on the
others and the held-out runs estimated with them. A generation with no run left in a fold keeps its preset value.

Usage: python scripts/calibrate.py [RUNS.yaml] [--json] [--write]
  --json   print the result as JSON instead of text
  --write  put the fitted numbers into ndcp/specs/device.py (AMPERE_/HOPPER_GEMM_EFFICIENCY)
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ndcp.specs import device as device_module  # noqa: E402
from ndcp.specs.device import ClusterSpec  # noqa: E402
from ndcp.specs.fields import SpecError  # noqa: E402
from ndcp.validation.compare import _compare  # noqa: E402  (the comparison `ndcp validate` makes, one run)
from ndcp.validation.runs import MeasuredRun, SkipRun, read_rows  # noqa: E402

# generation -> (presets in it, the device.py constant holding its fitted ceiling)
GENERATIONS = {"ampere": (("a100-40g", "a100-80g"), "AMPERE_GEMM_EFFICIENCY"),
               "hopper": (("h100", "h200", "h800"), "HOPPER_GEMM_EFFICIENCY")}
COARSE = tuple(round(0.50 + 0.01 * i, 3) for i in range(46))  # ceilings 0.50 ... 0.95
FINE_STEP = 0.005


def generation(row: MeasuredRun) -> str | None:
    return next((g for g, (names, _) in GENERATIONS.items() if row.cluster.device.name in names), None)


def source(row: MeasuredRun) -> str:
    return row.id.split("_", 1)[0]


def load(path: Path) -> list[MeasuredRun]:
    """The runs `ndcp validate` compares on MFU, on a device of a fitted generation."""
    rows = []
    for _, build in read_rows(path):
        try:
            row = build()
        except (SkipRun, SpecError, ValueError, TypeError, KeyError):
            continue
        if row.step_seconds is None and row.mfu is None and not row.tflops_per_gpu \
                and not row.tokens_per_second_per_gpu:
            continue
        if row.run.fp8:  # FP8 rows are compared, not fitted: their ceiling is assumed (docs/formulas.md §3.1)
            continue
        if generation(row) and _compare(row).mfu_error_points is not None:
            rows.append(row)
    return rows


class Errors:
    """MFU error (points) of each run under a ceiling, each computed once."""

    def __init__(self, rows: list[MeasuredRun]):
        self.rows, self.cache = rows, {}

    def __call__(self, i: int, ceiling: float) -> float:
        key = (i, ceiling)
        if key not in self.cache:
            row = self.rows[i]
            device = replace(row.cluster.device, compute_efficiency=ceiling)
            self.cache[key] = _compare(replace(row, cluster=ClusterSpec(device, row.cluster.count))).mfu_error_points
        return self.cache[key]


def _best_ceiling(errors: Errors, runs: list[int]) -> float:
    """The ceiling minimising the generation's sum of |error|: coarse grid, then refined."""
    def cost(c):
        return sum(abs(errors(i, c)) for i in runs)

    best = min((cost(c), c) for c in COARSE)
    around = (round(best[1] - FINE_STEP, 3), round(best[1] + FINE_STEP, 3))
    return min([best] + [(cost(c), c) for c in around if 0.0 < c <= 1.0])[1]


def fit(errors: Errors, runs: list[int]) -> dict:
    """The grid minimum of the mean |MFU error| over `runs`; generations without a run keep their preset."""
    params = {}
    for g, (_, constant) in GENERATIONS.items():
        members = [i for i in runs if generation(errors.rows[i]) == g]
        params[f"{g}_compute_efficiency"] = (_best_ceiling(errors, members) if members
                                             else getattr(device_module, constant))
    return params


def evaluate(errors: Errors, params: dict, runs: list[int]) -> dict[str, float]:
    return {errors.rows[i].id: errors(i, params[f"{generation(errors.rows[i])}_compute_efficiency"]) for i in runs}


def _stats(values) -> dict:
    values = [abs(v) for v in values]
    return {"runs": len(values), "mean": sum(values) / len(values) if values else None,
            "max": max(values) if values else None}


def calibrate(path: Path) -> dict:
    errors = Errors(load(path))
    everything = list(range(len(errors.rows)))
    params = fit(errors, everything)
    in_sample = evaluate(errors, params, everything)
    folds, held_out = [], {}
    for name in sorted({source(r) for r in errors.rows}):
        test = [i for i in everything if source(errors.rows[i]) == name]
        fold_params = fit(errors, [i for i in everything if i not in test])
        fold_errors = evaluate(errors, fold_params, test)
        held_out.update(fold_errors)
        folds.append({"source": name, "parameters": fold_params, "errors": fold_errors, **_stats(fold_errors.values())})
    return {"runs_file": str(path), "parameters": params,
            "in_sample": {**_stats(in_sample.values()), "errors": in_sample},
            "leave_one_source_out": {**_stats(held_out.values()), "folds": folds}}


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
