"""Search progress on stderr: a rich live status line on a terminal, plain lines at most every ~2 s otherwise."""
from __future__ import annotations

import shutil
import sys
import time

from rich.console import Console
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from .terminal import format_seconds


class SearchProgress:
    """The searches' `progress` callback (a context manager: the live line is shown while it is entered)."""

    INTERVAL = 2.0

    def __init__(self, enabled: bool, method: str):
        self.enabled, self.method = enabled, method
        self.clock = time.perf_counter
        self.start = self.clock()
        self.last = None  # the latest Progress
        self.printed = self.start
        self.live = self.spinner = None
        self.tty = enabled and sys.stderr.isatty()

    def __enter__(self):
        if self.tty:
            self.live = Live(self, console=Console(stderr=True), refresh_per_second=8, transient=True)
            self.live.start()
        return self

    def __exit__(self, *exc):
        if self.live is not None:
            self.live.stop()
        return False

    def line(self, width: int | None = None) -> str:
        """`cp-sat 1.2 s | incumbent | bound | gap | done | phase`: the numbers first, and within `width` characters
        by leaving out parts from the end (whole parts, never a cut number)."""
        parts = self.parts()
        while len(parts) > 1 and width is not None and len(" | ".join(parts)) > width:
            parts.pop()
        return " | ".join(parts)

    def parts(self) -> list[str]:
        p = self.last
        parts = [f"{self.method} {self.clock() - self.start:.1f} s"]
        if p is None:
            return parts + ["solving"]
        parts.append(f"incumbent {format_seconds(p.incumbent_seconds)}")
        if p.lower_bound_seconds is not None:
            parts.append(f"bound {format_seconds(p.lower_bound_seconds)}")
        if p.gap is not None:
            parts.append(f"gap {100 * p.gap:.2f} %")
        if p.total:
            parts.append(f"{p.done:,}/{p.total:,} priced")
        elif p.done:
            parts.append(f"{p.done:,} verified")
        parts.append(p.phase)
        return parts

    def __rich__(self):
        if self.spinner is None:
            self.spinner = Spinner("dots", style="cyan")
        text = Text(no_wrap=True, end="")
        text.append_text(self.spinner.render(self.clock()))
        text.append(" " + self.line(self.live.console.width - 3 if self.live else None))
        return text

    def __call__(self, progress) -> None:
        if not self.enabled:
            return
        self.last = progress
        if self.tty:
            return  # the live display redraws itself
        now = self.clock()
        if now - self.printed >= self.INTERVAL:
            self.printed = now
            width = shutil.get_terminal_size().columns - len("ndcp: ")
            print(f"ndcp: {self.line(width)}", file=sys.stderr, flush=True)


__all__ = ["SearchProgress"]
