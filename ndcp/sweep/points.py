"""The points of a sweep: the lists `ndcp sweep` takes (devices, GPU counts, global batches, sequence lengths) and
their product, in a fixed order (device, then GPUs, then batch, then length), so every run lists them alike."""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from ..specs.fields import SpecError
from ..specs.units import parse_count, parse_length

MAX_POINTS = 10_000  # a sweep is a table a person reads; more is a typo (e.g. 1..1000000)


@dataclass(frozen=True)
class SweepPoint:
    """One cluster and batch shape of a sweep: a device (preset name or device file), a GPU count, a global batch
    in sequences and a sequence length in tokens."""

    device: str
    gpus: int
    global_batch: int
    seq_len: int

    def key(self) -> tuple:
        return (self.device, self.gpus, self.global_batch, self.seq_len)


def _items(option: str, text: str, example: str) -> list[str]:
    items = [item.strip() for item in str(text).split(",")]
    if not text or any(not item for item in items):
        raise SpecError(f"{option}={text!r} is not valid; expected a comma-separated list, e.g. {example}")
    return items


def _unique(values: list) -> list:
    return list(dict.fromkeys(values))


def parse_devices(text: str) -> list[str]:
    """`--device h100,b200,my-h100.yaml`: preset names or device files, each once, in the given order."""
    return _unique(_items("--device", text, "h100,b200,my-h100.yaml"))


def parse_gpus(text: str) -> list[int]:
    """`--gpus 256,512,1024` or `--gpus 256..2048` (START..END: START, then doubling while at most END)."""
    if ".." in str(text):
        start_text, _, end_text = str(text).partition("..")
        start, end = _gpu_count(start_text), _gpu_count(end_text)
        if start > end:
            raise SpecError(f"--gpus={text!r} is not valid; expected START..END with START <= END, e.g. 256..2048")
        return [start << i for i in range((end // start).bit_length())]
    return _unique([_gpu_count(item) for item in _items("--gpus", text, "256,512,1024 or 256..1024")])


def _gpu_count(text: str) -> int:
    return _count("--gpus", text, "GPU counts", "256,512,1024 or 256..1024")


def _count(option: str, text: str, what: str, example: str) -> int:
    """parse_count, its error naming the option and this option's own example."""
    try:
        return parse_count(text)
    except SpecError:
        raise SpecError(f"{option}={text.strip()!r} is not valid; expected {what} of at least 1, e.g. {example}"
                        ) from None


def parse_counts(option: str, text: str) -> list[int]:
    """`--global-batch 512,1024` (sequences; decimal suffixes: 2k = 2,000)."""
    return _unique([_count(option, item, "counts", "512,1024 or 2k") for item in _items(option, text, "512,1024")])


def parse_lengths(option: str, text: str) -> list[int]:
    """`--seq-len 4096,8k` (tokens; binary suffixes: 8k = 8,192)."""
    try:
        return _unique([parse_length(item) for item in _items(option, text, "4096,8k")])
    except SpecError as error:
        raise SpecError(f"{option}: {error}") from None


def sweep_points(devices: list[str], gpus: list[int], batches: list[int], lengths: list[int]) -> list[SweepPoint]:
    """Every combination, device-major."""
    count = len(devices) * len(gpus) * len(batches) * len(lengths)
    if count > MAX_POINTS:
        raise SpecError(f"the sweep has {count:,} points; at most {MAX_POINTS:,} are allowed (shorten the lists)")
    return [SweepPoint(*combination) for combination in itertools.product(devices, gpus, batches, lengths)]


__all__ = ["SweepPoint", "parse_devices", "parse_gpus", "parse_counts", "parse_lengths", "sweep_points", "MAX_POINTS"]
