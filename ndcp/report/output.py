"""The one writer behind every output option (--json, --csv, --emit-file, --plot, --output): a file, or stdout for `-`.

A file is written whole or not at all: the content goes to a temporary file in the target's directory, is flushed
to the disk (fsync) and renamed over the target (os.replace, atomic on POSIX file systems), so a full disk or a
Ctrl-C leaves the old file as it was. Inside `all_or_nothing()` (the command line runs every command in one) the
renames wait until the block ends without an exception: a command's several outputs appear together, after its
result is final, or none of them does. A target that exists and is not a regular file (/dev/null, /dev/full, a FIFO,
/dev/stdout) is written in place: there is nothing to rename over.

A path that cannot be written is the user's to fix: a SpecError naming the option, the path and why.
"""
from __future__ import annotations

import contextlib
import os
import re
import stat
import sys
import tempfile
from contextvars import ContextVar
from pathlib import Path
from typing import Iterator, NamedTuple

from ..specs.fields import SpecError

STDOUT = "-"


class _Staged(NamedTuple):
    """A written temporary file waiting to be renamed over its target."""
    temporary: str
    target: Path
    option: str


_BATCH: ContextVar[list[_Staged] | None] = ContextVar("ndcp_output_batch", default=None)


def write_output(content: str | bytes, path: str | Path, option: str) -> None:
    """Write `content` to `path` (text as UTF-8, unchanged newlines), or to stdout when `path` is "-"."""
    data = content if isinstance(content, bytes) else content.encode("utf-8")
    if str(path) == STDOUT:
        _write_stdout(content)
        return
    try:
        target = Path(os.path.realpath(Path(path).expanduser()))  # a symbolic link: its file is replaced
        status = _status(target)
        if status is not None and not stat.S_ISREG(status.st_mode):
            if stat.S_ISDIR(status.st_mode):
                raise IsADirectoryError(21, "Is a directory")
            _write_in_place(data, target)
            return
        staged = _Staged(_write_temporary(data, target, status), target, option)
    except (OSError, ValueError) as error:  # ValueError: a path with an embedded NUL
        raise _cannot_write(option, path, error) from None
    batch = _BATCH.get()
    if batch is None:
        _rename([staged])
    else:
        batch.append(staged)


@contextlib.contextmanager
def all_or_nothing() -> Iterator[None]:
    """Outputs written in the block are renamed over their targets when it ends without an exception; otherwise
    their temporary files are removed and the targets keep what they held."""
    batch: list[_Staged] = []
    token = _BATCH.set(batch)
    try:
        yield
    except BaseException:
        _discard(batch)
        raise
    finally:
        _BATCH.reset(token)
    _rename(batch)


def _write_stdout(content: str | bytes) -> None:
    try:
        if isinstance(content, bytes):
            sys.stdout.buffer.write(content)
        else:
            sys.stdout.write(content)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as error:
        raise _cannot_write("stdout", "", error) from None


def _status(target: Path) -> os.stat_result | None:
    try:
        return os.stat(target)
    except FileNotFoundError:
        return None


def _write_in_place(data: bytes, target: Path) -> None:
    with open(target, "wb") as stream:
        stream.write(data)


def _write_temporary(data: bytes, target: Path, status: os.stat_result | None) -> str:
    """`data` in a new file next to `target` (flushed to the disk), with the target's permissions, or the ones a new
    file gets under the umask; returns its path."""
    descriptor, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".ndcp-tmp", dir=target.parent)
    try:
        with os.fdopen(descriptor, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, stat.S_IMODE(status.st_mode) if status is not None else 0o666 & ~_umask())
    except BaseException:
        _remove(temporary)
        raise
    return temporary


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _rename(batch: list[_Staged]) -> None:
    for done, staged in enumerate(batch):
        try:
            os.replace(staged.temporary, staged.target)
        except OSError as error:
            _discard(batch[done:])
            raise _cannot_write(staged.option, staged.target, error) from None


def _discard(batch: list[_Staged]) -> None:
    for staged in batch:
        _remove(staged.temporary)


def _remove(temporary: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(temporary)


def _cannot_write(option: str, path, error: BaseException) -> SpecError:
    why = getattr(error, "strerror", None) or type(error).__name__
    return SpecError(f"{option} {path}: cannot write: {why}" if path != "" else f"{option}: cannot write: {why}")


# -- untrusted text --------------------------------------------------------------------------------------------
# Control characters (C0 but tab and newline, DEL, C1) and the bidirectional overrides: a name read from a file
# (a device, a model, a run id) holding them could move the cursor, recolour or rewrite the terminal.
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """`text` with its control characters written as escapes (ESC as \\x1b), for a terminal or a log."""
    return _UNPRINTABLE.sub(lambda match: match.group().encode("unicode_escape").decode("ascii"), text)


__all__ = ["write_output", "all_or_nothing", "printable", "STDOUT"]
