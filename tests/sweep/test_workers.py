"""Local worker processes: a killed worker's point is searched once more, then answered `failed`, the other points
kept (the probe: `internal error: BrokenProcessPool`, exit 3, the other worker's point lost); workers die with the
sweep, however it dies (the probe: workers left running under PID 1), and ignore the terminal's Ctrl-C."""
import multiprocessing
import os
import signal
import subprocess
import sys
import time

import pytest

from ndcp.specs import ClusterSpec, RunSpec, device_preset
from ndcp.space import SpaceOptions
from ndcp.specs.library import load_model
from ndcp.sweep import Job, SweepPoint, run_jobs, solve_job
from ndcp.sweep.journal import answer_problem
from tests.sweep.process_table import GROUP, PARENT, live_processes

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the tests fork workers that kill themselves")
TINY = load_model("tiny")


def job(gpus: int) -> Job:
    return Job(SweepPoint("h100", gpus, 16, 256), TINY, ClusterSpec(device_preset("h100"), gpus),
               RunSpec(global_batch=16, seq_len=256), SpaceOptions(), "uniform")


JOBS = [job(1), job(2), job(4), job(8)]


def dying_at(gpus: int, times: int, marks):
    """A solve_job whose worker kills itself (SIGKILL) the first `times` times it gets the point of `gpus` GPUs;
    each try leaves a file under `marks`."""
    def solve(one: Job) -> dict:
        if one.point.gpus == gpus:
            tries = len(list(marks.iterdir()))
            (marks / f"try{tries}").touch()
            if tries < times:
                os.kill(os.getpid(), signal.SIGKILL)
        return solve_job(one)
    return solve


@pytest.fixture
def forked(monkeypatch):
    """Workers forked (so they inherit the patched solve_job), also after a pytest thread started."""
    monkeypatch.setattr("ndcp.sweep.executors._worker_context", lambda: multiprocessing.get_context("fork"))


def without_time(answer: dict) -> dict:
    return {k: v for k, v in answer.items() if k != "solve_seconds"}


def test_a_killed_workers_point_is_searched_once_more(forked, monkeypatch, tmp_path):
    monkeypatch.setattr("ndcp.sweep.workers.solve_job", dying_at(4, 1, tmp_path))
    answers = dict(run_jobs(JOBS, "local", workers=2))
    serial = dict(run_jobs(JOBS, "local", workers=1))
    assert sorted(answers) == [0, 1, 2, 3] and len(list(tmp_path.iterdir())) == 2  # died once, then answered
    assert all(without_time(answers[i]) == without_time(serial[i]) for i in range(4))


def test_a_point_whose_worker_dies_twice_is_answered_failed_and_the_others_kept(forked, monkeypatch, tmp_path):
    monkeypatch.setattr("ndcp.sweep.workers.solve_job", dying_at(4, 2, tmp_path))
    answers = dict(run_jobs(JOBS, "local", workers=2))
    assert sorted(answers) == [0, 1, 2, 3] and len(list(tmp_path.iterdir())) == 2  # two tries, no third
    assert answers[2]["status"] == "failed" and "killed by signal 9" in answers[2]["explanation"]
    assert answer_problem(answers[2]) is None  # journaled like any answer
    assert all(answers[i]["status"] == "optimal" for i in (0, 1, 3))


def test_an_error_in_a_workers_search_is_raised_in_the_parent(forked, monkeypatch):
    def broken(one: Job) -> dict:
        raise ValueError("a bug")
    monkeypatch.setattr("ndcp.sweep.workers.solve_job", broken)
    with pytest.raises(RuntimeError, match="ValueError: a bug"):
        dict(run_jobs(JOBS, "local", workers=2))


SLOW_SWEEP = ("import sys, time\n"
              "import ndcp.sweep.workers as w\n"
              "w.solve_job = lambda job: time.sleep(600)\n"
              "from ndcp.sweep import run_jobs\n"
              "from tests.sweep.test_workers import JOBS\n"
              "running = run_jobs(JOBS, 'local', workers=2)\n"
              "print('started', flush=True)\n"
              "list(running)\n")


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_workers_die_with_the_sweep(how):
    sweep = subprocess.Popen([sys.executable, "-c", SLOW_SWEEP], stdout=subprocess.PIPE, start_new_session=True,
                             cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    try:
        assert sweep.stdout.readline() == b"started\n"
        deadline = time.monotonic() + 30
        while len(live_processes(PARENT, sweep.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        workers = live_processes(PARENT, sweep.pid)
        assert len(workers) >= 2
        assert all(os.getpgid(pid) == sweep.pid for pid in workers)  # in the sweep's process group
        sweep.send_signal(how)
        sweep.wait(30)
        deadline = time.monotonic() + 10
        while live_processes(GROUP, sweep.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert live_processes(GROUP, sweep.pid) == []  # nothing left running
    finally:
        for pid in live_processes(GROUP, sweep.pid):
            os.kill(pid, signal.SIGKILL)


def test_workers_ignore_the_terminals_ctrl_c(forked, monkeypatch, tmp_path):
    # a terminal's Ctrl-C reaches the whole process group: the workers leave the shutdown to the parent
    def interrupted(one: Job) -> dict:
        os.kill(os.getpid(), signal.SIGINT)
        return solve_job(one)
    monkeypatch.setattr("ndcp.sweep.workers.solve_job", interrupted)
    answers = dict(run_jobs(JOBS[:2], "local", workers=2))
    assert [answers[i]["status"] for i in (0, 1)] == ["optimal", "optimal"]
