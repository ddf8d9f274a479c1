"""The Ray executor against a local Ray the test starts (CI installs the `ray` extra): the serial answers."""
import pytest

from ndcp.space import SpaceOptions
from ndcp.specs import ClusterSpec, RunSpec, device_preset
from ndcp.specs.library import load_model
from ndcp.sweep import Job, SweepPoint, run_jobs

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install -e '.[ray]')")


def test_ray_gives_the_serial_answers():
    tiny = load_model("tiny")
    jobs = [Job(SweepPoint("h100", g, 16, 512), tiny, ClusterSpec(device_preset("h100"), g),
                RunSpec(global_batch=16, seq_len=512), SpaceOptions(), "uniform") for g in (2, 4, 8)]
    serial = dict(run_jobs(jobs, "local", workers=1))
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    try:
        on_ray = dict(run_jobs(jobs, "ray"))
        assert ray.is_initialized()  # a Ray the caller started is left running
    finally:
        ray.shutdown()
    for i in range(3):
        assert {k: v for k, v in on_ray[i].items() if k != "solve_seconds"} == \
               {k: v for k, v in serial[i].items() if k != "solve_seconds"}
