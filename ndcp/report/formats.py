"""Numbers as the reports print them: bytes, counts, seconds, bandwidths and the nodes devices fill."""
from __future__ import annotations

from ..specs.units import GIB, KIB, MIB, TIB


def format_bytes(n: float | int | None, unit: str | None = None, digits: int = 2) -> str:
    """`n` bytes as e.g. "62.34 GiB"; `unit` fixes the unit (B, KiB, MiB, GiB, TiB), else the largest that is >= 1."""
    if n is None:
        return "-"
    units = (("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB), ("B", 1))
    if unit is None:
        unit, scale = next(((u, s) for u, s in units if abs(n) >= s), ("B", 1))
    else:
        scale = dict(units)[unit]
    if unit == "B":
        return f"{int(n)} B"
    return f"{n / scale:.{digits}f} {unit}"


def gib(n: float | int, digits: int = 2) -> str:
    """Bytes as a bare GiB number for table cells."""
    return f"{n / GIB:.{digits}f}"


def format_count(n: float | int) -> str:
    """A parameter count as e.g. "8.03B" or "125.8M"."""
    for suffix, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.{2 if scale >= 1e9 else 1}f}{suffix}"
    return str(int(n))


def format_seconds(s: float | None) -> str:
    if s is None:
        return "-"
    if s == 0:
        return "0 s"
    if abs(s) >= 1:
        return f"{s:.3f} s"
    if abs(s) >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} µs"


def format_rate(bytes_per_second: float) -> str:
    """Bandwidth as GB/s (decimal, as datasheets quote it)."""
    return f"{bytes_per_second / 1e9:g} GB/s"


def nodes_text(cluster) -> str:
    """The nodes the devices fill, said as they are: a count that is not a multiple of the node leaves the last node
    partial (placement fills nodes in rank order), which "2 nodes of 8" for 12 devices would hide."""
    per, count = cluster.device.devices_per_node, cluster.count
    if count < per:
        return f"1 node, {count} of its {per} devices"
    whole = f"{cluster.nodes} node{'s' if cluster.nodes != 1 else ''} of {per}"
    return whole if count % per == 0 else f"{whole}, the last with {count % per}"


__all__ = ["format_bytes", "gib", "format_count", "format_seconds", "format_rate", "nodes_text"]
