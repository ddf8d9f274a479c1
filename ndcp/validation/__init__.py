"""Compare ndcp's estimates with measured training runs (`ndcp validate`): runs.py reads the runs, compare.py
estimates and compares them, statistics.py measures the agreement. The names below load on first use (PEP 562):
statistics and the fit import numpy, which the command line does not need to start."""
from __future__ import annotations

import importlib

_HOMES = {"validate_file": "compare", "ValidationResult": "compare", "RunComparison": "compare",
          "SkippedRun": "compare", "NARAYANAN_BASIS": "compare", "MODEL_BASIS": "compare", "GPU_PRESETS": "runs",
          "SkipRun": "runs", "ValidationSummary": "statistics", "pearson": "statistics", "spearman": "statistics",
          "ranks": "statistics", "top_k_agreement": "statistics", "summarise": "statistics", "TOP_K": "statistics"}


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)


__all__ = list(_HOMES)
