"""The sweep fault categories of scripts/fuzz_cli.py (issue #36, Build 2): what a long sweep meets besides odd
values.

- journal-corrupt: a real journal torn, bit-flipped, spliced with garbage, old-format lines, NUL bytes, or answers
  with hostile field values under a valid checksum, then `--resume` (must answer every point, exit 0);
- journal-locked: a journal another sweep holds (one line, exit 2);
- journal-path: a journal that is no file (/dev/full, /dev/null, a directory, a FIFO, a missing directory), with and
  without --resume (one line, exit 2, no hang);
- worker-killed: a worker process SIGKILLed once or twice mid-sweep (exit 0, the JSON whole, nothing left running);
- sweep-signalled: the sweep itself sent SIGKILL, SIGTERM or SIGINT mid-sweep (no traceback, nothing left
  running), then resumed (exit 0).

Each case is a SweepCase; `run_case` runs it and returns (exit code or 'timeout'/'leftover', stdout, stderr,
seconds) like fuzz_cli's runners.
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ["sweep", "tiny", "--device", "h100", "--gpus", "1..8", "--global-batch", "16,32", "--seq-len", "256",
         "--tokens", "1B", "--quiet"]
LONG_SWEEP = ["sweep", "tiny", "--device", "h100,a100-80g", "--gpus", "1..64", "--global-batch", "16,32",
              "--seq-len", "256,512", "--tokens", "1B", "--quiet"]  # 56 points: about 2 s of searches on 2 cores
HOSTILE = ["abc", "", -5, 0, -0.0, 1e308, 2**70, True, None, [], {}, "\x1b[31m", "x" * 10_000, 1.5, 0.5]
FIELDS = ["key", "device", "gpus", "global_batch", "seq_len", "status", "strategy", "label", "step_seconds", "mfu",
          "tokens_per_second", "solve_seconds", "explanation"]
KINDS = ("journal-corrupt", "journal-locked", "journal-path", "worker-killed", "sweep-signalled")


@dataclass
class SweepCase:
    kind: str
    argv: list[str]
    journal: bytes | str | None = None  # the journal's bytes, "fifo", or None (no file prepared)
    signals: list[tuple[float, str, int]] = field(default_factory=list)  # (after s, "worker" | "sweep", signal)

    def describe(self) -> str:
        journal = self.journal[:120] if isinstance(self.journal, bytes) else self.journal
        return f"[{self.kind}] argv={self.argv!r:.300} journal={journal!r:.300} signals={self.signals}"


_GOOD: list[bytes] = []


def good_journal() -> list[bytes]:
    """The lines of a whole journal of SWEEP (made once, in this process)."""
    if not _GOOD:
        import tempfile

        from ndcp.cli import main

        with tempfile.TemporaryDirectory(prefix="ndcp-fuzz-journal-") as folder:
            path = Path(folder) / "sweep.jsonl"
            assert main([*SWEEP, "--workers", "1", "--jsonl", str(path)]) == 0
            _GOOD.extend(path.read_bytes().splitlines(keepends=True))
    return _GOOD


def _corrupt_line(rng: random.Random, line: bytes) -> bytes:
    from ndcp.sweep.journal import encode_line

    if len(line) < 2:  # a line this case already cut to nothing: replace it
        return b"garbage\n"
    what = rng.randrange(6)
    if what == 0:
        return line[:rng.randrange(len(line))]  # torn
    if what == 1:
        at = rng.randrange(len(line) - 1)
        return line[:at] + bytes([line[at] ^ (1 << rng.randrange(8))]) + line[at + 1:]  # a flipped bit
    if what == 2:
        return rng.choice([b"garbage\n", b"\x00" * 40 + b"\n", b"\xff\xfe\n", b"[" * 5000 + b"\n", b"{}\n", b"\n"])
    try:
        answer = json.loads(line)["answer"]
    except (ValueError, KeyError, TypeError, RecursionError):  # a line this case corrupted already: cut it
        return line[:len(line) // 2]
    if what == 3:
        return json.dumps(answer).encode() + b"\n"  # an older ndcp's line: no checksum
    for name in rng.sample(FIELDS, rng.randint(1, 3)):
        answer[name] = rng.choice(HOSTILE)
    try:
        return encode_line(answer)  # a valid checksum over hostile fields
    except ValueError:
        return json.dumps({"answer": answer, "crc32": "00000000"}, default=str).encode() + b"\n"


def _corrupt(rng: random.Random) -> SweepCase:
    lines = list(good_journal())
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(lines))
        lines[at] = _corrupt_line(rng, lines[at])
    if rng.random() < 0.3:
        lines.append(rng.choice(lines)[:rng.randint(1, 40)])  # a torn tail
    return SweepCase("journal-corrupt", [*SWEEP, "--workers", rng.choice(["1", "2"]), "--jsonl", "{J}", "--resume"],
                     b"".join(lines))


def _path(rng: random.Random) -> SweepCase:
    where = rng.choice(["/dev/full", "/dev/null", "{DIR}", "{DIR}/missing/sweep.jsonl", "{J}"])
    resume = ["--resume"] if rng.random() < 0.7 else []
    return SweepCase("journal-path", [*SWEEP, "--workers", "1", "--jsonl", where, *resume],
                     "fifo" if where == "{J}" else None)


def _signalled(rng: random.Random, kind: str) -> SweepCase:
    if kind == "worker-killed":
        signals = [(rng.uniform(0.8, 2.5), "worker", signal.SIGKILL) for _ in range(rng.randint(1, 2))]
    else:
        signals = [(rng.uniform(0.3, 2.5), "sweep", rng.choice([signal.SIGKILL, signal.SIGTERM, signal.SIGINT]))]
    return SweepCase(kind, [*LONG_SWEEP, "--workers", "2", "--jsonl", "{J}", "--resume", "--json", "{J}.json"],
                     signals=signals)


def generate_sweep_fault(rng: random.Random, kind: str | None = None) -> SweepCase:
    """A case of `kind` (one of KINDS), or of a random one."""
    kind = kind or rng.choices(KINDS, weights=[40, 10, 20, 15, 15])[0]
    if kind == "journal-corrupt":
        return _corrupt(rng)
    if kind == "journal-path":
        return _path(rng)
    if kind == "journal-locked":
        return SweepCase(kind, [*SWEEP, "--workers", "1", "--jsonl", "{J}"], b"".join(good_journal()[:2]))
    return _signalled(rng, kind)


def materialise(case: SweepCase, tmp: Path, index: int) -> list[str]:
    folder = tmp / f"sweep{index}"
    folder.mkdir()
    journal = folder / "sweep.jsonl"
    if case.journal == "fifo":
        os.mkfifo(journal)
    elif case.journal is not None:
        journal.write_bytes(case.journal)
    return [a.replace("{J}", str(journal)).replace("{DIR}", str(folder)) for a in case.argv]


def run_case(case: SweepCase, argv: list[str], guard: float, in_process) -> tuple[int | str, str, str, float]:
    """Run one case: in-process (`in_process`, fuzz_cli's runner), the locked one with the journal held here, the
    signalled ones as a process of their own, checked for processes left running and resumed."""
    if case.kind == "journal-locked":
        from ndcp.sweep.journal import Journal

        with Journal.open(argv[argv.index("--jsonl") + 1]):
            return in_process(argv, guard)
    if not case.signals:
        return in_process(argv, guard)
    code, out, err, seconds = _signalled_run(case, argv, guard)
    if code == 0 and case.kind == "worker-killed":
        json.loads(Path(argv[-1]).read_text())  # whole
    if code not in ("timeout", "leftover") and "Traceback" not in err:
        return in_process(argv, guard)  # resumed: every point answered
    return code, out, err, seconds


def _signalled_run(case: SweepCase, argv: list[str], guard: float) -> tuple[int | str, str, str, float]:
    sys.path.insert(0, str(ROOT))
    from tests.sweep.process_table import GROUP, PARENT, live_processes

    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    started = time.perf_counter()
    sweep = subprocess.Popen([sys.executable, "-m", "ndcp", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=env, cwd=ROOT, start_new_session=True)
    for after, whom, number in case.signals:
        time.sleep(max(0.0, after - (time.perf_counter() - started)))
        targets = live_processes(PARENT, sweep.pid) if whom == "worker" else [sweep.pid]
        if targets:
            os.kill(targets[0], number)
    try:
        out, err = sweep.communicate(timeout=guard)
    except subprocess.TimeoutExpired:
        sweep.kill()
        out, err = sweep.communicate()
        code: int | str = "timeout"
    else:
        code = sweep.returncode
    deadline = time.monotonic() + 10
    while live_processes(GROUP, sweep.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if left := live_processes(GROUP, sweep.pid):
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        code = "leftover"
    if case.kind == "sweep-signalled" and code in (-signal.SIGKILL, -signal.SIGTERM, 130, 4):
        code = 0  # ended by the signal sent (4: interrupted before any point was answered), as it should
    return code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), time.perf_counter() - started


__all__ = ["SweepCase", "generate_sweep_fault", "materialise", "run_case", "KINDS"]
