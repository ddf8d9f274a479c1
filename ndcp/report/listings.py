"""`ndcp models` and `ndcp devices`: the library's models and the device presets as tables with their sources."""
from __future__ import annotations

from typing import Sequence

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..specs.device import DeviceSpec
from ..specs.model import ModelSpec
from ..specs.units import GIB

MODEL_TITLE = "Library models (parameters in billions; heads = attention/KV)"
MODEL_COLUMNS = (("name", "left"), ("params", "right"), ("active", "right"), ("layers", "right"),
                 ("hidden", "right"), ("heads", "right"), ("experts", "left"))
DEVICE_TITLE = ("Device presets (mem GiB; dense TFLOP/s BF16/FP8/FP4; HBM TB/s; GB/s per device, one way: up inside "
                "a scale-up domain, out across; devices per node/domain; cal: efficiency calibrated on measured runs)")
DEVICE_COLUMNS = (("name", "left"), ("mem", "right"), ("TFLOP/s", "right"), ("HBM", "right"), ("up", "right"),
                  ("out", "right"), ("node/dom", "right"), ("cal", "left"))


def _billions(n: int) -> str:
    return f"{n / 1e9:.2f}" if n >= 1e8 else f"{n / 1e9:.4f}"


def model_row(m: ModelSpec) -> tuple[str, ...]:
    experts = "-"
    if m.moe:
        experts = f"{m.moe.experts} top-{m.moe.top_k}"
        experts += f" +{m.moe.shared_experts} shared" if m.moe.shared_experts else ""
    return (m.name, _billions(m.parameters), _billions(m.active_parameters), str(m.layers), str(m.hidden),
            f"{m.heads}/{m.num_kv_heads}", experts)


def device_row(d: DeviceSpec) -> tuple[str, ...]:
    peaks = "/".join(f"{p / 1e12:.0f}" if p else "-" for p in (d.peak_flops, d.fp8_peak_flops, d.fp4_peak_flops))
    return (d.name, f"{d.memory_bytes / GIB:.0f}", peaks, f"{d.hbm_bandwidth / 1e12:g}",
            f"{d.intra_node_bandwidth / 1e9:g}", f"{d.inter_node_bandwidth / 1e9:g}",
            f"{d.devices_per_node}/{d.domain_size}", "yes" if d.calibrated else "no")


def print_models(console: Console, models: Sequence[ModelSpec]) -> None:
    print_listing(console, MODEL_TITLE, MODEL_COLUMNS, [model_row(m) for m in models], [m.source for m in models])


def print_devices(console: Console, devices: Sequence[DeviceSpec]) -> None:
    print_listing(console, DEVICE_TITLE, DEVICE_COLUMNS, [device_row(d) for d in devices],
                  [d.source for d in devices])


def print_listing(console: Console, title: str, columns, rows, sources) -> None:
    """A table with a `source` column when the console is wide enough, else the sources as lines below it."""

    def table(with_source: bool) -> Table:
        t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
        for name, justify in columns:
            t.add_column(name, justify=justify, no_wrap=name != "experts")
        if with_source:
            t.add_column("source", overflow="fold", ratio=1)
        for row, source in zip(rows, sources):
            t.add_row(*row, *((source,) if with_source else ()))
        return t

    plain = table(False)
    if console.width - console.measure(plain).maximum >= 40:
        console.print(table(True))
        return
    console.print(plain)
    for row, source in zip(rows, sources):
        console.print(Text.assemble((f"{row[0]}: ", "bold"), source or "-"))


__all__ = ["print_models", "print_devices", "print_listing", "model_row", "device_row"]
