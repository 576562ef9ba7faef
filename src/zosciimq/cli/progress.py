"""A one-line progress bar on stderr for transfers of more than a few megabytes.

Only drawn when stderr is a terminal (never in logs or pipes) and not ``--quiet``;
redrawn at most ten times a second, so a fast loopback transfer costs nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

THRESHOLD = 4 << 20  # bytes: smaller transfers finish before a bar would be readable
WIDTH = 24


class ProgressBar:
    """``update(done, total)`` as the client's ``on_progress``; ``close()`` ends the line."""

    def __init__(
        self,
        stream: TextIO,
        label: str,
        *,
        threshold: int = THRESHOLD,
        clock: Callable[[], float] = time.monotonic,
        interval: float = 0.1,
    ) -> None:
        self.stream = stream
        self.label = label
        self.threshold = threshold
        self.clock = clock
        self.interval = interval
        self.started = clock()
        self.drawn_at: float | None = None
        self.done = 0
        self.total: int | None = None

    def update(self, done: int, total: int | None = None) -> None:
        self.done, self.total = done, total
        if max(total or 0, done) <= self.threshold:
            return
        now = self.clock()
        if self.drawn_at is None or now - self.drawn_at >= self.interval or done == total:
            self.drawn_at = now
            self.stream.write("\r" + self.render(now) + "\x1b[K")
            self.stream.flush()

    def close(self) -> None:
        if self.drawn_at is not None:
            self.stream.write("\r" + self.render(self.clock()) + "\x1b[K\n")
            self.stream.flush()
            self.drawn_at = None

    def render(self, now: float) -> str:
        elapsed = max(now - self.started, 1e-6)
        rate = f"{_size(self.done / elapsed)}/s"
        if self.total:
            share = min(self.done / self.total, 1.0)
            filled = int(share * WIDTH)
            bar = "#" * filled + "." * (WIDTH - filled)
            amount = f"{_size(self.done)} / {_size(self.total)}"
            return f"{self.label} [{bar}] {share:4.0%} {amount} {rate}"
        return f"{self.label} {_size(self.done)} {rate}"


class NoProgress:
    def update(self, done: int, total: int | None = None) -> None:
        pass

    def close(self) -> None:
        pass


def _size(count: float) -> str:
    units = ("B", "KB", "MB", "GB", "TB")
    index = 0
    while count >= 1000 and index < len(units) - 1:
        count /= 1000
        index += 1
    return f"{count:.0f} B" if index == 0 else f"{count:.1f} {units[index]}"
