"""gunicorn's workers as the api runs them: connections spread over the processes, and
a deadline for the request head under both (gthread's ``ThreadWorker``; the asgi
worker's ``LoopWorker`` with its protocol ``HeadDeadline``).

Both worker classes (``ThreadWorker`` for ``ZOSCII_API_SERVER=threads``, ``LoopWorker``
for ``loop``) keep their count of open connections where their siblings see it and let
a less busy sibling take a new connection first (``zoscii_api.balance``).

gthread reads the request line and headers with a blocking socket and no timeout once
the first byte is in, so a client that trickles its headers holds a thread for ever
(see ``zoscii_api.deadlines``). This worker gives every request head
``ZOSCII_HEADER_TIMEOUT_SECONDS`` from the moment a thread starts on it (TLS handshake
included); a late one gets 408 and the connection is closed. The body's deadline is the
app's business, as only the app reads it.

It also keeps a busy keep-alive connection on its thread. gthread hands every finished
keep-alive connection back to its main thread, which registers it with the poller,
wakes when the next request comes, and submits it to the pool again: two thread
handoffs and a pipe write per request. Each handoff (a sleeping thread woken, its
caches cold) costs tens of microseconds of CPU: together about a quarter of what the
api spends on a publish (docs/benchmarks.md, "Where a publish's CPU goes"). So a
thread that just answered a client which came back quickly last time waits up to
``ZOSCII_KEEPALIVE_LINGER_MS`` on the socket itself and serves the next request
directly, while enough threads stay free for everyone else; a client that does not
come back within it goes to the poller as before, and is not waited for again until it
is quick again.

HTTP/1 only (gunicorn's default ``http_protocols``): an HTTP/2 connection is served by
one long call and would be cut at the head deadline.
"""

from __future__ import annotations

import asyncio
import errno
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

from gunicorn.asgi.protocol import ASGIProtocol
from gunicorn.workers import gthread
from gunicorn.workers.gasgi import ASGIWorker

from zoscii_api.balance import DEFER_SECONDS, Spread
from zoscii_api.deadlines import Watchdog
from zoscii_api.settings import ApiSettings
from zosciimq.protocol import envelope_bytes

_TIMEOUT_BODY = envelope_bytes(
    "Request head too slow: the request line and headers took too long.", "", []
)
TIMEOUT_REPLY = (
    b"HTTP/1.1 408 Request Timeout\r\n"
    b"Content-Type: application/json\r\n"
    b"Content-Length: " + str(len(_TIMEOUT_BODY)).encode() + b"\r\n"
    b"Connection: close\r\n\r\n" + _TIMEOUT_BODY
)


# Threads a lingering connection must leave free: long polls and new clients get them.
LINGER_RESERVE = 4


class Spreading:
    """A worker's count of open connections, written through to the workers' ``Spread``
    (gunicorn's worker classes count in ``nr_conns``; the master's ``pre_fork`` sets
    ``spread`` and ``spread_slot``)."""

    spread: Spread | None = None
    spread_slot = -1
    _connections = 0

    @property
    def nr_conns(self) -> int:
        return self._connections

    @nr_conns.setter
    def nr_conns(self, value: int) -> None:
        self._connections = value
        if self.spread is not None:
            self.spread.set(self.spread_slot, value)

    def defers(self) -> bool:
        """Whether a sibling with fewer connections should take the next one."""
        spread = self.spread
        return spread is not None and spread.sibling_has_fewer(self.spread_slot, self._connections)


class ThreadWorker(Spreading, gthread.ThreadWorker):
    def accept(self, listener: Any) -> None:
        """Take a new connection, after a sibling with fewer had a moment to take it.
        (The poller's thread waits, not a request: the pool's threads go on.)"""
        if self.defers():
            time.sleep(DEFER_SECONDS)
        super().accept(listener)  # nothing there any more (a sibling took it): EAGAIN, ignored

    def init_process(self) -> None:
        settings = ApiSettings.from_env()
        self.head_timeout = settings.header_timeout_seconds
        self.linger_ms = settings.keepalive_linger_ms
        self.head_watchdog = Watchdog(name="head-deadlines")
        self._busy = 0  # threads inside handle()
        self._busy_lock = threading.Lock()
        super().init_process()

    def handle(self, conn: Any) -> Any:
        """Serve requests on ``conn`` while its client keeps coming back quickly."""
        with self._busy_lock:
            self._busy += 1
        try:
            while True:
                result = self._handle_one(conn)
                if result is not True or not self._linger(conn):
                    return result
        finally:
            with self._busy_lock:
                self._busy -= 1

    def _linger(self, conn: Any) -> bool:
        """Has the next request on ``conn`` arrived within the linger time?

        Only for a connection whose client came back within it last time, and only
        while at least ``LINGER_RESERVE`` threads stay free.
        """
        if not self.linger_ms or not self.alive:
            return False
        quick = not getattr(conn, "zoscii_slow", False)
        if quick and self._busy <= self.cfg.threads - LINGER_RESERVE:
            if conn.parser.unreader.buf.getvalue() or _tls_pending(conn.sock):
                return True  # read ahead already: gthread would serve it at once too
            poller = select.poll()
            poller.register(conn.sock, select.POLLIN)
            if poller.poll(self.linger_ms):
                return True
        conn.zoscii_parked = time.monotonic()  # back to the poller, as gthread does
        return False

    def _came_back(self, conn: Any) -> None:
        """A request on a connection from the poller: was it quick enough to wait for?"""
        parked = getattr(conn, "zoscii_parked", None)
        if parked is not None:
            conn.zoscii_slow = (time.monotonic() - parked) * 1000 > self.linger_ms
            conn.zoscii_parked = None

    def _handle_one(self, conn: Any) -> Any:
        self._came_back(conn)
        deadline = time.monotonic() + self.head_timeout
        self.head_watchdog.watch(conn, lambda: conn.sock, deadline)
        try:
            result = super().handle(conn)
        finally:
            late = self.head_watchdog.forget(conn)
        if late:
            self.log.info(
                "closing %s: request head not complete in %s s", conn.client, self.head_timeout
            )
            if conn.parser is not None:  # an HTTP conversation, not a stalled TLS handshake
                try:
                    conn.sock.sendall(TIMEOUT_REPLY)
                except OSError:
                    pass
            return False
        return result

    def handle_request(self, req: Any, conn: Any) -> Any:
        if self.head_watchdog.forget(conn):  # the head came in just as its time was up
            return False
        return super().handle_request(req, conn)


def _tls_pending(sock: Any) -> bool:
    """Decrypted bytes already read from the socket (poll cannot see them)."""
    pending = getattr(sock, "pending", None)
    return bool(pending and pending())


class LoopWorker(Spreading, ASGIWorker):
    """gunicorn's asgi worker, taking connections one at a time and letting a less busy
    sibling take one first (asyncio's own server accepts up to 100 a wake-up, so one
    process took a whole burst of clients), with the head deadline (``HeadDeadline``)."""

    head_timeout: float

    def init_process(self) -> None:
        self.head_timeout = ApiSettings.from_env().header_timeout_seconds
        super().init_process()

    async def _serve(self) -> None:
        # gunicorn's _serve makes one server per listener with loop.create_server; ours
        # takes its place for those calls (this loop is the worker's own).
        self.loop.create_server = self._create_server
        await super()._serve()

    async def _create_server(
        self,
        protocol_factory: Callable[[], asyncio.Protocol],
        *,
        sock: socket.socket,
        ssl: ssl.SSLContext | None = None,
        **_ignored: Any,
    ) -> Acceptor:
        # gunicorn's factory makes its ASGIProtocol; ours is that with the deadline.
        acceptor = Acceptor(
            self.loop,
            sock,
            lambda: HeadDeadline(self),
            ssl,
            self.defers,
            self.log,
            handshake_timeout=self.head_timeout,
        )
        acceptor.start()
        return acceptor


class HeadDeadline(ASGIProtocol):
    """gunicorn's asgi protocol, with the api's head deadline: a request head must be
    whole within ``ZOSCII_HEADER_TIMEOUT_SECONDS`` of its first byte, else 408 and the
    connection closed, as under ``ThreadWorker`` (and a TLS handshake within the same
    time: ``Acceptor``). gunicorn's own timers do not cover it: its keep-alive timer
    cuts a connection idle between requests (closed, no answer), but not one whose
    first head trickles in, which held its connection for as long as it kept sending.

    A connection is between requests from its start and from each request's end to
    the next head (``_on_message_complete``, ``_on_headers_complete``: gunicorn's
    parser calls them, both parsers); the first byte it receives then starts the clock.
    An idle connection is gunicorn's keep-alive business, not this deadline's."""

    worker: LoopWorker
    _head_timer: asyncio.TimerHandle | None = None
    _between_requests = True
    _heads = 0  # request heads completed on the connection

    def data_received(self, data: bytes) -> None:
        if not (self._between_requests and self._head_timer is None and data):
            super().data_received(data)
            return
        heads = self._heads
        super().data_received(data)
        # The clock starts only for a head these bytes began and did not finish (most
        # heads come whole in one read: no timer to arm and cancel for them).
        if self._heads == heads and self._between_requests and not self._closed:
            self._head_timer = self.worker.loop.call_later(
                self.worker.head_timeout, self._head_too_slow
            )

    @classmethod
    def _check_h1c_protocol_available(cls) -> bool:
        # gunicorn keeps what it finds out about its C parser on the class it is asked
        # through, then reads it from ASGIProtocol when it picks a parser: asked through
        # this subclass, ``http_parser = "auto"`` took the Python parser for good, with
        # gunicorn_h1c installed. Asked through ASGIProtocol, the answer is where it is read.
        return bool(ASGIProtocol._check_h1c_protocol_available())

    def _on_headers_complete(self) -> bool:
        self._between_requests = False
        self._heads += 1
        self._cancel_head_timer()
        return bool(super()._on_headers_complete())

    def _on_message_complete(self) -> None:
        self._between_requests = True
        super()._on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if self._closed:
            return
        if not self._awaiting_request:  # a head read ahead while the last one is answered
            self._head_timer = self.worker.loop.call_later(
                self.worker.head_timeout, self._head_too_slow
            )
            return
        self.log.info(
            "closing a connection: request head not complete in %s s", self.worker.head_timeout
        )
        self.transport.write(TIMEOUT_REPLY)
        self._close_transport()
        self._request_ready.set()  # (as gunicorn's keep-alive timeout: the loop sees it closed)


class Acceptor:
    """One listening socket's accepts on an event loop, one connection a wake-up, each
    given to ``protocol_factory``'s protocol as ``create_server`` would. Has the two
    methods of an ``asyncio.Server`` that gunicorn calls (``close``, ``wait_closed``)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        protocol_factory: Callable[[], asyncio.Protocol],
        tls: ssl.SSLContext | None,
        defers: Callable[[], bool],
        log: Any,
        *,
        handshake_timeout: float | None = None,
    ) -> None:
        self.loop, self.sock, self.factory, self.tls = loop, sock, protocol_factory, tls
        self.defers, self.log = defers, log
        self.handshake_timeout = handshake_timeout
        self._deferred = False
        self._closed = False
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self.sock.setblocking(False)
        self.loop.add_reader(self.sock.fileno(), self._readable)

    def _pause(self, seconds: float) -> None:
        self.loop.remove_reader(self.sock.fileno())
        self._timer = self.loop.call_later(seconds, self._resume)

    def _resume(self) -> None:
        self._timer = None
        if not self._closed:
            self.start()

    def _readable(self) -> None:
        if not self._deferred and self.defers():
            self._deferred = True  # once: a busy sibling does not keep it waiting
            self._pause(DEFER_SECONDS)
            return
        self._deferred = False
        try:
            conn, _ = self.sock.accept()
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            return  # a sibling took it, or the client left
        except OSError as exc:
            if exc.errno not in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                raise
            self.log.error("cannot accept a connection (%s); trying again in 1 s", exc)
            self._pause(1.0)  # as asyncio's own server does
            return
        conn.setblocking(False)
        task = self.loop.create_task(
            self.loop.connect_accepted_socket(
                self.factory,
                conn,
                ssl=self.tls,
                ssl_handshake_timeout=self.handshake_timeout if self.tls else None,
            )
        )
        task.add_done_callback(self._connected)

    def _connected(self, task: asyncio.Task[Any]) -> None:
        if not task.cancelled() and task.exception() is not None:  # a failed TLS handshake
            self.log.debug("connection not set up: %s", task.exception())

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        else:
            self.loop.remove_reader(self.sock.fileno())

    async def wait_closed(self) -> None:
        return None
