"""One-line progress bars on stderr: ``ProgressBar`` for transfers of more than a few
megabytes, ``BatchBar`` for batch publishes that run longer than a second.

Only drawn when stderr is a terminal (never in logs or pipes) and not ``--quiet``;
redrawn at most ten times a second, so a fast loopback transfer costs nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

THRESHOLD = 4 << 20  # bytes: smaller transfers finish before a bar would be readable
WIDTH = 24


class _Line:
    """A bar redrawn in place on one line of ``stream``; ``render(now)`` is its text."""

    def __init__(
        self, stream: TextIO, label: str, clock: Callable[[], float], interval: float
    ) -> None:
        self.stream = stream
        self.label = label
        self.clock = clock
        self.interval = interval
        self.started = clock()
        self.drawn_at: float | None = None

    def render(self, now: float) -> str:
        raise NotImplementedError

    def _due(self, now: float) -> bool:
        return self.drawn_at is None or now - self.drawn_at >= self.interval

    def _draw(self, now: float, end: str = "") -> None:
        self.stream.write("\r" + self.render(now) + "\x1b[K" + end)
        self.stream.flush()

    def close(self) -> None:
        if self.drawn_at is not None:
            self._draw(self.clock(), "\n")
            self.drawn_at = None

    def _rate(self, amount: int, now: float) -> str:
        return f"{_size(amount / max(now - self.started, 1e-6))}/s"


def _bar(share: float) -> str:
    filled = int(share * WIDTH)
    return "[" + "#" * filled + "." * (WIDTH - filled) + "]"


class ProgressBar(_Line):
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
        super().__init__(stream, label, clock, interval)
        self.threshold = threshold
        self.done = 0
        self.total: int | None = None

    def update(self, done: int, total: int | None = None) -> None:
        self.done, self.total = done, total
        if max(total or 0, done) <= self.threshold:
            return
        now = self.clock()
        if self._due(now) or done == total:
            self.drawn_at = now
            self._draw(now)

    def render(self, now: float) -> str:
        rate = self._rate(self.done, now)
        if self.total:
            share = min(self.done / self.total, 1.0)
            amount = f"{_size(self.done)} / {_size(self.total)}"
            return f"{self.label} {_bar(share)} {share:4.0%} {amount} {rate}"
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


class BatchBar(_Line):
    """Progress of a batch publish: messages acknowledged and bytes sent.

    Drawn only once the batch has run for ``delay`` seconds (a short one never shows a
    bar), then at most ten times a second. The share is of the bytes when their total is
    known, else of the messages; without either total it shows counts and the rate.
    ``clear()`` takes the bar off the line before a result is printed to the same
    terminal; the next update draws it again.
    """

    def __init__(
        self,
        stream: TextIO,
        label: str,
        *,
        total_messages: int | None = None,
        total_bytes: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        interval: float = 0.1,
        delay: float = 1.0,
    ) -> None:
        super().__init__(stream, label, clock, interval)
        self.total_messages = total_messages
        self.total_bytes = total_bytes
        self.delay = delay
        self.shown = False  # the bar is on the line now
        self.messages = 0
        self.sent = 0

    def update(self, messages: int, sent: int) -> None:
        self.messages, self.sent = messages, sent
        now = self.clock()
        if now - self.started < self.delay:
            return
        if self._due(now) or not self.shown:
            self.drawn_at = now
            self.shown = True
            self._draw(now)

    def clear(self) -> None:
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.shown = False

    def close(self) -> None:
        super().close()
        self.shown = False

    def render(self, now: float) -> str:
        count = f"{self.messages}" + (
            f"/{self.total_messages}" if self.total_messages is not None else ""
        )
        amount = _size(self.sent) + (
            f" / {_size(self.total_bytes)}" if self.total_bytes is not None else ""
        )
        if self.total_bytes:
            share: float | None = min(self.sent / self.total_bytes, 1.0)
        elif self.total_messages:
            share = min(self.messages / self.total_messages, 1.0)
        else:
            share = None
        text = f"{count} messages, {amount} {self._rate(self.sent, now)}"
        if share is None:
            return f"{self.label} {text}"
        return f"{self.label} {_bar(share)} {share:4.0%} {text}"


class NoBatchBar:
    def update(self, messages: int, sent: int) -> None:
        pass

    def clear(self) -> None:
        pass

    def close(self) -> None:
        pass
