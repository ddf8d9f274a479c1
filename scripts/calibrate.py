#!/usr/bin/env python3
"""Fit the GEMM model's physical parameters on the measured runs, with leave-one-source-out figures per source.

Fitted (docs/calibration.md §7): the GEMM ceiling `compute_efficiency` of each GPU generation (Ampere: A100;
Hopper: H100, H200, H800) on its 16-bit runs, and the FP8 GEMM ceiling `fp8_compute_efficiency` of each generation
with FP8 tensor cores (Hopper; Blackwell: B200) on its FP8 runs, nothing else. Everything else comes from datasheets
and papers (ndcp/specs/device.py: SM counts, tile shape, FlashAttention efficiencies) or is derived from them
(estimate/gemm.py: a tile's write-back overhead from the ridge point). The objective is the mean absolute MFU error,
in points, over the runs `ndcp validate` compares, estimated through the same path (ndcp.validation) with the
candidate values put on each run's device.

Search: the exact minimum over a grid of ceilings 0.50-0.95 (ndcp.validation.fit.grid_minimum). A ceiling only
moves its own generation's runs, so each generation is searched on its own, the 16-bit ceiling first, then the FP8
one on the FP8 runs at that 16-bit ceiling (their attention core, norms and BF16 GEMMs run at it). An FP8 ceiling is
fitted only on runs of at least MIN_FP8_SOURCES publications, else its preset stays (0: the 16-bit ceiling assumed).
Every (run, ceiling) error is computed once and reused, by the leave-one-source-out folds too
(ndcp.validation.fit: the runs, the error cache and the folds are the ones `ndcp calibrate` uses). A generation with
no run left in a fold keeps its preset value.

Runs: every run of both examples files (published_runs.yaml, measured_runs_2.yaml) unless files are given; the
fit reads the runs with a measured MFU (ndcp.validation.fit.fitted; FP8 MFU is of the BF16 peak where the source
quotes it so, docs/formulas.md §2.6) on a device of a fitted generation, the
per-source table every run compared on time: the shipped constants, the in-sample fit and each source held out
(step time |relative error| and MFU |error|, dense and MoE apart). Sources are publications (fit.source).

Usage: python scripts/calibrate.py [RUNS.yaml ...] [--fp8-only] [--json] [--write] [--doc]
  --fp8-only  fit the FP8 ceilings only, the 16-bit ones kept at the shipped constants
  --json   print the result as JSON instead of text
  --write  put the fitted numbers into ndcp/specs/device.py (AMPERE_/HOPPER_GEMM_EFFICIENCY,
           HOPPER_/BLACKWELL_FP8_GEMM_EFFICIENCY; with --fp8-only the FP8 ones alone)
  --doc    rewrite the per-source table in docs/calibration.md §7 (between its two marker lines)
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from statistics import median
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ndcp.report.output import write_output  # noqa: E402
from ndcp.specs import device as device_module  # noqa: E402
from ndcp.validation.fit import (Errors, compared_runs, fitted, grid_minimum,  # noqa: E402
                                 leave_one_source_out, source, statistics)
from ndcp.validation.runs import MeasuredRun  # noqa: E402

RUNS_FILES = (ROOT / "examples" / "published_runs.yaml", ROOT / "examples" / "measured_runs_2.yaml")
DOC = ROOT / "docs" / "calibration.md"
TABLE_BEGIN, TABLE_END = "<!-- scripts/calibrate.py --doc: begin -->", "<!-- scripts/calibrate.py --doc: end -->"

# generation -> (presets in it, the device.py constant holding its fitted ceiling): 16-bit runs, then FP8 runs
GENERATIONS = {"ampere": (("a100-40g", "a100-80g"), "AMPERE_GEMM_EFFICIENCY"),
               "hopper": (("h100", "h200", "h800"), "HOPPER_GEMM_EFFICIENCY")}
FP8_GENERATIONS = {"hopper": (("h100", "h200", "h800"), "HOPPER_FP8_GEMM_EFFICIENCY"),
                   "blackwell": (("b200",), "BLACKWELL_FP8_GEMM_EFFICIENCY")}
# An FP8 ceiling fitted on one publication's runs would absorb that publication's software stack (its container,
# its recipes), not the tensor cores: below two sources the preset stays (docs/calibration.md §7).
MIN_FP8_SOURCES = 2
# the table's rows over all sources (source_table), after the per-source ones: name -> which runs
GROUPS = {"all": lambda row: True, "dense": lambda row: row.model.moe is None,
          "MoE": lambda row: row.model.moe is not None, "FP8": lambda row: row.run.fp8,
          "no recompute": lambda row: row.strategy.recompute.mode == "none",
          "full recompute": lambda row: row.strategy.recompute.mode == "full"}


def generation(row: MeasuredRun) -> str | None:
    """The generation whose ceiling run `row` is fitted with: its 16-bit one, or its FP8 one for an FP8 run."""
    table = FP8_GENERATIONS if row.run.fp8 else GENERATIONS
    return next((g for g, (names, _) in table.items() if row.cluster.device.name in names), None)


def _grid(errors: Errors, members: list[int], values) -> float:
    return grid_minimum(lambda c: sum(abs(errors(i, values(c))) for i in members))


def fit(errors: Errors, runs: list[int], fp8_only: bool = False) -> dict:
    """The grid minimum of the mean |MFU error| over `runs`: each generation's 16-bit ceiling on its 16-bit runs,
    then its FP8 ceiling on its FP8 runs at that 16-bit ceiling. A generation without a run (an FP8 one with runs of
    fewer than MIN_FP8_SOURCES sources; every 16-bit one under `fp8_only`) keeps its preset."""
    params, rows = {}, errors.rows
    for g, (_, constant) in GENERATIONS.items():
        members = [i for i in runs if not rows[i].run.fp8 and generation(rows[i]) == g and not fp8_only]
        params[f"{g}_compute_efficiency"] = (_grid(errors, members, lambda c: {"compute_efficiency": c}) if members
                                             else getattr(device_module, constant))
    for g, (_, constant) in FP8_GENERATIONS.items():
        members = [i for i in runs if rows[i].run.fp8 and generation(rows[i]) == g]
        bf16 = {"compute_efficiency": params[f"{g}_compute_efficiency"]} if g in GENERATIONS else {}
        enough = len({source(rows[i]) for i in members}) >= MIN_FP8_SOURCES
        params[f"{g}_fp8_compute_efficiency"] = (
            _grid(errors, members, lambda c: {**bf16, "fp8_compute_efficiency": c}) if enough
            else getattr(device_module, constant))
    return params


def _ceilings(errors: Errors, params: dict, i: int) -> dict:
    """The device values run i is estimated with under `params` (none for a generation not fitted: MI300X)."""
    row = errors.rows[i]
    name, values = row.cluster.device.name, {}
    g = next((g for g, (names, _) in GENERATIONS.items() if name in names), None)
    if g:
        values["compute_efficiency"] = params[f"{g}_compute_efficiency"]
    g = next((g for g, (names, _) in FP8_GENERATIONS.items() if name in names), None)
    if g and row.run.fp8:
        values["fp8_compute_efficiency"] = params[f"{g}_fp8_compute_efficiency"]
    return values


def evaluate(errors: Errors, params: dict, runs: list[int]) -> dict[str, float]:
    return {errors.rows[i].id: errors(i, _ceilings(errors, params, i)) for i in runs}


def _figures(errors: Errors, runs: list[int], params_of) -> dict:
    """Mean step |relative error| (%) and MFU |error| (points) over `runs`, run i under params_of(i)."""
    compared = [errors.comparison(i, params_of(i)) for i in runs]
    steps = [abs(c.step_relative_error) * 100 for c in compared if c.step_relative_error is not None]
    mfus = [abs(c.mfu_error_points) for c in compared if c.mfu_error_points is not None]
    return {"runs": len(runs), "step_pct": sum(steps) / len(steps) if steps else None,
            "mfu_points": sum(mfus) / len(mfus) if mfus else None}


def step_ratios(errors: Errors, runs: list[int]) -> list[tuple[str, float]]:
    """(source, estimated over measured step time) of each run of `runs` compared on time, shipped constants."""
    compared = ((source(errors.rows[i]), errors.comparison(i, {}).step_relative_error) for i in runs)
    return [(name, 1.0 + error) for name, error in compared if error is not None]


def source_medians(ratios: list[tuple[str, float]]) -> dict[str, float]:
    """Each source's median estimated/measured step ratio: what one constant per source (its software stack, its
    container, how it measures) would absorb. A diagnostic, never a fitted parameter."""
    names = {name for name, _ in ratios}
    return {name: median(r for n, r in ratios if n == name) for name in names}


def within_source_pct(ratios: list[tuple[str, float]], medians: dict[str, float]) -> float | None:
    """Mean step |relative error| (%) of `ratios` once each run's source median is divided out."""
    spread = [abs(r / medians[name] - 1) * 100 for name, r in ratios]
    return sum(spread) / len(spread) if spread else None


def source_table(errors: Errors, runs: list[int], fitting: list[int], params: dict, fp8_only: bool = False
                 ) -> list[dict]:
    """Per source, then the GROUPS over all sources: shipped constants, in-sample fit, the source held out (the fit
    on the other sources' fitting runs), and the source median and within-source spread (step_ratios)."""
    names = sorted({source(errors.rows[i]) for i in runs})
    held_out = {name: fit(errors, [i for i in fitting if source(errors.rows[i]) != name], fp8_only)
                for name in names}
    groups = [(name, [i for i in runs if source(errors.rows[i]) == name]) for name in names]
    groups += [(name, [i for i in runs if keep(errors.rows[i])]) for name, keep in GROUPS.items()]
    medians = source_medians(step_ratios(errors, runs))
    table = []
    for name, members in groups:
        table.append({"source": name, "fitting_runs": sum(i in fitting for i in members),
                      "moe_runs": sum(errors.rows[i].model.moe is not None for i in members),
                      "shipped": _figures(errors, members, lambda i: {}),
                      "in_sample": _figures(errors, members, lambda i: _ceilings(errors, params, i)),
                      "held_out": _figures(errors, members, lambda i: _ceilings(
                          errors, held_out[source(errors.rows[i])], i)),
                      "source_median": medians.get(name),
                      "within_source_step_pct": within_source_pct(step_ratios(errors, members), medians)})
    return table


def _fitted_on(errors: Errors, fitting: list[int], fp8_only: bool) -> tuple[dict, dict]:
    """The runs each constant is fitted on, and the constants kept at their preset with the reason."""
    fitted_on, kept = {}, {}
    for fp8, table in ((False, GENERATIONS), (True, FP8_GENERATIONS)):
        for g, (_, constant) in table.items():
            ids = sorted(errors.rows[i].id for i in fitting
                         if errors.rows[i].run.fp8 == fp8 and generation(errors.rows[i]) == g)
            sources = sorted({source(errors.rows[i]) for i in fitting
                              if errors.rows[i].run.fp8 == fp8 and generation(errors.rows[i]) == g})
            if fp8 and len(sources) < MIN_FP8_SOURCES:
                kept[constant] = f"FP8 runs of {len(sources)} source(s) ({', '.join(sources) or 'none'})"
            elif not fp8 and fp8_only:
                kept[constant] = "--fp8-only"
            elif ids:
                fitted_on[constant] = ids
    return fitted_on, kept


def calibrate(paths: list[Path], fp8_only: bool = False) -> dict:
    errors = Errors([row for path in paths for row in compared_runs(path)])
    everything = list(range(len(errors.rows)))
    fitting = [i for i in everything if generation(errors.rows[i]) is not None and fitted(errors.rows[i], fp8=True)
               and (errors.rows[i].run.fp8 or not fp8_only)]
    params = fit(errors, fitting, fp8_only)
    in_sample = evaluate(errors, params, fitting)
    folds = leave_one_source_out(errors, fitting, lambda runs: fit(errors, runs, fp8_only),
                                 lambda fold_params, runs: evaluate(errors, fold_params, runs))
    fitted_on, kept = _fitted_on(errors, fitting, fp8_only)
    fp8_errors = [e for i, e in zip(fitting, in_sample.values()) if errors.rows[i].run.fp8]
    return {"runs_files": [str(p) for p in paths], "parameters": params, "fitted_on": fitted_on, "kept": kept,
            "in_sample": {**statistics(list(in_sample.values())), "fp8": statistics(fp8_errors),
                          "errors": in_sample},
            "leave_one_source_out": folds,
            "sources": source_table(errors, everything, fitting, params, fp8_only)}


def preset_lines(params: dict, constants=None) -> list[str]:
    """`CONSTANT = value` for every fitted constant (or those of `constants`)."""
    pairs = [(constant, params[f"{g}_compute_efficiency"]) for g, (_, constant) in GENERATIONS.items()]
    pairs += [(constant, params[f"{g}_fp8_compute_efficiency"]) for g, (_, constant) in FP8_GENERATIONS.items()]
    return [f"{constant} = {value!r}" for constant, value in pairs if constants is None or constant in constants]


def write_presets(params: dict, target: Path = ROOT / "ndcp" / "specs" / "device.py", constants=None) -> None:
    """Replace only the numbers of the fitted constants' assignment lines (comments and layout stay)."""
    text = target.read_text(encoding="utf-8")
    for line in preset_lines(params, constants):
        name, value = line.split(" = ")
        text, n = re.subn(rf"^({name} = )[0-9.eE+-]+", rf"\g<1>{value}", text, count=1, flags=re.M)
        if n != 1:
            raise SystemExit(f"{target}: no `{name} = <number>` line to rewrite")
    target.write_text(text, encoding="utf-8")


def _cell(figures: dict) -> str:
    step, mfu = figures["step_pct"], figures["mfu_points"]
    return f"{'-' if step is None else f'{step:.1f}'} / {'-' if mfu is None else f'{mfu:.2f}'}"


def markdown_table(result: dict) -> str:
    """The per-source table of docs/calibration.md §7: step |rel. error| % / MFU |error| points per column."""
    out = ["| source | runs (MoE) | fitting | shipped | in-sample fit | held out | source median | within source |",
           "|---|---|---|---|---|---|---|---|"]
    for row in result["sources"]:
        name = row["source"] if row["source"] not in GROUPS else f"**{row['source']}**"
        median = "" if row["source_median"] is None else f"{row['source_median']:.3f}"
        within = "-" if row["within_source_step_pct"] is None else f"{row['within_source_step_pct']:.1f}"
        out.append(f"| {name} | {row['shipped']['runs']} ({row['moe_runs']}) | {row['fitting_runs']} | "
                   f"{_cell(row['shipped'])} | {_cell(row['in_sample'])} | {_cell(row['held_out'])} | {median} | "
                   f"{within} |")
    fitted_on = "; ".join(f"`{constant}` on {len(ids)} runs" for constant, ids in result["fitted_on"].items())
    p = ", ".join(f"{line.split(' = ')[0]} {line.split(' = ')[1]}" for line in preset_lines(result["parameters"]))
    return "\n".join(out + ["", f"Each cell: mean step-time |relative error| (%) / mean MFU |error| (points). "
                             f"In-sample fit: {p} ({fitted_on}, listed by `scripts/calibrate.py --json`: "
                             "`fitted_on`). Held out: the ceilings fitted without the row's source. Source median: the "
                             "source's median estimated/measured step ratio (shipped constants; below 1: too fast); "
                             "within source: the step |relative error| (%) left once each run's source median is "
                             "divided out, a diagnostic of what one constant per source would absorb, never "
                             "shipped."])


def write_doc(result: dict, target: Path = DOC) -> None:
    """Replace the text between the table markers of docs/calibration.md, the file written whole."""
    text = target.read_text(encoding="utf-8")
    begin, end = text.find(TABLE_BEGIN), text.find(TABLE_END)
    if begin < 0 or end < begin:
        raise SystemExit(f"{target}: no {TABLE_BEGIN} ... {TABLE_END} block to rewrite")
    text = text[:begin + len(TABLE_BEGIN)] + "\n" + markdown_table(result) + "\n" + text[end:]
    write_output(text, target, "--doc")


def report(result: dict) -> str:
    p, ins, loso = result["parameters"], result["in_sample"], result["leave_one_source_out"]
    out = [f"Fitted on {ins['runs']} runs of {', '.join(result['runs_files'])} (mean |MFU error|, points):"]
    out += [f"  {line}" for line in preset_lines(p)]
    out += [f"  kept at the preset: {constant} ({why})" for constant, why in result["kept"].items()]
    out.append(f"In-sample MFU error: mean {ins['mean']:.2f}, max {ins['max']:.2f} points")
    if ins["fp8"]["runs"]:
        out.append(f"  of which FP8 runs: {ins['fp8']['runs']}, mean {ins['fp8']['mean']:.2f}, "
                   f"max {ins['fp8']['max']:.2f} points")
    out.append(f"Leave-one-source-out: mean {loso['mean']:.2f}, max {loso['max']:.2f} points over "
               f"{loso['runs']} held-out runs")
    for fold in loso["folds"]:
        fp = fold["parameters"]
        fitted_values = ", ".join(f"{k.removesuffix('_compute_efficiency')} {v:g}" for k, v in fp.items())
        out.append(f"  held out {fold['source']:<28} {fold['runs']:>2} runs: mean {fold['mean']:.2f}, "
                   f"max {fold['max']:.2f}  (fitted on the rest: {fitted_values})")
    worst = sorted(ins["errors"].items(), key=lambda kv: -abs(kv[1]))[:6]
    out.append("Worst runs in sample: " + ", ".join(f"{k} {v:+.2f}" for k, v in worst))
    out.append("Per source (step % / MFU points):")
    out.append(markdown_table(result))
    out.append("Paste into ndcp/specs/device.py (or run with --write):")
    out += [f"  {line}" for line in preset_lines(p)]
    return "\n".join(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", default=[str(p) for p in RUNS_FILES])
    parser.add_argument("--fp8-only", action="store_true",
                        help="fit the FP8 ceilings only; the 16-bit ones stay at the shipped constants")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--write", action="store_true", help="rewrite the fitted numbers in ndcp/specs/device.py")
    parser.add_argument("--doc", action="store_true", help="rewrite the per-source table in docs/calibration.md")
    args = parser.parse_args(argv)
    result = calibrate([Path(p) for p in args.runs], args.fp8_only)
    print(json.dumps(result, indent=2) if args.json else report(result))
    if args.write:
        write_presets(result["parameters"], constants=result["fitted_on"])
    if args.doc:
        write_doc(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
