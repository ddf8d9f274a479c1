"""The Ray executor's signal handling, against a stand-in for Ray (runs where Ray is not installed; the real Ray
is tests/sweep/test_ray.py): ndcp's handlers survive ray.init, and a Ctrl-C cancels the tasks in one line."""
import os
import signal
import sys
import types

import pytest

from ndcp.sweep import run_jobs
from tests.sweep.test_workers import JOBS


class FakeRay(types.ModuleType):
    """Ray's calls the executor makes: init installs its own SIGTERM handler, wait is interrupted by Ctrl-C."""

    def __init__(self, interrupt=lambda: None):
        super().__init__("ray")
        self.cancelled, self.stopped, self.running, self.interrupt = [], False, False, interrupt
        self.handler_in_wait = None

    def is_initialized(self):
        return self.running

    def init(self, **options):
        self.running = True
        signal.signal(signal.SIGTERM, lambda *_: print("native stack dump"))

    def remote(self, **options):
        return lambda function: types.SimpleNamespace(remote=lambda job: ("ref", job.point.gpus))

    def wait(self, refs, num_returns):
        self.handler_in_wait = signal.getsignal(signal.SIGTERM)
        self.interrupt()
        raise AssertionError("not interrupted")

    def cancel(self, ref, force):
        self.cancelled.append(ref)

    def shutdown(self):
        self.stopped = True


def ctrl_c():
    raise KeyboardInterrupt


def test_ctrl_c_cancels_the_ray_tasks_in_one_line_and_keeps_ndcps_handlers(monkeypatch, capsys):
    fake = FakeRay(ctrl_c)
    monkeypatch.setitem(sys.modules, "ray", fake)
    ours = lambda *_: None  # noqa: E731 - ndcp's SIGTERM handler, whatever it is
    previous = signal.signal(signal.SIGTERM, ours)
    try:
        with pytest.raises(KeyboardInterrupt):
            list(run_jobs(JOBS, "ray"))
        assert fake.handler_in_wait is ours  # not Ray's
        assert signal.getsignal(signal.SIGTERM) is ours
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert len(fake.cancelled) == len(JOBS) and fake.stopped
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"ndcp: note: interrupted: {len(JOBS)} Ray tasks cancelled, the local Ray stopped"]


def test_sigterm_without_a_handler_of_ndcps_also_ends_a_ray_sweep_in_one_line(monkeypatch, capsys):
    # the probe: SIGTERM printed a native stack dump (Ray's handler) or killed the driver, its Ray left running
    fake = FakeRay(lambda: os.kill(os.getpid(), signal.SIGTERM))
    monkeypatch.setitem(sys.modules, "ray", fake)
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        with pytest.raises(KeyboardInterrupt):
            list(run_jobs(JOBS, "ray"))
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # put back
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert len(fake.cancelled) == len(JOBS) and fake.stopped
    assert capsys.readouterr().err.count("\n") == 1
