"""The live service's connection deadlines (``http.ConnectionLimits.sweep``): a request
head that does not arrive in time is refused (a slow-loris), an idle keep-alive
connection is closed, and neither cuts a reader that waits for a message."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator

import pytest

from tests.support.live_process import LiveProcess, live_service

HEAD_SECONDS, IDLE_SECONDS = 1, 2
SWEEP = 0.25  # a quarter of the shorter timeout: a deadline fires at most this late


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveProcess]:
    yield from live_service(
        tmp_path_factory,
        ZOSCII_HEADER_TIMEOUT_SECONDS=str(HEAD_SECONDS),
        ZOSCII_LIVE_IDLE_TIMEOUT_SECONDS=str(IDLE_SECONDS),
    )


def connect(live: LiveProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", live.port), timeout=15)


def read_until_closed(sock: socket.socket) -> tuple[bytes, float]:
    """Everything the service sends until it closes, and when it closed (monotonic)."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data, time.monotonic()


def read_reply(sock: socket.socket) -> bytes:
    """One whole reply (its head and its Content-Length of body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed after {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?i)content-length: *(\d+)", head)[1])  # type: ignore[index]
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, f"closed after {data!r}"
        body += chunk
    return head + b"\r\n\r\n" + body


def test_a_request_head_that_does_not_arrive_in_time_is_refused(live: LiveProcess) -> None:
    with connect(live) as sock:
        started = time.monotonic()
        sock.sendall(b"GET /?action=fetch&q=slow HTTP/1.1\r\nHost: t\r\n")  # never ends
        data, closed = read_until_closed(sock)
    assert data.startswith(b"HTTP/1.1 408 "), data
    assert b"Request head not received in time." in data
    assert HEAD_SECONDS <= closed - started < HEAD_SECONDS + SWEEP + 1.5


def test_an_idle_keep_alive_connection_is_closed(live: LiveProcess) -> None:
    with connect(live) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        answered = time.monotonic()
        data, closed = read_until_closed(sock)
    assert data.startswith(b"HTTP/1.1 200 "), data
    assert data.count(b"HTTP/1.1") == 1  # one answer, then nothing until the close
    assert IDLE_SECONDS - 0.1 <= closed - answered < IDLE_SECONDS + SWEEP + 1.5


def test_a_waiting_reader_outlives_both_deadlines(live: LiveProcess) -> None:
    """A long-poll of 4 s: longer than the head and the idle deadline; answered when its
    wait ends, and the connection serves the next request (with a message) after it."""
    (first,) = live.publish("patient", b"first")
    wait = IDLE_SECONDS + 2
    with connect(live) as sock:
        started = time.monotonic()
        sock.sendall(
            f"GET /?action=fetch&q=patient&after={first}&wait={wait} HTTP/1.1\r\n"
            "Host: t\r\n\r\n".encode()
        )
        reply = read_reply(sock)
        assert reply.startswith(b"HTTP/1.1 200 "), reply
        assert b"No new messages." in reply
        assert wait - 0.1 <= time.monotonic() - started < wait + 2
        (second,) = live.publish("patient", b"second")
        sock.sendall(
            f"GET /?action=fetch&q=patient&after={first} HTTP/1.1\r\nHost: t\r\n\r\n".encode()
        )
        reply = read_reply(sock)
    assert reply.startswith(b"HTTP/1.1 200 "), reply
    assert second.encode() in reply and reply.endswith(b"second")
