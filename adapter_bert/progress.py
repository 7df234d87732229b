"""Progress display that reads well both in a terminal and in a log file.

On a TTY one line is rewritten in place about ten times a second; elsewhere a plain line
is written per tenth of the total and at the end. Standard library only.

    progress = Progress("train", total=500, unit="steps")
    progress.update(step + 1, loss=0.42)
    progress.finish()
"""

import math
import sys
import time
from typing import Optional, TextIO


# Plain-line mode: a line each time this fraction of the total more is done.
LINE_FRACTION = 0.1
# Plain-line mode with no known total: a line every this many units.
LINES_EVERY_UNKNOWN = 100
# Terminal mode: at most one redraw per this many seconds (the last one is always drawn).
REDRAW_SECONDS = 0.1
BAR_WIDTH = 20


def is_terminal(stream) -> bool:
    """Whether `stream` is an interactive terminal (False for pipes, files, closed streams)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def format_bytes(count: float) -> str:
    """1536 -> "1.5 KiB"; 3 * 2**20 -> "3.0 MiB"."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(count) < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GiB"  # pragma: no cover (the loop always returns)


def format_seconds(seconds: float) -> str:
    """65 -> "1:05"; 3725 -> "1:02:05"."""
    seconds = int(round(max(seconds, 0.0)))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"


class Progress:
    """One phase's progress (steps, batches, bytes) towards `total` (None: unknown), counted
    from `start` (a resumed run's steps); `terminal` forces the display (default:
    `isatty()`). The time left is estimated from the rate after the first update (which pays
    for tracing).
    """

    def __init__(self, label: str, total: Optional[int] = None, unit: str = "steps",
                 stream: Optional[TextIO] = None, terminal: Optional[bool] = None,
                 start: int = 0):
        self.label, self.total, self.unit = label, total, unit
        self._stream = stream
        self.terminal = is_terminal(self.stream) if terminal is None else bool(terminal)
        self.start = self.done = start
        self._began = time.monotonic()
        self._last_draw = -math.inf
        self._next_line = self._line_after(start)
        self._drawn_width = 0
        self._last_line = None  # the count of the last plain line written
        self._first = None  # (time, count) of the first update
        self._fields = {}
        self.finished = False

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    def _line_after(self, done: int) -> float:
        """The count at which plain-line mode writes its next line."""
        if self.total:
            step = max(1, math.ceil(self.total * LINE_FRACTION))
            return (done // step + 1) * step
        return (done // LINES_EVERY_UNKNOWN + 1) * LINES_EVERY_UNKNOWN

    def _count(self, value: float) -> str:
        return format_bytes(value) if self.unit == "bytes" else str(int(value))

    def text(self, bar: bool = False) -> str:
        """The progress line (without `\\r` or newline)."""
        elapsed = time.monotonic() - self._began
        if self.total:
            fraction = min(self.done / self.total, 1.0)
            count = f"{self._count(self.done)}/{self._count(self.total)}"
            if self.unit != "bytes":
                count += f" {self.unit}"
            if bar:
                filled = int(BAR_WIDTH * fraction)
                count = f"[{'=' * filled}{'.' * (BAR_WIDTH - filled)}] {count}"
            parts = [f"{self.label}: {count} ({100 * fraction:.0f}%)"]
        else:
            count = self._count(self.done) + ("" if self.unit == "bytes" else f" {self.unit}")
            parts = [f"{self.label}: {count}"]
        parts.append(format_seconds(elapsed))
        if self.total and self._first and self.done < self.total:
            # The rate since the first update: the first step or batch also pays for
            # tracing and compiling, and would make the estimate far too long.
            first_time, first_done = self._first
            if self.done > first_done:
                rate = (time.monotonic() - first_time) / (self.done - first_done)
                parts.append(f"{format_seconds(rate * (self.total - self.done))} left")
        for name, value in self._fields.items():
            parts.append(f"{name} {value:.4g}" if isinstance(value, float) else f"{name} {value}")
        return ", ".join(parts)

    def update(self, done: int, **fields) -> None:
        """Records that `done` units are done; `fields` (e.g. loss=0.5) are shown too."""
        self.done = done
        self._fields.update(fields)
        if self._first is None:
            self._first = (time.monotonic(), done)
        if self.terminal:
            now = time.monotonic()
            if now - self._last_draw >= REDRAW_SECONDS or (self.total and done >= self.total):
                self._last_draw = now
                self._draw()
        elif done >= self._next_line:
            self._next_line = self._line_after(done)
            self._write_line()

    def finish(self, **fields) -> None:
        """Ends the phase: the last line is written (once) and the terminal line closed."""
        if self.finished:
            return
        self.finished = True
        self._fields.update(fields)
        if self.terminal:
            self._draw()
            self.stream.write("\n")
            self.stream.flush()
        elif self._last_line != self.done:
            # The last count has no line yet (it fell between two tenths).
            self._write_line()

    def _draw(self) -> None:
        line = self.text(bar=True)
        padding = " " * max(0, self._drawn_width - len(line))
        self._drawn_width = len(line)
        self.stream.write("\r" + line + padding)
        self.stream.flush()

    def _write_line(self) -> None:
        self._last_line = self.done
        self.stream.write(self.text() + "\n")
        self.stream.flush()
