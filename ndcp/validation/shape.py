"""The shape of a published-runs YAML (docs/calibration.md), checked before any row is read: a `runs:` list of
mappings whose sections are mappings, and a `hardware:` list of mappings. A file of another shape is one user error
naming the place (`runs[0].model: expected a mapping, got int 5`), never an AttributeError in the reader."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..specs.fields import SpecError, show

# The sections of a run entry that are mappings of fields (runs.py reads them with .get).
RUN_SECTIONS = ("model", "cluster", "training", "strategy", "outcome", "source", "memory_observation")


def check_runs_document(data: Any, path: Path) -> None:
    """Raise a SpecError unless `data` is a runs document of the shape above (null sections are allowed)."""
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
        raise SpecError(f"{path}: expected a mapping with a `runs:` list")
    for i, entry in enumerate(data["runs"]):
        _require_mapping(entry, f"{path}: runs[{i}]", "a mapping of run fields")
        for section in RUN_SECTIONS:
            if entry.get(section) is not None:
                _require_mapping(entry[section], f"{path}: runs[{i}].{section}", f"a mapping of {section} fields")
    hardware = data.get("hardware")
    if hardware is None:
        return
    if not isinstance(hardware, list):
        raise SpecError(f"{path}: hardware: expected a list of hardware mappings, got {_kind(hardware)}")
    for i, entry in enumerate(hardware):
        _require_mapping(entry, f"{path}: hardware[{i}]", "a mapping with id and peak_tflops")
        if entry.get("peak_tflops") is not None:
            _require_mapping(entry["peak_tflops"], f"{path}: hardware[{i}].peak_tflops", "a mapping of peak figures")


def _require_mapping(value: Any, where: str, expected: str) -> None:
    if not isinstance(value, dict):
        raise SpecError(f"{where}: expected {expected}, got {_kind(value)}")


def _kind(value: Any) -> str:
    return "null" if value is None else f"{type(value).__name__} {show(value)}"


__all__ = ["check_runs_document", "RUN_SECTIONS"]
