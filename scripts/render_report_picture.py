#!/usr/bin/env python3
"""Render the README's picture of a search report: a real `ndcp search` run (the README's quick-start question),
its report recorded by rich and exported as SVG (rich's Console.export_svg, as save_svg writes it), so the picture is what the command prints.

Rerun it after a change to the report or to the answer:
    python scripts/render_report_picture.py [--output docs/search-report.svg] [--width 100]
The report's solve time is the run's own, so the picture changes a little on every run.
"""
from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

from rich.console import Console

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from ndcp.api import plan_search, run_search  # noqa: E402
from ndcp.cli import build_parser  # noqa: E402
from ndcp.report.output import write_output  # noqa: E402
from ndcp.report.search import render_search  # noqa: E402

# The README's quick start (without --emit, whose file is not part of the report), top 3 to keep the picture short.
COMMAND = "search llama3-70b --device h100 --gpus 512 --global-batch 1024 --seq-len 8192 --top 3"
OUTPUT = ROOT / "docs" / "search-report.svg"


def record(command: str, width: int) -> Console:
    """The report of `ndcp COMMAND`, recorded on a console of `width` columns."""
    values = build_parser().parse_args(command.split())
    planned = plan_search(values)
    result = run_search(planned, values)
    console = Console(record=True, width=width, force_terminal=True, color_system="truecolor", file=io.StringIO())
    render_search(console, planned.model, planned.cluster, planned.run, planned.space, result,
                  planned.trainer)
    return console


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--output", type=Path, default=OUTPUT, help="the SVG file (default docs/search-report.svg)")
    cli.add_argument("--width", type=int, default=100, help="terminal columns (default 100)")
    args = cli.parse_args(argv)
    svg = record(COMMAND, args.width).export_svg(title=f"ndcp {COMMAND}")  # rich's save_svg, written whole
    write_output(svg, args.output, "--output")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
