"""Compare ndcp's estimates with measured training runs (`ndcp validate`): runs.py reads the runs, compare.py
estimates and compares them, statistics.py measures the agreement."""
from .compare import MODEL_BASIS, NARAYANAN_BASIS, RunComparison, SkippedRun, ValidationResult, validate_file
from .runs import GPU_PRESETS, SkipRun
from .statistics import TOP_K, ValidationSummary, pearson, ranks, spearman, summarise, top_k_agreement

__all__ = ["validate_file", "ValidationResult", "RunComparison", "SkippedRun", "ValidationSummary", "pearson",
           "spearman", "ranks", "top_k_agreement", "GPU_PRESETS", "SkipRun", "summarise", "TOP_K", "NARAYANAN_BASIS",
           "MODEL_BASIS"]
