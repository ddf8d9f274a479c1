"""Ctrl-C during a CP-SAT solve: stop the search at once and raise KeyboardInterrupt once it has returned.

Left alone, CP-SAT catches SIGINT itself (`catch_sigint_signal`), stops and returns as if its time had run out: the
interrupt is lost and a search could report a result as if nothing happened. Without that, Python only runs its
SIGINT handler after the solve returns (the main thread is inside C++), which may be the whole time limit later.
So during a solve Python's signal wake-up fd is pointed at a pipe that a small thread watches: the C-level handler
writes to it at once, the thread stops the solver, and the interrupt is raised here; the searches turn it into a
`feasible` answer with the proven bound (certificate.py).
"""
from __future__ import annotations

import os
import signal
import threading

from ortools.sat.python import cp_model


def solve(solver: cp_model.CpSolver, model: cp_model.CpModel, callback=None) -> int:
    """solver.Solve(model, callback), with Ctrl-C stopping the search and re-raised as KeyboardInterrupt."""
    if threading.current_thread() is not threading.main_thread():
        return solver.Solve(model, callback)  # signal handlers and the wake-up fd belong to the main thread
    solver.parameters.catch_sigint_signal = False
    interrupted = threading.Event()
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)

    def watch() -> None:
        while data := os.read(read_end, 1):  # b"" once the write end is closed
            if data[0] == signal.SIGINT:
                interrupted.set()
                solver.stop_search()

    previous_handler = signal.signal(signal.SIGINT, lambda signum, frame: interrupted.set())
    previous_fd = signal.set_wakeup_fd(write_end)
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        status = solver.Solve(model, callback)
    finally:
        signal.set_wakeup_fd(previous_fd)
        signal.signal(signal.SIGINT, previous_handler)
        os.close(write_end)
        watcher.join()
        os.close(read_end)
    if interrupted.is_set():
        raise KeyboardInterrupt
    return status
