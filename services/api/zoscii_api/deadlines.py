"""Deadlines for slow clients: a thread blocked on a late client's socket is set free.

gunicorn's gthread worker waits 5 s for a new connection's first byte without using a
thread, but from then on reads the request head and body from a blocking socket with
no timeout. A client that sends a byte every few seconds (slowloris) holds a worker
thread for as long as it likes, and a few dozen such clients hold them all. A socket
timeout does not help: gunicorn reads in loops that start a new wait at every byte.

So a watchdog thread keeps the deadlines, and when one passes it shuts the read side
of that socket: the blocked read returns end-of-file at once, the request fails, the
thread is free. The rule is Apache mod_reqtimeout's:

* the request head (line and headers) must be complete ``ZOSCII_HEADER_TIMEOUT_SECONDS``
  after a thread starts reading it (``zoscii_api.gunicorn_worker``);
* the body gets ``ZOSCII_BODY_TIMEOUT_SECONDS``, plus one second for every
  ``ZOSCII_BODY_MIN_RATE`` bytes received: a client keeping above the minimum rate
  never runs out of time, one sending a byte now and then soon does.

The answer to a late body is 408 with the envelope; the connection is closed. Sending
the reply to a slow reader is not covered: see SECURITY.md (a buffering proxy).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from zosciimq.errors import ClientTooSlow

log = logging.getLogger(__name__)

SocketOf = Callable[[], socket.socket | None]


@dataclass
class _Entry:
    deadline: float
    socket_of: SocketOf
    fired: bool = False


class Watchdog:
    """Shuts the read side of sockets whose deadline has passed.

    One thread, started on first use, that looks once a second (or at the next
    deadline, if sooner) and is never woken by a request: waking it per request costs
    the request a GIL hand-over. So a deadline may be acted on up to a second late.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic, name: str = "deadlines"):
        self.clock = clock
        self.name = name
        self._entries: dict[object, _Entry] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def watch(self, key: object, socket_of: SocketOf, deadline: float) -> None:
        """Watch (or move the deadline of) ``key``; ``socket_of`` gives its current socket
        (a TLS handshake replaces it)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self._entries[key] = _Entry(deadline, socket_of)
            elif not entry.fired:
                entry.deadline = deadline
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()

    def fired(self, key: object) -> bool:
        with self._lock:
            entry = self._entries.get(key)
            return entry is not None and entry.fired

    def forget(self, key: object) -> bool:
        """Stop watching ``key``; True when its deadline had already fired."""
        with self._lock:
            entry = self._entries.pop(key, None)
            return entry is not None and entry.fired

    def sweep(self) -> float | None:
        """Fire every passed deadline; the seconds until the next one (None: nothing)."""
        with self._lock:
            now = self.clock()
            upcoming = None
            for entry in self._entries.values():
                if entry.fired:
                    continue
                if entry.deadline <= now:
                    entry.fired = True
                    _shut_reading(entry.socket_of())
                else:
                    left = entry.deadline - now
                    upcoming = left if upcoming is None else min(upcoming, left)
            return upcoming

    def _run(self) -> None:
        while True:
            upcoming = self.sweep()
            time.sleep(1.0 if upcoming is None else min(upcoming + 0.01, 1.0))


def _shut_reading(sock: socket.socket | None) -> None:
    """The blocked reader gets end-of-file; the write side stays open for the 408.

    The plain socket method also on a TLS socket: ``SSLSocket.shutdown`` would drop its
    TLS state under the feet of the thread still using it.
    """
    if sock is None:
        return
    try:
        socket.socket.shutdown(sock, socket.SHUT_RD)
    except OSError:
        pass  # already closed: nothing is blocked on it


def body_due(started: float, received: int, *, timeout: float, min_rate: float) -> float:
    """When a body must have arrived, by the rule of both servers: ``timeout`` seconds
    from its start, plus a second for every ``min_rate`` bytes received so far."""
    return started + timeout + received / min_rate


def body_too_slow(timeout: float, min_rate: float) -> ClientTooSlow:
    return ClientTooSlow(
        f"Request body too slow: allowed {timeout:g} s and at least"
        f" {min_rate:g} bytes per second; nothing was stored."
    )


class DeadlineInput:
    """``wsgi.input`` that must arrive by a deadline growing with what has arrived."""

    def __init__(
        self,
        raw: Any,
        sock: socket.socket,
        watchdog: Watchdog,
        *,
        timeout: float,
        min_rate: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.raw, self.sock, self.watchdog = raw, sock, watchdog
        self.timeout, self.min_rate, self.clock = timeout, min_rate, clock
        self.started = clock()
        self.received = 0
        self.done = False
        self._arm()

    def read(self, size: int | None = -1) -> bytes:
        return self._guarded(self.raw.read, self._piece(size))

    def readline(self, size: int | None = -1) -> bytes:
        return self._guarded(self.raw.readline, self._piece(size))

    def readlines(self, hint: int | None = -1) -> list[bytes]:
        lines = []
        while line := self.readline():
            lines.append(line)
        return lines

    def __iter__(self) -> Iterator[bytes]:
        while line := self.readline():
            yield line

    def close(self) -> bool:
        """Stop the clock; True when the deadline had fired."""
        self.done = True
        return self.watchdog.forget(self)

    def _piece(self, size: int | None) -> int:
        """At most what the client would send at the minimum rate in half its time left.

        gunicorn returns from a read only when it has every byte asked for, and the
        deadline can only grow between reads: asked for too much at once, a client
        well above the minimum rate would still run out of time.
        """
        if self.done:
            return -1 if size is None else size
        slack = self._due() - self.clock()
        piece = max(1, int(self.min_rate * slack / 2))
        return piece if size is None or size < 0 else min(size, piece)

    def _guarded(self, read: Callable[[Any], bytes], size: Any) -> bytes:
        if self.done:
            return read(size)
        try:
            data = read(size)
        except Exception:
            if self.watchdog.fired(self):
                raise self._too_slow() from None
            raise
        if self.watchdog.fired(self):
            raise self._too_slow()
        self.received += len(data)
        self._arm()
        return data

    def _arm(self) -> None:
        self.watchdog.watch(self, lambda: self.sock, self._due())

    def _due(self) -> float:
        return body_due(self.started, self.received, timeout=self.timeout, min_rate=self.min_rate)

    def _too_slow(self) -> ClientTooSlow:
        log.info(
            "request body too slow: %d bytes in %.0f s", self.received, self.clock() - self.started
        )
        self.close()
        return body_too_slow(self.timeout, self.min_rate)


@contextmanager
def body_deadline(
    environ: dict[str, Any], watchdog: Watchdog, *, timeout: float, min_rate: float
) -> Iterator[None]:
    """Put ``wsgi.input`` under a deadline while the body is read (gunicorn only: the
    socket comes from ``gunicorn.socket``); the clock stops when the block ends."""
    sock = environ.get("gunicorn.socket")
    if not isinstance(sock, socket.socket) or not _has_body(environ):
        yield
        return
    guarded = DeadlineInput(
        environ["wsgi.input"], sock, watchdog, timeout=timeout, min_rate=min_rate
    )
    environ["wsgi.input"] = guarded
    try:
        yield
    finally:
        guarded.close()


def _has_body(environ: Mapping[str, Any]) -> bool:
    length = environ.get("CONTENT_LENGTH")
    chunked = "chunked" in str(environ.get("HTTP_TRANSFER_ENCODING", "")).lower()
    return chunked or (bool(length) and length != "0")
