#!/usr/bin/env python3
"""Regenerate ndcp/estimate/evidence_table.json: every measured run's features and leave-one-source-out residuals.

Runs: every run of examples/published_runs.yaml, examples/measured_runs_2.yaml and examples/measured_runs_nvl72.yaml
that `ndcp validate` compares on step time or on peak memory. Residuals (docs/evidence.md §1), both measured /
estimated:
- step time: the run estimated with the GEMM ceilings fitted without its source, exactly as scripts/calibrate.py
  fits them (its `fit`: one ceiling per GPU generation on the other sources' 16-bit MFU runs of its files, the
  first two; the third file's rows are never fitted on, as in scripts/calibrate.py); a run of a generation that is
  not fitted keeps its preset;
- peak memory: the measured peak over the estimate on the row's allocator basis (reserved or allocated:
  ndcp.validation.compare; nothing of memory is fitted, so the shipped estimate is already out of sample).
Features: ndcp.estimate.evidence.plan_features of the run's model, strategy, run settings and device. The table
records the sha256 of both runs files (tests/estimate/test_evidence.py fails when they change and the table was
not regenerated) and the held-out coverage of the bands at the default confidence, which the script prints.

Usage: python scripts/build_evidence.py [--check]
  --check  regenerate in memory and exit 1 if it differs from the shipped table (nothing written)
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import calibrate  # noqa: E402  (scripts/calibrate.py: the GEMM-ceiling fit the step residuals are held out of)
from ndcp.estimate.evidence import (DEFAULT_CONFIDENCE, TABLE_PATH, EvidenceTable, Residual,  # noqa: E402
                                    plan_features)
from ndcp.report.output import write_output  # noqa: E402
from ndcp.specs.fields import SpecError  # noqa: E402
from ndcp.validation.fit import Errors, fitted, source  # noqa: E402
from ndcp.validation.runs import MeasuredRun, SkipRun, read_rows  # noqa: E402

FIT_FILES = calibrate.RUNS_FILES  # the runs the GEMM ceilings are fitted on (held out by source)
CHECK_FILES = (ROOT / "examples" / "measured_runs_nvl72.yaml",)  # residuals only, never fitted on
RUNS_FILES = FIT_FILES + CHECK_FILES


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def measured_rows(paths: tuple[Path, ...], wanted: Callable[[str], bool] = lambda run_id: True
                  ) -> list[MeasuredRun]:
    """The runs of `paths` whose id is `wanted` and that build (the rest `ndcp validate` skips too), in file order."""
    rows = []
    for path in paths:
        for run_id, build in read_rows(path):
            if not wanted(run_id):
                continue
            try:
                rows.append(build())
            except (SkipRun, SpecError, ValueError, TypeError, KeyError):
                continue
    return rows


def residuals(rows: list[MeasuredRun], checked: list[MeasuredRun] = ()) -> EvidenceTable:
    """Step and peak residual rows of `rows` and `checked`, each source's step times estimated with the ceilings
    fitted without it, on `rows` only."""
    fitting = [i for i, row in enumerate(rows) if calibrate.generation(row) is not None and fitted(row)]
    rows = rows + list(checked)  # the fitting indices stay those of the first part
    errors = Errors(rows)
    steps, peaks = [], []
    for name in sorted({source(row) for row in rows}):
        params = calibrate.fit(errors, [i for i in fitting if source(rows[i]) != name])
        for i in (i for i, row in enumerate(rows) if source(row) == name):
            row = rows[i]
            compared = errors.comparison(i, calibrate._ceilings(errors, params, i))
            features = plan_features(row.model, row.strategy, row.run, row.cluster.device.name)
            if compared.measured_step:
                steps.append(Residual(row.id, name, features, compared.measured_step / compared.estimated_step))
            if compared.memory_relative_error is not None:
                peaks.append(Residual(row.id, name, features,
                                      compared.measured_memory_gib / compared.estimated_memory_gib))
    return EvidenceTable(tuple(steps), tuple(peaks))


def _entries(rows: tuple[Residual, ...]) -> list[dict]:
    return [{"id": r.id, "source": r.source, "features": sorted(r.features), "ratio": round(r.ratio, 6)}
            for r in rows]


def table_document(fit_paths: tuple[Path, ...] = FIT_FILES, check_paths: tuple[Path, ...] = CHECK_FILES) -> dict:
    table = residuals(measured_rows(fit_paths), measured_rows(check_paths))
    paths = fit_paths + check_paths
    coverage = table.held_out_coverage(DEFAULT_CONFIDENCE)
    return {"schema_version": 1, "generated_by": "scripts/build_evidence.py",
            "inputs": [{"path": str(p.relative_to(ROOT)), "sha256": digest(p)} for p in paths],
            "held_out_coverage": coverage._asdict(), "steps": _entries(table.steps), "peaks": _entries(table.peaks)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the shipped table is stale")
    args = parser.parse_args(argv)
    document = table_document()
    text = json.dumps(document, indent=1) + "\n"
    c = document["held_out_coverage"]
    print(f"{len(document['steps'])} step rows, {len(document['peaks'])} peak rows; held out at "
          f"{c['confidence']:.0%}: step times {c['step_covered']}/{c['step_rows']} inside their bands, "
          f"peaks {c['peak_covered']}/{c['peak_rows']} under their upper edges")
    if args.check:
        return 0 if TABLE_PATH.read_text(encoding="utf-8") == text else 1
    write_output(text, TABLE_PATH, "evidence table")
    return 0


if __name__ == "__main__":
    sys.exit(main())
