"""Values as measured-run files write them: nulls in their spellings, numbers, MFU as a fraction or a percentage,
booleans, and the file's text (every read error the user's to fix)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..specs.fields import SpecError
from ..specs.files import RUNS_CAP, read_text as read_text_file
from ..specs.strategy_input import ON_WORDS


class SkipRun(Exception):
    """A measured run that ndcp cannot represent; the message is the reason shown to the user."""


def is_null(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip().lower() in ("", "null", "none", "unknown"))


def as_number(value: Any, field: str, example: str) -> float | None:
    """A measured figure (None when not published); a cell that is not a number is the row's error, naming the
    field: its unit is in the field's name (step_seconds, memory_gib), so "1.7s" or "50GiB" is refused, not guessed."""
    if is_null(value):
        return None
    try:
        number = float(str(value).strip())
    except ValueError:
        number = float("nan")
    if not math.isfinite(number):
        raise SpecError(f"{field}={value!r} is not valid; expected a number without a unit (the field's name says "
                        f"it), e.g. {example}")
    return number


def as_count(value: Any, field: str, example: str) -> int:
    """A whole number >= 1 (gpus, global_batch, seq_len); anything else is the row's error, naming the field."""
    text = str(value).strip()
    if not text.isdigit() or int(text) < 1:
        raise SpecError(f"{field}={value!r} is not valid; expected a whole number >= 1, e.g. {example}")
    return int(text)


def as_fraction(value: Any, field: str) -> float | None:
    """MFU as a fraction from "0.45", "45%" or 45 (a bare number above 1 is a percentage: MFU cannot exceed 1)."""
    if is_null(value):
        return None
    text = str(value).strip()
    try:
        number = float(text.removesuffix("%"))
    except ValueError:
        number = float("nan")  # refused below, with what is expected
    fraction = number / 100 if text.endswith("%") or number > 1 else number
    if not 0 < fraction <= 1:
        raise SpecError(f"{field}={value!r}: expected a fraction in (0, 1], e.g. 0.45, or a percentage, e.g. 45%")
    return fraction


def int_or(value: Any, default: int, label: str, notes: list[str]) -> int:
    if is_null(value):
        notes.append(f"{label} {default}")
        return default
    return int(value)


def as_bool(value: Any) -> bool | None:
    if is_null(value):
        return None
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ON_WORDS + ("y",)  # the words --strategy takes for on (sp=on)


def read_text(path: Path) -> str:
    """The file's text; missing, a directory, unreadable or not UTF-8: the user's to fix (exit 2)."""
    return read_text_file(path, str(path), "the measured runs", RUNS_CAP)


__all__ = ["SkipRun", "is_null", "as_number", "as_count", "as_fraction", "int_or", "as_bool", "read_text"]
