"""The deadline machinery on its own: a controllable clock and real sockets."""

from __future__ import annotations

import io
import socket

import pytest

from zoscii_api.deadlines import ClientTooSlow, DeadlineInput, Watchdog


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_watchdog_shuts_the_reading_side_when_the_deadline_passes() -> None:
    clock = Clock()
    watchdog = Watchdog(clock)
    ours, theirs = socket.socketpair()
    with ours, theirs:
        watchdog.watch("conn", lambda: ours, deadline=110.0)
        assert watchdog.sweep() == pytest.approx(10.0)
        assert not watchdog.fired("conn")
        clock.now = 110.0
        assert watchdog.sweep() is None
        assert watchdog.fired("conn")
        ours.settimeout(5)
        assert ours.recv(10) == b""  # end-of-file at once, though the peer sent nothing
        ours.sendall(b"408")  # the write side stays open for the answer
        assert theirs.recv(10) == b"408"
        assert watchdog.forget("conn") is True
        assert watchdog.forget("conn") is False


def test_a_forgotten_deadline_never_fires() -> None:
    clock = Clock()
    watchdog = Watchdog(clock)
    ours, theirs = socket.socketpair()
    with ours, theirs:
        watchdog.watch("conn", lambda: ours, deadline=101.0)
        assert watchdog.forget("conn") is False
        clock.now = 200.0
        watchdog.sweep()
        theirs.sendall(b"still open")
        assert ours.recv(20) == b"still open"


def test_the_body_deadline_grows_with_the_bytes_received() -> None:
    """60 s plus one second per 500 bytes: and reads are sized so that a client at the
    minimum rate can deliver each one in half the time it has left."""
    clock = Clock()
    watchdog = Watchdog(clock)
    ours, theirs = socket.socketpair()
    with ours, theirs:
        body = DeadlineInput(
            io.BytesIO(b"x" * 100_000), ours, watchdog, timeout=60, min_rate=500, clock=clock
        )
        assert body._piece(65536) == 15_000  # 500 B/s * 60 s / 2
        assert len(body.read(65536)) == 15_000
        clock.now += 10
        # deadline 100 + 60 + 30 = 190; 80 s left: up to 20,000 bytes
        assert body._piece(65536) == 20_000
        assert watchdog.sweep() == pytest.approx(80.0)
        clock.now = 190.0
        watchdog.sweep()
        with pytest.raises(ClientTooSlow, match="at least 500 bytes per second"):
            body.read(100)
        assert body.close() is False  # already forgotten when it raised
