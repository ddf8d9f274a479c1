"""The one writer behind every output option (--json, --csv, --emit-file, --plot, --output): a file, or stdout for `-`.

A file is written whole or not at all: the content goes to a temporary file in the target's directory, is flushed
to the disk (fsync) and renamed over the target (os.replace, atomic on POSIX file systems), so a full disk or a
Ctrl-C leaves the old file as it was. Inside `all_or_nothing()` (the command line runs every command in one) the
renames wait until the block ends without an exception: a command's several outputs appear together, after its
result is final, or none of them does. A target that exists and is not a regular file (/dev/null, /dev/full, a FIFO)
or names a descriptor (/dev/stdout) is written in place: there is nothing to rename over; a FIFO no one reads is
refused, not waited on.

A path that cannot be written is the user's to fix: a SpecError naming the option, the path and why (docs/files.md §3).
"""
from __future__ import annotations

import contextlib
import errno
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
        given = Path(path).expanduser()
        status = _status(given)
        if status is not None and _in_place(given, status):
            _write_in_place(data, given, status)
            return
        target = Path(os.path.realpath(given))  # a symbolic link: its file is replaced, the link kept
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


def check_writable(path: str | Path, option: str) -> None:
    """Raise the SpecError write_output would for a target that is not a regular file and cannot be opened now
    (a directory; a FIFO no one reads, which would block the writer)."""
    try:
        given = Path(path).expanduser()
        status = _status(given)
        if status is not None and _in_place(given, status):
            os.close(_open_in_place(given, status))
    except (OSError, ValueError) as error:
        raise _cannot_write(option, path, error) from None


def _in_place(given: Path, status: os.stat_result) -> bool:
    """Whether `given` is written in place: not a regular file, or a name for a descriptor (/dev/stdout, /dev/fd/3,
    /proc/self/fd/1: the file behind it is the shell's, its name no place to rename to)."""
    return not stat.S_ISREG(status.st_mode) or given.absolute().parts[1:2] in (("dev",), ("proc",))


def _open_in_place(target: Path, status: os.stat_result) -> int:
    """A descriptor writing to the device, FIFO or pipe `target`; opened non-blocking, so a FIFO without a reader
    fails (ENXIO) instead of waiting for one, then blocking for the writes."""
    if stat.S_ISDIR(status.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
    try:
        descriptor = os.open(target, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as error:
        if error.errno == errno.ENXIO and stat.S_ISFIFO(status.st_mode):
            raise OSError(errno.ENXIO, "a FIFO that no process reads") from None
        raise
    os.set_blocking(descriptor, True)
    return descriptor


def _write_in_place(data: bytes, target: Path, status: os.stat_result) -> None:
    with os.fdopen(_open_in_place(target, status), "wb") as stream:
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


__all__ = ["write_output", "all_or_nothing", "check_writable", "printable", "STDOUT"]
