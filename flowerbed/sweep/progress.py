"""The sweep's progress line: points done, running, failed and left, and the time left.

On a terminal it is one line rewritten in place; elsewhere (a log file, CI) a plain line is
printed whenever a count changes. The time left is estimated from the median point time
(the mean would follow one slow outlier): the queued points' median each, plus what the
running ones have left of it, shared by the workers. Written by hand: tqdm and rich are
installed, but both estimate from a rate over completions and know one count, not four.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import TextIO


def duration(seconds: float) -> str:
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return (
        f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
    )


class Progress:
    """Counts of one sweep; ``show()`` after each change (and now and then for the clock)."""

    def __init__(self, total: int, skipped: int, workers: int, stream: TextIO | None = None):
        self.total, self.skipped, self.workers = total, skipped, workers
        self.stream = sys.stderr if stream is None else stream
        self.tty = self.stream.isatty()
        self.done = self.failed = 0
        self.started: dict[str, float] = {}  # running point -> start time
        self.seconds: list[float] = []  # times of the points run so far
        self.last = ""

    def start(self, name: str) -> None:
        self.started[name] = time.monotonic()

    def finish(self, name: str, ok: bool) -> None:
        began = self.started.pop(name, time.monotonic())
        self.seconds.append(time.monotonic() - began)
        if ok:
            self.done += 1
        else:
            self.failed += 1

    def left(self) -> int:
        return self.total - self.skipped - self.done - self.failed - len(self.started)

    def eta(self) -> float | None:
        if not self.seconds:
            return None
        median = statistics.median(self.seconds)
        now = time.monotonic()
        running = sum(max(median - (now - t), 0.0) for t in self.started.values())
        return (self.left() * median + running) / self.workers

    def line(self) -> str:
        eta = self.eta()
        return (
            f"sweep: {self.skipped + self.done}/{self.total} done"
            + (f" ({self.skipped} before)" if self.skipped else "")
            + f", {len(self.started)} running, {self.failed} failed, {self.left()} left"
            + (f", about {duration(eta)} to go" if eta is not None else "")
        )

    def show(self) -> None:
        line = self.line()
        if self.tty:
            self.stream.write("\r" + line + "\x1b[K")
            self.stream.flush()
        elif line.split(", about")[0] != self.last.split(", about")[0]:
            print(line, file=self.stream, flush=True)
        self.last = line

    def note(self, text: str) -> None:
        """A line of its own (a failed point's reason), then the progress line again."""
        if self.tty:
            self.stream.write("\r\x1b[K")
        print(text, file=self.stream, flush=True)
        self.last = ""
        self.show()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
