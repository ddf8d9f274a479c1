"""The `ndcp` program's first instructions (the console script and `python -m ndcp`): SIGINT and SIGTERM handled
before the command line's imports (OR-Tools, numpy, the estimators: 0.05-0.6 s in which Ctrl-C used to print a
14-30-line traceback). This module imports nothing of ndcp beyond the package, so the handler is in place at once.

The first SIGINT or SIGTERM raises KeyboardInterrupt, where Python would: a running search turns it into its answer
so far (`feasible` with the best verified strategies and the proven bound, or `unknown`), any other moment into one
line (`interrupted`). From the second on, the process exits at once (130) with one line: files ndcp writes are renamed
whole over their targets (ndcp.report.output), so each holds its old content or its new, never a part. Once the
command has answered, a signal changes nothing: the process ends with the command's own exit code.
"""
from __future__ import annotations

import os
import signal
import sys
import threading

EXIT_UNKNOWN = 4  # a search stopped before any strategy was verified (status `unknown`)
EXIT_INTERRUPTED = 130  # Ctrl-C where no search answer is at stake (128 + SIGINT, the shells' convention)
SEARCH_COMMANDS = ("search", "sweep", "recompute", "replan")
SIGNALS = (signal.SIGINT, signal.SIGTERM)
REDELIVERY_DELAY = 0.001  # seconds before a signal lost in code whose exceptions Python ignores is sent again


class Signals:
    """The process's SIGINT and SIGTERM handler: the first signal raises KeyboardInterrupt, the next exit at once.
    `note` counts a signal without raising (ndcp.solve.interrupt calls it while CP-SAT runs)."""

    def __init__(self):
        self.count = 0
        self.answered: int | None = None  # the command's exit code once it has answered
        self.last = signal.SIGINT  # the last signal received
        self.resending = False  # a signal lost in code whose exceptions Python ignores is being sent again

    def __call__(self, signum, frame) -> None:
        if _inside(frame, Signals.unraisable.__code__):  # raised in the hook it would be ignored too: sent again
            self.resend(signum)
            return
        self.note(signum)
        raise KeyboardInterrupt

    def unraisable(self, report) -> None:
        """sys.unraisablehook: the first signal's KeyboardInterrupt raised where Python ignores exceptions (a weakref
        callback of the import machinery, importlib._bootstrap `_get_module_lock`'s `cb`; a __del__) would be printed
        as "Exception ignored" with its traceback and lost; it is sent again instead, the same signal a millisecond
        later from a timer thread, until it lands where it can interrupt (one arriving while this hook runs is not
        raised here, where Python would ignore it as well, but sent again too). Anything else is reported as Python
        reports it."""
        if report.exc_type is not None and issubclass(report.exc_type, KeyboardInterrupt) and self.count == 1:
            self.count = 0  # not taken
            self.resend(self.last)
            return
        sys.__unraisablehook__(report)

    def resend(self, signum: int) -> None:
        """Send `signum` to the process again after REDELIVERY_DELAY, from a timer thread; one at a time, so that a
        re-sent signal is never counted as a second one."""
        if self.resending:
            return
        self.resending = True
        threading.Timer(REDELIVERY_DELAY, self._deliver, (signum,)).start()

    def _deliver(self, signum: int) -> None:
        self.resending = False
        os.kill(os.getpid(), signum)

    def note(self, signum: int) -> None:
        """Count one signal; exit at once if the command has answered or this is not the first."""
        self.count += 1
        self.last = signum
        if self.answered is not None:
            os._exit(self.answered)
        if self.count > 1:
            os.write(2, f"ndcp: {signal.Signals(signum).name} again: stopped at once\n".encode())
            os._exit(EXIT_INTERRUPTED)


def _inside(frame, code) -> bool:
    """Whether `code` runs in `frame` or a frame that called it."""
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


_handler: Signals | None = None  # the program's handler (None: a library caller's process)


def signalled() -> bool:
    """Whether the program has received SIGINT or SIGTERM: an error raised since may be the interrupt's (a C
    extension interrupted while it initialises raises ImportError, not KeyboardInterrupt)."""
    return _handler is not None and _handler.count > 0


def interrupted(argv: list[str]) -> int:
    """Ctrl-C outside a running search's own handling: before a search command has verified any strategy (while it
    starts, reads its model, builds its space or model) its status is `unknown` (exit 4); other commands exit 130."""
    command = next((word for word in argv if not word.startswith("-")), None)
    if command in SEARCH_COMMANDS:
        print("ndcp: unknown: interrupted before any strategy was verified", file=sys.stderr)
        return EXIT_UNKNOWN
    print("ndcp: interrupted", file=sys.stderr)
    return EXIT_INTERRUPTED


def console() -> int:
    """The `ndcp` program: the signal handler first, then the command line (ndcp.cli.console)."""
    global _handler
    _handler = Signals()
    for signum in SIGNALS:
        signal.signal(signum, _handler)
    sys.unraisablehook = _handler.unraisable
    try:
        from .cli import console as command_line
        code = command_line()
        sys.stdout.flush()
    except KeyboardInterrupt:  # while importing, or past the command's own handling
        code = interrupted(sys.argv[1:])
    except BrokenPipeError:
        code = 0
    except Exception:
        if not signalled():
            raise
        code = interrupted(sys.argv[1:])
    _handler.answered = code
    if signalled():
        # An interrupt inside code a C extension ran while initialising (PyRun_String) leaves CPython's "unhandled
        # KeyboardInterrupt" flag set, and the interpreter's exit then kills the process by SIGINT (exit -2 after
        # the answer: seen twice in about 50 interrupted runs). The answer is written: end here, with its code.
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
    return code
