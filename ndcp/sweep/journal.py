"""The sweep journal (`--jsonl PATH`): each point's answer appended as one line the moment it finishes, read back
by `--resume` (docs/sweep.md §4).

A line is one JSON object, `{"answer": {...}, "crc32": "<8 hex digits>"}`: the CRC-32 (zlib.crc32) of the
answer's canonical text (json.dumps, sorted keys, compact separators, no NaN), so a line cut short, spliced or
edited is told from a whole one. Opening a journal (`Journal.open`):

- takes an advisory lock (fcntl.flock, exclusive, non-blocking), held until the sweep ends: a second sweep on the
  same journal refuses at once with one line instead of computing the same points (where fcntl is missing, on
  Windows, there is no lock);
- reads every line and keeps the good ones: a line without its newline (a kill or a full disk during a write),
  one that is not JSON, whose checksum does not match, or whose answer `answer_problem` rejects is skipped, said
  in one note, and the journal is rewritten in place with the good lines only, before anything is appended (the
  next answer never joins a torn line; a bad line is said once, not at every resume). The good lines are a
  subsequence of the old ones, rewritten from the start, so a rewrite that is itself cut short loses at most the
  one line it was writing; an unchanged journal is not rewritten.

Only the fields the sweep reads are checked (`answer_problem`); other keys a point carries are kept as they are.
"""
from __future__ import annotations

import json
import math
import os
import sys
import zlib
from pathlib import Path
from typing import Iterable, NamedTuple

from ..solve.result import STATUSES
from ..specs.fields import SpecError
from ..specs.files import RUNS_CAP, _check_kind, _Refused  # the file reader's own check: the same words

try:
    import fcntl
except ImportError:  # Windows: no advisory lock
    fcntl = None

FAILED = "failed"  # a point whose worker process died on each try (executors): journaled, searched again on resume
ANSWER_STATUSES = (*STATUSES, FAILED)
WITH_PLAN = ("optimal", "feasible", "heuristic")  # statuses that come with a strategy and its step time


def encode_line(answer: dict) -> bytes:
    """The journal line of `answer` (ValueError for a value JSON cannot hold, such as NaN)."""
    text = json.dumps(answer, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return b'{"answer":%s,"crc32":"%08x"}\n' % (text.encode(), zlib.crc32(text.encode()))


def decode_line(line: bytes) -> dict | None:
    """The answer of a whole journal line (its newline removed), or None when it is not one (not JSON, not of the
    journal's shape, its checksum wrong, or its answer rejected by answer_problem)."""
    try:
        record = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(record, dict) or set(record) != {"answer", "crc32"} or not isinstance(record["answer"], dict):
        return None
    try:
        text = json.dumps(record["answer"], sort_keys=True, separators=(",", ":"), allow_nan=False)
    except ValueError:  # NaN or infinity: never written by encode_line
        return None
    if record["crc32"] != f"{zlib.crc32(text.encode()):08x}" or answer_problem(record["answer"]):
        return None
    return record["answer"]


def _positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value < 1 << 62


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def answer_problem(answer: dict) -> str | None:
    """Why `answer` is not a sweep point's answer (solve.solve_job's keys, types and ranges, its step time and rate
    agreeing), or None when it is one."""
    if not (isinstance(answer.get("key"), str) and 0 < len(answer["key"]) <= 64):
        return "no problem key"
    if not isinstance(answer.get("device"), str) or not all(
            _positive_int(answer.get(name)) for name in ("gpus", "global_batch", "seq_len")):
        return "no point (device, gpus, global_batch, seq_len)"
    if answer.get("status") not in ANSWER_STATUSES:
        return "no status"
    if any(answer.get(name) is not None and not isinstance(answer[name], str)
           for name in ("strategy", "label", "explanation")):
        return "a text field that is no text"
    if not (_number(answer.get("solve_seconds")) and answer["solve_seconds"] >= 0):
        return "no solve time"
    if answer["status"] not in WITH_PLAN:
        planless = all(answer.get(name) is None for name in ("strategy", "step_seconds", "mfu", "tokens_per_second"))
        return None if planless else f"a plan with status {answer['status']}"
    return _plan_problem(answer)


def _plan_problem(answer: dict) -> str | None:
    step, mfu, rate = answer.get("step_seconds"), answer.get("mfu"), answer.get("tokens_per_second")
    if not isinstance(answer.get("strategy"), str):
        return "no strategy"
    if not (_number(step) and step > 0 and _number(mfu) and 0 < mfu <= 1 and _number(rate)):
        return "a step time, MFU or rate out of range"
    tokens = answer["global_batch"] * answer["seq_len"]
    return None if math.isclose(rate, tokens / step, rel_tol=1e-9) else "a rate that is not tokens / step time"


class Scan(NamedTuple):
    """A journal's good lines (each with its newline) and answers, in order, and the line numbers skipped."""

    good: list[bytes]
    answers: list[dict]
    skipped: list[int]


def scan(data: bytes) -> Scan:
    """The good lines of a journal's bytes; the last piece after the last newline (a torn write) is skipped."""
    pieces = data.split(b"\n")
    good, answers, skipped = [], [], []
    for number, piece in enumerate(pieces, 1):
        if number == len(pieces) and not piece:
            break  # the empty remainder after the final newline
        answer = None if number == len(pieces) or not piece.strip() else decode_line(piece)
        if answer is None:
            if piece.strip():
                skipped.append(number)
            continue
        good.append(piece + b"\n")
        answers.append(answer)
    return Scan(good, answers, skipped)


class Journal:
    """An open, locked journal: the answers it held when opened (`answers`, by problem key, the last one of a key
    winning) and `append` for new ones. Use as a context manager (Journal.open); closing releases the lock."""

    def __init__(self, path: str, descriptor: int, answers: Iterable[dict]):
        self.path, self._descriptor = path, descriptor
        self.answers = {answer["key"]: answer for answer in answers}

    @classmethod
    def open(cls, path: str | os.PathLike) -> "Journal":
        """Open (or create) the journal at `path`, lock it and repair it (see the module's docstring). Every failure
        is one SpecError line naming --jsonl and the path."""
        where = f"--jsonl {path}"
        try:
            descriptor = os.open(Path(path).expanduser(), os.O_RDWR | os.O_CREAT | os.O_NONBLOCK, 0o666)
        except (OSError, ValueError) as error:
            raise SpecError(f"{where}: cannot write: {_why(error)}") from None
        try:
            _check_regular(descriptor, where)
            _lock(descriptor, where)
            found = scan(_read_all(descriptor, where))
            if found.skipped:
                _rewrite(descriptor, b"".join(found.good), where)
                _note_skipped(where, found.skipped)
        except BaseException:
            os.close(descriptor)
            raise
        return cls(str(path), descriptor, found.answers)

    def append(self, answer: dict) -> None:
        """Append one answer as one write, synced to the disk (a SpecError line when it cannot be written: a
        full disk leaves at most a torn line, which the next open drops)."""
        try:
            _write_at(self._descriptor, os.lseek(self._descriptor, 0, os.SEEK_END), encode_line(answer))
            os.fsync(self._descriptor)
        except OSError as error:
            raise SpecError(f"--jsonl {self.path}: cannot write: {_why(error)}") from None

    def close(self) -> None:
        if self._descriptor >= 0:
            os.close(self._descriptor)  # releases the lock
            self._descriptor = -1

    def __enter__(self) -> "Journal":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _why(error: BaseException) -> str:
    return getattr(error, "strerror", None) or type(error).__name__


def _check_regular(descriptor: int, where: str) -> None:
    """A journal is a regular file (it is locked, truncated and appended to) of at most RUNS_CAP bytes."""
    try:
        _check_kind(os.fstat(descriptor), RUNS_CAP)
    except _Refused as refused:
        raise SpecError(f"{where}: cannot read the answers: {refused}") from None


def _lock(descriptor: int, where: str) -> None:
    if fcntl is None:
        return
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SpecError(f"{where}: another ndcp sweep is using this journal (it is locked); wait for it to end or "
                        "give another --jsonl PATH") from None
    except OSError:  # a file system without flock (some network file systems): no lock
        pass


def _read_all(descriptor: int, where: str) -> bytes:
    chunks, size = [], 0
    while chunk := os.read(descriptor, 1 << 20):
        chunks.append(chunk)
        size += len(chunk)
        if size > RUNS_CAP:
            raise SpecError(f"{where}: cannot read the answers: larger than {RUNS_CAP >> 20} MiB")
    return b"".join(chunks)


def _write_at(descriptor: int, offset: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(descriptor, view, offset)
        view, offset = view[written:], offset + written


def _rewrite(descriptor: int, good: bytes, where: str) -> None:
    try:
        _write_at(descriptor, 0, good)
        os.ftruncate(descriptor, len(good))
        os.fsync(descriptor)
    except OSError as error:
        raise SpecError(f"{where}: cannot repair the journal: {_why(error)}") from None


def _note_skipped(where: str, skipped: list[int]) -> None:
    lines = f"line {skipped[0]}" if len(skipped) == 1 else f"{len(skipped)} lines (the first: line {skipped[0]})"
    print(f"ndcp: note: {where}: {lines} cut short, corrupt or not a valid answer: dropped from the journal; "
          "those points are searched again", file=sys.stderr)


__all__ = ["Journal", "encode_line", "decode_line", "answer_problem", "scan", "Scan", "FAILED", "ANSWER_STATUSES"]
