"""Ctrl-C (or SIGTERM, in the `ndcp` program) during a CP-SAT solve: stop the search at once and raise
KeyboardInterrupt once it has returned.

Left alone, CP-SAT catches SIGINT itself (`catch_sigint_signal`), stops and returns as if its time had run out: the
interrupt is lost and a search could report a result as if nothing happened. Without that, Python only runs its
SIGINT handler after the solve returns (the main thread is inside C++), which may be the whole time limit later.
So during a solve Python's signal wake-up fd points at a pipe that one daemon thread watches: the C-level handler
writes to it at once, the thread stops the running solver, and the interrupt is raised here; the searches turn it
into a `feasible` answer with the proven bound (uniform.py, plans.py).
"""
from __future__ import annotations

import os
import signal
import threading

from ortools.sat.python import cp_model


class _Watcher:
    """One thread per process reading the wake-up pipe; it stops whichever solver is running."""

    def __init__(self):
        self.read_end, self.write_end = os.pipe()
        os.set_blocking(self.write_end, False)
        self.lock = threading.Lock()
        self.solver: cp_model.CpSolver | None = None
        self.interrupted = False
        threading.Thread(target=self._watch, name="ndcp-sigint", daemon=True).start()

    def _watch(self) -> None:
        while True:
            if os.read(self.read_end, 1)[0] in STOPPING:
                self.interrupt()

    def interrupt(self) -> None:
        with self.lock:
            self.interrupted = True
            if self.solver is not None:
                self.solver.stop_search()

    def attach(self, solver: cp_model.CpSolver | None) -> bool:
        """Watch `solver` (None: stop watching); returns whether an interrupt arrived since the last attach."""
        with self.lock:
            self.solver, interrupted, self.interrupted = solver, self.interrupted, False
        return interrupted


_watcher: _Watcher | None = None
# The signals that stop a solve: SIGINT, and SIGTERM where the process's handler counts it (the `ndcp` program's,
# ndcp.entry.Signals: its `note` counts a signal, exiting at once on the second); a library caller's SIGTERM is its own.
STOPPING = (signal.SIGINT, signal.SIGTERM)


def _counts(handler) -> bool:
    return callable(getattr(handler, "note", None))


def _during_solve(previous):
    """The handler while a solve runs: the watcher stops the solve and the interrupt is raised once it returns; the
    process's own handler still counts the signal (a second one exits at once)."""
    def handler(signum, frame) -> None:
        if _counts(previous):
            previous.note(signum)
        _watcher.interrupt()
    return handler


def solve(solver: cp_model.CpSolver, model: cp_model.CpModel, callback=None) -> int:
    """solver.solve(model, callback), with Ctrl-C stopping the search and re-raised as KeyboardInterrupt."""
    global _watcher
    if threading.current_thread() is not threading.main_thread():
        return solver.solve(model, callback)  # signal handlers and the wake-up fd belong to the main thread
    if _watcher is None:
        _watcher = _Watcher()
    solver.parameters.catch_sigint_signal = False
    _watcher.attach(solver)
    # Python runs these handlers after the solve returns (before the checks below): the interrupt is never missed
    # even if it lands just as the solve ends, before the watcher thread has read the pipe.
    previous_handlers = {signum: signal.signal(signum, _during_solve(signal.getsignal(signum)))
                         for signum in STOPPING if signum == signal.SIGINT or _counts(signal.getsignal(signum))}
    previous_fd = signal.set_wakeup_fd(_watcher.write_end)
    try:
        status = solver.solve(model, callback)
    finally:
        signal.set_wakeup_fd(previous_fd)
        for signum, handler in previous_handlers.items():
            signal.signal(signum, handler)
        interrupted = _watcher.attach(None)
    if interrupted:
        raise KeyboardInterrupt
    return status
