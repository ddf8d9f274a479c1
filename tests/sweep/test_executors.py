"""The Ray executor's signal handling, against a stand-in for Ray (runs where Ray is not installed; the real Ray
is tests/sweep/test_ray.py): ndcp's handlers survive ray.init, and a Ctrl-C cancels the tasks in one line."""
import signal
import sys
import types

import pytest

from ndcp.sweep import run_jobs
from tests.sweep.test_workers import JOBS


class FakeRay(types.ModuleType):
    """Ray's calls the executor makes: init installs its own SIGTERM handler, wait is interrupted by Ctrl-C."""

    def __init__(self):
        super().__init__("ray")
        self.cancelled, self.stopped, self.running = [], False, False

    def is_initialized(self):
        return self.running

    def init(self, **options):
        self.running = True
        signal.signal(signal.SIGTERM, lambda *_: print("native stack dump"))

    def remote(self, **options):
        return lambda function: types.SimpleNamespace(remote=lambda job: ("ref", job.point.gpus))

    def wait(self, refs, num_returns):
        raise KeyboardInterrupt

    def cancel(self, ref, force):
        self.cancelled.append(ref)

    def shutdown(self):
        self.stopped = True


def test_ctrl_c_cancels_the_ray_tasks_in_one_line_and_keeps_ndcps_handlers(monkeypatch, capsys):
    fake = FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    ours = lambda *_: None  # noqa: E731 - ndcp's SIGTERM handler, whatever it is
    previous = signal.signal(signal.SIGTERM, ours)
    try:
        with pytest.raises(KeyboardInterrupt):
            list(run_jobs(JOBS, "ray"))
        assert signal.getsignal(signal.SIGTERM) is ours  # not Ray's
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert len(fake.cancelled) == len(JOBS) and fake.stopped
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"ndcp: note: interrupted: {len(JOBS)} Ray tasks cancelled, the local Ray stopped"]
