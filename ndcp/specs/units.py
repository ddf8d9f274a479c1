"""Byte units (binary and decimal), defined once for the specs, the reports and the command line."""
from __future__ import annotations

KIB, MIB, GIB, TIB = 2**10, 2**20, 2**30, 2**40
KB, MB, GB, TB = 10**3, 10**6, 10**9, 10**12

__all__ = ["KIB", "MIB", "GIB", "TIB", "KB", "MB", "GB", "TB"]
