"""The one writer behind every output option (--json, --csv, --emit-file, --plot): a file, or stdout for `-`.

A path that cannot be written is the user's to fix: a SpecError naming the option, the path and why.
"""
from __future__ import annotations

import sys
from pathlib import Path

from ..specs.fields import SpecError

STDOUT = "-"


def write_output(content: str | bytes, path: str | Path, option: str) -> None:
    """Write `content` to `path` (text as UTF-8, unchanged newlines), or to stdout when `path` is "-"."""
    if str(path) == STDOUT:
        if isinstance(content, bytes):
            sys.stdout.buffer.write(content)
        else:
            sys.stdout.write(content)
        sys.stdout.flush()
        return
    try:
        target = Path(path).expanduser()
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            with open(target, "w", encoding="utf-8", newline="") as stream:
                stream.write(content)
    except (OSError, ValueError) as error:  # ValueError: a path with an embedded NUL
        why = getattr(error, "strerror", None) or type(error).__name__
        raise SpecError(f"{option} {path}: cannot write: {why}") from None


__all__ = ["write_output", "STDOUT"]
