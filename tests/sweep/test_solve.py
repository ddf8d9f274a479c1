"""A sweep point is an independent proven search: the answer equals `ndcp search`'s, whichever executor runs it."""
import subprocess
import sys
import threading

import pytest

from ndcp.space import SearchSpace, SpaceOptions
from ndcp.solve.search import SearchOptions, search
from ndcp.specs import ClusterSpec, RunSpec, SpecError, device_preset
from ndcp.specs.library import load_model
from ndcp.sweep import Job, SweepPoint, run_jobs, solve_job

TINY = load_model("tiny")


def job(gpus: int, batch: int = 16, seq: int = 512, method: str = "uniform") -> Job:
    return Job(SweepPoint("h100", gpus, batch, seq), TINY, ClusterSpec(device_preset("h100"), gpus),
               RunSpec(global_batch=batch, seq_len=seq), SpaceOptions(), method)


def test_a_point_is_the_search_answer_with_its_derived_rate():
    answer = solve_job(job(8))
    space = SearchSpace(TINY, ClusterSpec(device_preset("h100"), 8), RunSpec(global_batch=16, seq_len=512))
    best = search(space, "uniform", SearchOptions(top=1)).best
    assert answer["status"] == "optimal"
    assert answer["step_seconds"] == best.step_seconds and answer["mfu"] == best.time.mfu
    assert answer["tokens_per_second"] == pytest.approx(16 * 512 / best.step_seconds)
    assert answer["strategy"].startswith("tp=") and answer["key"] == job(8).key()
    low, high = answer["step_seconds_band"]  # the winner's band at the run's confidence (docs/confidence.md §4)
    assert low < answer["step_seconds"] < high


def test_a_point_carries_what_its_checkpoint_needs():
    from ndcp.estimate.goodput import checkpoint_volume
    answer = solve_job(job(8))
    best = search(SearchSpace(TINY, ClusterSpec(device_preset("h100"), 8), RunSpec(global_batch=16, seq_len=512)),
                  "uniform", SearchOptions(top=1)).best
    volume = checkpoint_volume(TINY, RunSpec(global_batch=16, seq_len=512), best.strategy)
    facts = answer["checkpoint"]
    assert (facts["written_per_rank"], facts["total"], facts["staged_per_rank"]) == tuple(vars(volume).values())
    assert facts["devices_per_node"] == 8 and facts["staging_capacity"] > facts["staged_per_rank"]


def test_the_problem_key_changes_with_the_problem_not_the_executor():
    assert job(8).key() == job(8).key()
    assert len({job(8).key(), job(16).key(), job(8, batch=32).key(), job(8, method="per-layer").key()}) == 4


def test_local_worker_processes_give_the_serial_answers():
    jobs = [job(2), job(4), job(8), job(8, batch=32)]
    serial = dict(run_jobs(jobs, "local", workers=1))
    parallel = dict(run_jobs(jobs, "local", workers=2))
    drop = lambda a: {k: v for k, v in a.items() if k != "solve_seconds"}  # noqa: E731
    assert sorted(parallel) == [0, 1, 2, 3]
    assert all(drop(parallel[i]) == drop(serial[i]) for i in range(4))


def test_unknown_executor_is_a_spec_error():
    with pytest.raises(SpecError, match="--executor='slurm' is not valid; valid: local, ray"):
        list(run_jobs([job(8)], "slurm"))


def test_workers_start_with_the_likely_longest_points():
    # tighter memory first (more parameters per GPU), then more tokens per step (list scheduling, longest first);
    # ties keep the given order
    from ndcp.sweep.executors import _longest_first
    large = Job(SweepPoint("h100", 8, 16, 512), load_model("llama3-8b"), ClusterSpec(device_preset("h100"), 8),
                RunSpec(global_batch=16, seq_len=512), SpaceOptions(), "uniform")
    jobs = [job(16), job(8), large, job(16, batch=32), job(8)]
    assert _longest_first(jobs) == [2, 1, 4, 3, 0]


@pytest.mark.skipif(sys.platform != "linux", reason="workers fork on Linux only")
def test_workers_fork_only_from_a_single_threaded_parent():
    # forked workers inherit the parent's imports (a fresh, single-threaded process forks); a parent with other
    # threads spawns them instead (a thread's locks would be copied held into the fork)
    from ndcp.sweep.executors import _worker_context
    fresh = subprocess.run([sys.executable, "-c", "from ndcp.sweep.executors import _worker_context; "
                            "print(_worker_context().get_start_method())"], capture_output=True, text=True, check=True)
    assert fresh.stdout.strip() == "fork"
    stop = threading.Event()
    extra = threading.Thread(target=stop.wait, daemon=True)
    extra.start()
    try:
        assert _worker_context().get_start_method() == "spawn"
    finally:
        stop.set()
        extra.join()
