"""Issue #36's kill test: `ndcp sweep` killed with SIGKILL at 5 random (seeded) moments (after 1 to 4 more
answers reached its journal, and up to 50 ms more), its journal torn by
truncation each time, then `--resume`: the final JSON equals an uninterrupted sweep's, no process is left (the
process table), and no point is computed more than twice.

Each sweep runs through a small runner that counts, in a file, every search a worker finishes (the workers fork
from the runner, so they inherit the counting solve_job). Tearing a journal line destroys that point's answer, so
the test tears only lines whose point was computed once: the bound then says the sweep never searches a journaled
point again, and an answer lost with the killed parent at most once more.
"""
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.sweep.process_table import GROUP, live_processes

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads the Linux process table")
ROOT = Path(__file__).resolve().parents[2]
RUNNER = ("import os, sys\n"
          "import ndcp.sweep.workers as workers\n"
          "from ndcp.sweep.solve import solve_job\n"
          "def counted(job):\n"
          "    answer = solve_job(job)\n"
          "    descriptor = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT)\n"
          "    os.write(descriptor, (job.key() + '\\n').encode())\n"
          "    os.close(descriptor)\n"
          "    return answer\n"
          "workers.solve_job = counted\n"
          "from ndcp.cli import main\n"
          "sys.exit(main(sys.argv[2:]))\n")
SWEEP = ["sweep", "tiny", "--device", "h100,a100-80g", "--gpus", "1..16", "--global-batch", "16,32",
         "--seq-len", "256,512", "--tokens", "1B", "--workers", "2", "--quiet"]
KILLS, MOST_ROUNDS = 5, 15


def start(counts: Path, *extra) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", RUNNER, str(counts), *SWEEP, *map(str, extra)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)


def assert_nothing_left(group: int) -> None:
    deadline = time.monotonic() + 10
    while live_processes(GROUP, group) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = live_processes(GROUP, group)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left == [], "processes of the killed sweep are still running"


def points(document: Path) -> list[dict]:
    return [{k: v for k, v in p.items() if k != "solve_seconds"} for p in json.loads(document.read_text())["points"]]


def tear(journal: Path, counts: Counter, rng: random.Random) -> bool:
    """Cut the journal's last line short (1 byte up to all of it but one); False when there is none to cut or its
    point was computed twice already (see the module's docstring)."""
    data = journal.read_bytes() if journal.exists() else b""
    lines = data.splitlines(keepends=True)
    if not lines or not lines[-1].endswith(b"\n"):
        return False
    last = json.loads(lines[-1])["answer"]["key"]
    if counts[last] >= 2:
        return False
    os.truncate(journal, len(data) - rng.randint(1, len(lines[-1]) - 1))
    return True


def complete_lines(journal: Path) -> int:
    return journal.read_bytes().count(b"\n") if journal.exists() else 0


def wait_for_lines(sweep: subprocess.Popen, journal: Path, lines: int) -> None:
    """Until the journal has `lines` whole lines or the sweep has ended (the moment to kill it)."""
    deadline = time.monotonic() + 120
    while complete_lines(journal) < lines and sweep.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)


def counted(path: Path) -> Counter:
    return Counter(path.read_text().split()) if path.exists() else Counter()


def test_killed_torn_and_resumed_the_sweep_ends_as_an_uninterrupted_one(tmp_path):
    rng = random.Random(36)
    whole = start(tmp_path / "whole.counts", "--json", tmp_path / "whole.json")
    assert whole.wait(120) == 0, whole.stderr.read()
    journal, counts = tmp_path / "sweep.jsonl", tmp_path / "sweep.counts"
    kills = rounds = 0
    while kills < KILLS and rounds < MOST_ROUNDS:
        rounds += 1
        sweep = start(counts, "--jsonl", journal, "--resume")
        wait_for_lines(sweep, journal, complete_lines(journal) + rng.randint(1, 4))
        time.sleep(rng.uniform(0, 0.05))
        sweep.send_signal(signal.SIGKILL)
        sweep.wait(30)
        assert_nothing_left(sweep.pid)
        kills += tear(journal, counted(counts), rng)
    assert kills == KILLS, f"only {kills} of {rounds} rounds left a line to tear"
    final = start(counts, "--jsonl", journal, "--resume", "--json", tmp_path / "resumed.json")
    assert final.wait(120) == 0, final.stderr.read()
    assert_nothing_left(final.pid)
    assert points(tmp_path / "resumed.json") == points(tmp_path / "whole.json")
    assert max(counted(counts).values()) <= 2, counted(counts).most_common(3)
    assert set(counted(counts)) == set(counted(tmp_path / "whole.counts"))  # every point computed at least once
