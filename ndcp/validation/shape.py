"""The shape of a measured-runs file, checked before any row is read. A published-runs YAML (docs/calibration.md):
a `runs:` list of mappings whose sections are mappings, and a `hardware:` list of mappings; a CSV: what the csv module
reads. A file of another shape is one user error naming the place (`runs[0].model: expected a mapping of model
fields, got int 5`), never an AttributeError in the reader."""
from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from ..specs.fields import SpecError, show

# The sections of a run entry that are mappings of fields (runs.py reads them with .get); `model` may also name a
# library model or a model file (validation/run_model.py: `model: NAME|PATH`).
RUN_SECTIONS = ("model", "cluster", "training", "strategy", "outcome", "source", "memory_observation")
NAMED_SECTIONS = ("model",)


def check_runs_document(data: Any, path: Path) -> None:
    """Raise a SpecError unless `data` is a runs document of the shape above (null sections are allowed)."""
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
        raise SpecError(f"{path}: expected a mapping with a `runs:` list")
    for i, entry in enumerate(data["runs"]):
        _require_mapping(entry, f"{path}: runs[{i}]", "a mapping of run fields")
        for section in RUN_SECTIONS:
            if entry.get(section) is not None and not (section in NAMED_SECTIONS and isinstance(entry[section], str)):
                _require_mapping(entry[section], f"{path}: runs[{i}].{section}", f"a mapping of {section} fields"
                                 + (" or a library model's name" if section in NAMED_SECTIONS else ""))
    hardware = data.get("hardware")
    if hardware is None:
        return
    if not isinstance(hardware, list):
        raise SpecError(f"{path}: hardware: expected a list of hardware mappings, got {_kind(hardware)}")
    for i, entry in enumerate(hardware):
        _require_mapping(entry, f"{path}: hardware[{i}]", "a mapping with id and peak_tflops")
        if entry.get("peak_tflops") is not None:
            _require_mapping(entry["peak_tflops"], f"{path}: hardware[{i}].peak_tflops", "a mapping of peak figures")


def csv_records(text: str, path: Path) -> tuple[tuple[str, ...], list[dict]]:
    """(the header, a mapping per row) of a runs CSV; what the csv module cannot read (a field over its 128 KiB
    limit, a NUL byte) is a SpecError."""
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        return tuple(reader.fieldnames or ()), list(reader)
    except csv.Error as error:
        raise SpecError(f"{path}: not a readable CSV at line {reader.line_num}: {error}") from None


def _require_mapping(value: Any, where: str, expected: str) -> None:
    if not isinstance(value, dict):
        raise SpecError(f"{where}: expected {expected}, got {_kind(value)}")


def _kind(value: Any) -> str:
    return "null" if value is None else f"{type(value).__name__} {show(value)}"


__all__ = ["check_runs_document", "csv_records", "RUN_SECTIONS"]
