"""ndcp: the provably best N-dimensional parallel training strategy that fits in memory (CP-SAT)."""
__version__ = "0.1.0"
