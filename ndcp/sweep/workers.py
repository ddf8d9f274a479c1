"""Local worker processes for a sweep: each worker takes one point at a time over its own pipe, so the parent always
knows which point a worker holds (docs/sweep.md §3).

- Workers stay in the parent's process group (a Ctrl-C at the terminal reaches them; they ignore it and leave the
  shutdown to the parent) and exit when the parent dies, however it dies: on Linux the kernel kills them
  (prctl(PR_SET_PDEATHSIG, SIGKILL), prctl(2)); elsewhere a watchdog thread waits on the parent's sentinel
  (multiprocessing.parent_process) and exits the worker when it fires.
- A worker that dies while it holds a point (killed, out of memory) is replaced; its point is searched once more
  (RETRIES), then answered as `failed` (solve.failed_answer), and the other workers' points go on.
- An exception raised by a search inside a worker is raised again in the parent (a bug, as in one process).
"""
from __future__ import annotations

import collections
import ctypes
import signal
import sys
import threading
from dataclasses import dataclass
from typing import Iterator, Sequence

from .solve import Job, failed_answer, solve_job

RETRIES = 1  # tries after the first for a point whose worker died
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
STOP_SECONDS = 2.0  # how long a worker asked to stop may take before it is killed


@dataclass
class _Worker:
    process: object  # multiprocessing.Process
    connection: object  # the parent's end of the worker's pipe
    index: int | None = None  # the job it holds


def _exit_with_parent(parent_pid: int) -> None:
    """Make this worker die with its parent (see the module's docstring); a parent already gone: exit now."""
    import multiprocessing.connection
    import os

    if sys.platform == "linux":
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
                if os.getppid() != parent_pid:  # the parent died before prctl took effect
                    os._exit(1)
                return
        except (OSError, AttributeError):
            pass
    sentinel = multiprocessing.parent_process().sentinel

    def watch() -> None:
        multiprocessing.connection.wait([sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="ndcp-parent-watchdog", daemon=True).start()


def serve(connection, parent_pid: int) -> None:
    """A worker's life: search each (index, job) received, send back (index, answer, error text); stop at None or
    when the parent's end closes."""
    _exit_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            message = connection.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        index, job = message
        try:
            connection.send((index, solve_job(job), None))
        except Exception as error:  # noqa: BLE001 - sent to the parent, which raises it
            connection.send((index, None, f"{type(error).__name__}: {error}"))


def _received(worker: _Worker):
    """The (index, answer, error) a worker sent, or None when it died without sending one."""
    try:
        return worker.connection.recv() if worker.connection.poll() else None
    except (EOFError, OSError):
        return None


class WorkerPool:
    """`workers` worker processes solving `jobs` in the order `order`; `answers()` yields (index, answer) as
    points finish. Workers start in the constructor (see executors._worker_context for how)."""

    def __init__(self, jobs: Sequence[Job], order: Sequence[int], workers: int, context_of):
        self._jobs, self._context_of = jobs, context_of
        self._queue = collections.deque(order)
        self._deaths: collections.Counter = collections.Counter()
        self._workers: list[_Worker] = []
        try:
            for _ in range(min(workers, len(jobs))):
                self._workers.append(self._start())
        except BaseException:
            self.close()
            raise

    def _start(self) -> _Worker:
        import os

        context = self._context_of()
        parent_end, child_end = context.Pipe()
        process = context.Process(target=serve, args=(child_end, os.getpid()), name="ndcp-sweep-worker",
                                  daemon=True)
        process.start()
        child_end.close()
        worker = _Worker(process, parent_end)
        self._give(worker)
        return worker

    def _give(self, worker: _Worker) -> None:
        """The next queued point to an idle worker (none left: nothing)."""
        if self._queue:
            worker.index = self._queue.popleft()
            worker.connection.send((worker.index, self._jobs[worker.index]))

    def answers(self) -> Iterator[tuple[int, dict]]:
        from multiprocessing.connection import wait

        try:
            while busy := [w for w in self._workers if w.index is not None]:
                ready = set(wait([w.connection for w in busy] + [w.process.sentinel for w in busy]))
                for worker in busy:
                    if worker.connection in ready or worker.process.sentinel in ready:
                        yield from self._collect(worker)
        finally:
            self.close()

    def _collect(self, worker: _Worker) -> Iterator[tuple[int, dict]]:
        """What a worker that woke the parent has: an answer (then it gets the next point), or its death."""
        message = _received(worker)
        if message is None:
            yield from self._died(worker)
            return
        index, answer, error = message
        if error is not None:
            raise RuntimeError(f"a sweep worker's search failed: {error}")
        worker.index = None
        yield index, answer
        try:
            self._give(worker)
        except OSError:  # it died since: the point it was given is its
            yield from self._died(worker)

    def _died(self, worker: _Worker) -> Iterator[tuple[int, dict]]:
        """A worker gone with a point: the point queued again first (once), else answered failed; a new worker
        takes the queue's next point."""
        index, worker.index = worker.index, None
        worker.process.join()
        self._workers.remove(worker)
        worker.connection.close()
        self._deaths[index] += 1
        if self._deaths[index] <= RETRIES:
            self._queue.appendleft(index)
        else:
            code = worker.process.exitcode
            how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit status {code}"
            yield index, failed_answer(self._jobs[index], f"its worker process died on each of {RETRIES + 1} tries "
                                                          f"(the last: {how})")
        if self._queue:
            self._workers.append(self._start())

    def close(self) -> None:
        """Stop every worker: idle ones asked to, busy ones (an interrupted sweep) killed; none outlives this."""
        for worker in self._workers:
            try:
                if worker.index is None:
                    worker.connection.send(None)
                else:
                    worker.process.kill()
            except (OSError, ValueError):
                pass
        for worker in self._workers:
            worker.process.join(STOP_SECONDS)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join()
            worker.connection.close()
        self._workers = []


__all__ = ["WorkerPool", "serve", "RETRIES"]
