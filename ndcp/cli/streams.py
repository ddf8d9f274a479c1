"""stdout while a command runs: a full device is a user error, and an encoding that lacks a character prints an
ASCII stand-in for it.

`ndcp ... > /dev/full` fails on the first write (or flush) with ENOSPC: that is one `ndcp: error: stdout: cannot
write: ...` line, exit 2, and what is left in the buffer is thrown away (stdout is pointed at /dev/null) so the
interpreter's own flush at exit fails no second time. Under PYTHONIOENCODING=ascii, LC_ALL=C (Python without its
UTF-8 mode) or a Latin-1 terminal, text the encoding cannot hold (the µ of "µs", ×, ≤, an arrow) is written with
ASCII stand-ins (u, x, <=, ->), and any other such character as `?`. A closed pipe stays BrokenPipeError (main:
exit 0; docs/files.md §4).
"""
from __future__ import annotations

import contextlib
import os
import sys
from typing import Iterator

from ..specs.fields import SpecError

# Characters the reports use, spelled in ASCII for an encoding without them.
ASCII_STAND_INS = {"µ": "u", "μ": "u", "×": "x", "≤": "<=", "≥": ">=", "≈": "~", "≡": "=", "±": "+/-", "→": "->",
                   "←": "<-", "—": "-", "–": "-", "−": "-", "…": "...", "·": ".", "‘": "'", "’": "'", "“": '"',
                   "”": '"', "²": "2", "³": "3", "∞": "inf", "Δ": "d", "§": "S", "✓": "v", "✗": "x", "•": "*",
                   # the memory bar's glyphs (report.terminal.GROUP_GLYPHS, FREE_GLYPH), one character each
                   "█": "#", "▓": "%", "▄": "=", "▚": "+", "▀": "*", "░": ".", "┃": "|"}
_TRANSLATION = str.maketrans(ASCII_STAND_INS)


class StdoutError(SpecError):
    """stdout cannot be written (a full device, an I/O error): the user's to fix, as an unwritable --json is."""


def encodable(text: str, encoding: str | None) -> str:
    """`text` with what `encoding` cannot hold replaced by its ASCII stand-in, else `?`."""
    encoding = encoding or "ascii"
    try:
        text.encode(encoding)
        return text
    except (UnicodeEncodeError, LookupError):
        pass
    spelled = text.translate(_TRANSLATION)
    try:
        return spelled.encode(encoding, errors="replace").decode(encoding)
    except LookupError:
        return spelled.encode("ascii", errors="replace").decode("ascii")


class _GuardedStdout:
    """A proxy of the real stdout: writes and flushes as above, everything else (isatty, encoding, buffer,
    fileno) the stream's own."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def __getattr__(self, name: str):
        return getattr(self._stream, name)

    def write(self, text: str) -> int:
        try:
            try:
                return self._stream.write(text)
            except UnicodeEncodeError:
                return self._stream.write(encodable(text, getattr(self._stream, "encoding", None)))
        except BrokenPipeError:
            raise
        except OSError as error:
            raise _failed(self._stream, error) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as error:
            raise _failed(self._stream, error) from None


def _failed(stream, error: OSError) -> StdoutError:
    """The one-line error for a failed write; stdout from now on goes to /dev/null (nothing fails again at exit)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
    return StdoutError(f"stdout: cannot write: {error.strerror or type(error).__name__}")


@contextlib.contextmanager
def guarded_stdout() -> Iterator[None]:
    """sys.stdout is the guarded proxy in the block, flushed at its end (an error there is a StdoutError too)."""
    stream = sys.stdout
    if stream is None or isinstance(stream, _GuardedStdout):
        yield
        return
    sys.stdout = _GuardedStdout(stream)
    try:
        yield
        sys.stdout.flush()
    finally:
        sys.stdout = stream


__all__ = ["guarded_stdout", "encodable", "StdoutError", "ASCII_STAND_INS"]
