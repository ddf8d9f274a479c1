"""`ndcp calibrate`: fit a device's efficiency parameters to measured runs and write them as a device YAML file."""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from ..report.output import write_output
from ..specs.device_file import device_yaml, load_device
from ..specs.fields import SpecError
from ..validation.fittable import DEFAULT_PARAMETERS, FITTABLE
from .common import EXIT_OK, console, subparser
from .outputs import add_json_argument, emit_json, output_path

EXAMPLE = ("ndcp calibrate examples/published_runs.yaml --device h100 \\\n"
           "    --output my-h100.yaml\n"
           "ndcp estimate llama3-70b --device my-h100.yaml --gpus 512 \\\n"
           "    --global-batch 1024 --seq-len 8192 --strategy tp=8")


def register(subparsers) -> None:
    parser = subparser(
        subparsers, "calibrate", "fit a device's efficiencies to measured runs; write a device file",
        "Fit the efficiency parameters of --device to the runs of RUNS on that device (their `gpu` names it) by "
        "bounded least squares on the MFU errors `ndcp validate` reports, with a prior towards the device's own "
        "values (docs/calibration.md §8). Reports the fit, its leave-one-source-out (cross-validated) error, and "
        "writes the fitted device as a YAML file that --device accepts everywhere.",
        EXAMPLE)
    parser.add_argument("runs", metavar="RUNS.yaml|RUNS.csv", help="measured runs (the format `ndcp validate` reads)")
    parser.add_argument("--device", metavar="NAME|FILE", required=True,
                        help="the device to fit: a preset or a device YAML file (its values are the start and prior)")
    parser.add_argument("--output", metavar="PATH", type=output_path, required=True,
                        help="where to write the fitted device YAML")
    parser.add_argument("--name", help="the fitted device's name (default: the output file's stem)")
    parser.add_argument("--parameters", metavar="P,...", type=_parameters, default=DEFAULT_PARAMETERS,
                        help=f"the parameters to fit, from {', '.join(FITTABLE)} (default: "
                             f"{', '.join(DEFAULT_PARAMETERS)}; the two bandwidths are fitted as link efficiencies, "
                             "0.3-1.0 of the start device's)")
    add_json_argument(parser)
    parser.add_argument("--quiet", "-q", action="store_true", help="print only the one-line summary")
    parser.set_defaults(func=run)


def _parameters(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(n.strip().lower().replace("-", "_") for n in str(text).split(",") if n.strip()))
    wrong = [n for n in names if n not in FITTABLE]
    if not names or wrong:
        raise argparse.ArgumentTypeError(f"invalid parameters {text!r}: expected a comma-separated list of "
                                         f"{', '.join(FITTABLE)}")
    return names


def run(args: argparse.Namespace) -> int:
    start = load_device(args.device)
    runs = Path(args.runs).expanduser()
    if not runs.is_file():
        raise SpecError(f"{args.runs}: no such runs file" if not runs.exists() else f"{args.runs}: not a file")
    from ..validation.fit import calibrate_device  # numpy: imported only for this command

    result = calibrate_device(runs, start, args.parameters)
    name = args.name or Path(args.output).stem
    ins, cv = result["in_sample"], result["leave_one_source_out"]
    device = replace(result["device"], name=name,
                     source=f"ndcp calibrate: {start.name} fitted on {ins['runs']} runs of {runs.name} "
                            f"({', '.join(args.parameters)})")
    header = (f"fitted by `ndcp calibrate` from {start.name} on {ins['runs']} runs of {runs}: mean |MFU error| "
              f"{ins['mean']:.2f} points in sample, {cv['mean']:.2f} leave-one-source-out")
    write_output(device_yaml(device, header), args.output, "--output")
    doc = {"device": name, "parameters": result["parameters"],
           "fit": {"runs": ins["runs"], "mean_abs_mfu_points": ins["mean"], "max_abs_mfu_points": ins["max"],
                   "cross_validated_mean_abs_mfu_points": cv["mean"], "cross_validated_max_abs_mfu_points": cv["max"],
                   "start_mean_abs_mfu_points": result["start"]["mean"],
                   "folds": [{k: f[k] for k in ("source", "runs", "mean", "max", "parameters")} for f in cv["folds"]],
                   "errors": ins["errors"]}}
    if emit_json(args, doc):
        print(f"ndcp: wrote the device {name} to {args.output}", file=sys.stderr)
        return EXIT_OK
    summary = (f"{name}: fitted on {ins['runs']} runs, mean |MFU error| {ins['mean']:.2f} points in sample "
               f"({result['start']['mean']:.2f} with {start.name}'s values), {cv['mean']:.2f} cross-validated "
               f"(leave one source out); wrote {args.output}")
    if args.quiet:
        print(summary)
        return EXIT_OK
    out = console()
    out.print(f"Fitted {start.name}'s parameters on {ins['runs']} runs of {runs} (bounded least squares):")
    for key, value in result["parameters"].items():
        was = result["start"]["parameters"][key]
        out.print(f"  {key:<28} {_value(key, was):>12} -> {_value(key, value)}")
    out.print(f"In sample: mean |MFU error| {ins['mean']:.2f}, max {ins['max']:.2f} points "
              f"(with {start.name}'s values: mean {result['start']['mean']:.2f})")
    out.print(f"Leave one source out: mean {cv['mean']:.2f}, max {cv['max']:.2f} points over {cv['runs']} runs")
    for fold in cv["folds"]:
        out.print(f"  held out {fold['source']:<16} {fold['runs']:>2} runs: mean {fold['mean']:.2f}, "
                  f"max {fold['max']:.2f}")
    out.print(summary)
    return EXIT_OK


def _value(name: str, value: float) -> str:
    return f"{value / 1e9:g} GB/s" if name.endswith("bandwidth") else f"{value:.4f}"


__all__ = ["register", "run", "EXAMPLE"]
