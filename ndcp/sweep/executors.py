"""Where sweep points run: this process (one worker), local worker processes, or a Ray cluster.

Every executor calls the same `solve_job` on the same jobs, so the answers are the serial ones (each search uses
one CP-SAT worker and a fixed seed); only the order in which points finish differs. `run_jobs` yields
(job index, answer) as each point finishes, for the progress bar and the JSONL file.
"""
from __future__ import annotations

import contextlib
import signal
import sys
import threading
from importlib import import_module
from typing import Iterator, Sequence

from ..specs.fields import SpecError
from .solve import Job, solve_job
from .workers import WorkerPool

EXECUTORS = ("local", "ray")
RAY_MISSING = "--executor ray needs Ray: pip install 'ndcp[ray]'"


def run_jobs(jobs: Sequence[Job], executor: str = "local", workers: int = 1,
             ray_address: str | None = None) -> Iterator[tuple[int, dict]]:
    """Solve every job; yields (index in `jobs`, answer) in finishing order. Local worker processes start here, at
    the call, before the caller starts anything else (such as a progress bar's thread): see _worker_context."""
    if not jobs:
        return iter(())
    if executor == "ray":
        return _ray(jobs, ray_address)
    if executor != "local":
        raise SpecError(f"--executor={executor!r} is not valid; valid: {', '.join(EXECUTORS)}")
    if workers <= 1 or len(jobs) <= 1:
        return ((index, solve_job(job)) for index, job in enumerate(jobs))
    return _processes(jobs, workers)


def _longest_first(jobs: Sequence[Job]) -> list[int]:
    """Job indices, the likely longest first: workers that pick the next job as they finish then end close together
    (longest-processing-time-first list scheduling, Graham 1969) instead of one finishing a long point alone. A
    search is longer the tighter memory is (more recompute plans to solve and prove) and the more micro-batch splits
    its batch allows, so: more model parameters per GPU first, then more tokens per step. The answers do not depend
    on the order."""
    return sorted(range(len(jobs)), key=lambda i: (-jobs[i].model.parameters / jobs[i].cluster.count,
                                                   -jobs[i].run.global_batch * jobs[i].run.seq_len, i))


def _worker_context():
    """How worker processes start. On Linux, from a single-threaded parent: forked, after the parent imports the
    solver once, so each worker starts with OR-Tools and ndcp already imported (bench_sweep, 16 points on 2 workers:
    1.70x with spawned workers, 2.0-2.4x forked; the workers' CPU 16.4-17.2 s against 14.3-15.6 s). Elsewhere, or
    with other threads running (a thread's locks would be copied held): spawned, a clean interpreter each. Asked
    again for each worker started, so a worker replacing one that died while the progress bar's thread runs is
    spawned."""
    import multiprocessing  # here, not at the top: every ndcp command imports this module to register `sweep`

    if sys.platform == "linux" and threading.active_count() == 1:
        import_module("..solve.search", __package__)  # imported here once, inherited by every forked worker
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


def _processes(jobs: Sequence[Job], workers: int) -> Iterator[tuple[int, dict]]:
    """Starts the workers and gives each its first point now; the generator returned yields the answers and stops
    the workers (ndcp/sweep/workers.py: a killed worker's point retried once, then answered `failed`)."""
    return WorkerPool(jobs, _longest_first(jobs), workers, _worker_context).answers()


def _ray(jobs: Sequence[Job], address: str | None) -> Iterator[tuple[int, dict]]:
    try:
        import ray
    except ImportError:
        raise SpecError(RAY_MISSING) from None
    started_here = not ray.is_initialized()
    pending: dict = {}
    with _interrupting_signals() as handlers:
        try:
            if started_here:  # an address joins that cluster; none starts a local one (stopped again at the end)
                _start_ray(ray, address, handlers)
            remote = ray.remote(num_cpus=1)(solve_job)
            pending.update({remote.remote(jobs[index]): index for index in _longest_first(jobs)})
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    yield pending.pop(ref), ray.get(ref)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the tasks cancelled, one line
            for ref in pending:
                ray.cancel(ref, force=True)
            print(f"ndcp: note: interrupted: {len(pending)} Ray tasks cancelled"
                  + (", the local Ray stopped" if started_here else ""), file=sys.stderr)
            raise
        finally:
            if started_here:
                ray.shutdown()


def _start_ray(ray, address: str | None, handlers: dict) -> None:
    try:
        ray.init(address=address, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as error:
        where = f"--ray-address {address}" if address else "--executor ray"
        raise SpecError(f"{where}: cannot start or join Ray: {' '.join(str(error).split())[:300]}") from None
    finally:
        _install(handlers)  # over the ones Ray's driver installed


def _raise_interrupt(number, frame) -> None:
    raise KeyboardInterrupt


def _install(handlers: dict) -> None:
    for number, handler in handlers.items():
        signal.signal(number, handler if handler is not None else signal.SIG_DFL)


@contextlib.contextmanager
def _interrupting_signals():
    """The signal handlers a Ray sweep runs under (yielded, for _start_ray to put back over Ray's: its driver dumps
    native stacks on SIGTERM): ndcp's own, and a SIGTERM that would kill this process at once raising
    KeyboardInterrupt instead (the tasks cancelled, the local Ray stopped, one line; not left running). The handlers
    before are put back after. Off the main thread (where no handler can be set): nothing changed."""
    if threading.current_thread() is not threading.main_thread():
        yield {}
        return
    before = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    ours = {**before, signal.SIGTERM: _raise_interrupt if before[signal.SIGTERM] in (signal.SIG_DFL, None)
            else before[signal.SIGTERM]}
    _install(ours)
    try:
        yield ours
    finally:
        _install(before)


__all__ = ["run_jobs", "EXECUTORS", "RAY_MISSING"]
