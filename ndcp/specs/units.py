"""Units (bytes, binary and decimal; token counts and lengths with suffixes) and name lookup, defined once for the
specs, the reports and the command line."""
from __future__ import annotations

import difflib
import math
import re
from typing import Mapping, TypeVar

from .fields import SpecError

KIB, MIB, GIB, TIB = 2**10, 2**20, 2**30, 2**40
KB, MB, GB, TB = 10**3, 10**6, 10**9, 10**12

_NUMBER_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-zA-Z]?)\s*$")
# Sequence lengths are powers of two in practice: 8k = 8,192, 128k = 131,072, 1M = 1,048,576.
_LENGTH_SUFFIXES = {"": 1, "k": 2**10, "m": 2**20}
# Token counts are decimal, as papers write them: 15T = 15 x 10^12.
_COUNT_SUFFIXES = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}


def _with_suffix(text: str, suffixes: dict[str, int], what: str, example: str) -> int:
    match = _NUMBER_RE.match(str(text))
    suffix = match.group(2).lower() if match else ""
    if not match or suffix not in suffixes:
        raise SpecError(f"invalid {what} {text!r}: expected e.g. {example}")
    value = float(match.group(1)) * suffixes[suffix]  # inf past float's range: refused below, as too large
    if not 1 <= value <= 2**62 or value != int(value):
        raise SpecError(f"invalid {what} {text!r}: expected a whole number from 1 to 2^62, e.g. {example}")
    return int(value)


def parse_length(text: str) -> int:
    """Tokens of a sequence from "4096", "8k" (8,192), "128k" or "1M" (1,048,576): binary suffixes."""
    return _with_suffix(text, _LENGTH_SUFFIXES, "length", "4096, 8k, 128k or 1M")


def parse_count(text: str) -> int:
    """A count from "1000000", "15T" (15 x 10^12), "1.5B" or "300M": decimal suffixes."""
    return _with_suffix(text, _COUNT_SUFFIXES, "count", "1000000, 300M, 1.5B or 15T")


# Sizes: decimal (GB = 10^9) and binary (GiB = 2^30) units; a lone letter (g, m, ...) is binary, as GNU tools read it.
_SIZE_UNITS = {"b": 1, "bytes": 1, "kb": KB, "mb": MB, "gb": GB, "tb": TB,
               "kib": KIB, "mib": MIB, "gib": GIB, "tib": TIB, "k": KIB, "m": MIB, "g": GIB, "t": TIB}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:e([+-]?[0-9]+))?\s*([a-zA-Z]*)\s*$")
# "70B" is how model sizes are written (70 billion parameters): a byte count under 1 MiB with the unit B is refused as
# that slip, not read as a size no device, reserve or host has. `bytes` spelled out always means bytes.
_SMALLEST_BYTE_COUNT = MIB
_SIZE_FORMS = "70GiB, 75GB, 80000MiB or 85899345920B"


def parse_size(text: str) -> int:
    """Bytes from "70GiB", "75GB", "80000MiB", "1.5TiB", "85899345920B" or "1024bytes" (decimal and binary units).
    Refused: a bare number (`70` meant as GiB would be 70 bytes) and B on a count under 1 MiB (`70B` meant as 70 GB:
    B is bytes, not billions)."""
    match = _SIZE_RE.match(str(text))
    unit = match.group(3).lower() if match else ""
    number = str(text).strip()
    if match and not unit:
        raise SpecError(_bare_number(text, number))
    if not match or unit not in _SIZE_UNITS:
        raise SpecError(f"invalid size {text!r}: expected e.g. {_SIZE_FORMS}")
    _refuse_bits(text, match.group(3), number)
    try:  # a huge exponent (1e400GB) overflows the float: too large, not a crash
        value = float(match.group(1)) * (10.0 ** int(match.group(2)) if match.group(2) else 1) * _SIZE_UNITS[unit]
    except (OverflowError, ValueError):
        value = math.inf
    if not value <= 1 << 60:
        raise SpecError(f"invalid size {text!r}: too large")
    if unit == "b" and 0 < value < _SMALLEST_BYTE_COUNT:
        count = number[:-1].strip()
        raise SpecError(f"invalid size {text!r}: {number} reads as {count} bytes; did you mean {count}GB or "
                        f"{count}GiB? ({count}bytes if bytes are meant)")
    return int(round(value))


def _bare_number(text: str, number: str) -> str:
    """Why a bare number is refused, with the units to add: a count of at least 1 GiB (42949672960, as a Python caller
    passes memory_cap in bytes) is offered as the bytes it would be, not as 42949672960GiB."""
    value = float(number)
    if value >= GIB:
        return (f"invalid size {text!r}: a size needs a unit: {number}bytes if bytes are meant ({value / GIB:,.2f} "
                f"GiB), else e.g. 70GiB (binary) or 75GB (decimal)")
    return (f"invalid size {text!r}: a size needs a unit, e.g. {number}GiB (binary) or {number}GB (decimal); "
            f"{number}bytes for bytes")


def _refuse_bits(text: str, written: str, number: str) -> None:
    """A capital prefix with a lower-case b (70Gb, 800Mb) is how bits are written (network rates): refused, not
    read as bytes; units in one case (70gb, 70GB) are bytes."""
    if len(written) > 1 and written.endswith("b") and not written.islower():
        count = number[: -len(written)].strip()
        decimal = written[0].upper() + "B"
        raise SpecError(f"invalid size {text!r}: {written} reads as bits; sizes are bytes: {count}{decimal} "
                        f"(decimal) or {count}{written[0].upper()}iB (binary)")


T = TypeVar("T")


def lookup(name: str, table: Mapping[str, T], what: str) -> T:
    """`table[name]`, case-insensitive (table keys are lower case); SpecError with a did-you-mean otherwise."""
    key = str(name).strip().lower()
    if key in table:
        return table[key]
    close = difflib.get_close_matches(key, list(table), n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise SpecError(f"{what}={name!r} is not known{hint}; valid: {', '.join(table)}")


__all__ = ["KIB", "MIB", "GIB", "TIB", "KB", "MB", "GB", "TB", "parse_length", "parse_count", "parse_size",
           "lookup"]
