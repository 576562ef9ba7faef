"""A clock a test moves by hand, for the core's ``clock=`` arguments."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self, start: datetime = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)
