"""HTTP/1.1 connections on the event loop: one small object per connection, no task.

A waiting reader must cost a socket and a few kilobytes, not a thread nor a coroutine:
a connection is an ``asyncio.Protocol`` whose requests are parsed by httptools (llhttp,
C) and handed to the app (``app.LiveApp.handle``) as they complete. The app answers at
once, or later (a long-poll woken by a publish, a stream), by calling ``respond`` or
``start_stream``/``write``. Requests are answered one at a time, in order (a pipelined
request waits in ``_queued`` until the one before it is answered). Keep-alive as HTTP/1.1
says; an idle connection is closed after ``idle_timeout``, a request head that does not
arrive within ``header_timeout`` (a slow-loris) too.

A WebSocket upgrade hands the connection's bytes to the websockets library's sans-I/O
protocol (``stream.WebSocket``); bodies are not taken (every request here is a GET).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import unquote_to_bytes

import httptools

from zoscii_live.replies import envelope, head

if TYPE_CHECKING:
    from zoscii_live.stream import WebSocket

log = logging.getLogger(__name__)

SEND_CHUNK = 256 << 10  # a large message is read and sent in pieces of this size
MAX_QUEUED = 8  # pipelined requests held while one is answered; past it reading pauses
MAX_BODY = 64 << 10  # nothing here takes a body; a small one is read and ignored
MAX_HEADERS = 100
MAX_HEADER_BYTES = 16 << 10


@dataclass(slots=True)
class Request:
    method: str
    path: str
    query: dict[str, bytes]
    headers: dict[str, str]  # lower-case names; a repeated header: the first
    keep_alive: bool
    upgrade: bool = False
    request_id: str = ""
    peer: str = ""
    body_bytes: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def text(self, name: str) -> str | None:
        value = self.query.get(name)
        return None if value is None else value.decode("latin-1")


class Handler(Protocol):
    def handle(self, conn: Connection, request: Request) -> None: ...


class Connection(asyncio.Protocol):
    """One client connection. ``busy``: a request is being answered (or a stream runs)."""

    __slots__ = (
        "_building",
        "_drained",
        "_header_bytes",
        "_parser",
        "_paused",
        "_queued",
        "_url",
        "app",
        "busy",
        "closed",
        "due",
        "due_head",
        "kind",
        "loop",
        "on_close",
        "peer",
        "request",
        "server",
        "streaming",
        "transport",
        "websocket",
    )

    def __init__(self, server: ConnectionLimits, app: Handler) -> None:
        self.server = server
        self.app = app
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.peer = ""
        # None once a stream runs: it reads no more requests (keep_only_the_streams_part)
        self._parser: httptools.HttpRequestParser | None = httptools.HttpRequestParser(self)
        self._url = b""
        self._building: dict[str, str] = {}
        self._header_bytes = 0
        # a list, not a deque: an empty deque is 0.7 KiB of every connection, and at most
        # MAX_QUEUED + 1 requests wait here
        self._queued: list[Request] = []
        self.request: Request | None = None  # the one being answered
        self.busy = False
        self.closed = False
        self.streaming = False
        self.kind = "http"  # what the connection is doing, for metrics: http, sse, ...
        self.on_close: Callable[[], None] | None = None  # a waiter's or stream's clean-up
        self.websocket: WebSocket | None = None
        # When the connection is cut unless something happens (loop time; 0: never), and
        # whether that is the request head's deadline (else the keep-alive idle one).
        # ConnectionLimits sweeps them each second: a timer per request, armed and
        # cancelled on every long-poll, cost more than the rest of its dispatch.
        self.due = 0.0
        self.due_head = False
        self._paused = False
        self._drained: asyncio.Future[None] | None = None

    # --- asyncio.Protocol ---------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = peer[0] if isinstance(peer, tuple) else ""
        if not self.server.admit(self):
            transport.write(
                head(503, {"Content-Type": "application/json"}, length=None, keep_alive=False)
                + envelope(error="Too many connections; try again later.")
            )
            transport.close()
            self.closed = True
            return
        self._arm_idle()

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        if self.websocket is not None:
            self.websocket.received(data)
            return
        if self.request is not None and self.request.upgrade:  # the handshake is pending
            self.request.extra["rest"] = self.request.extra.get("rest", b"") + data
            return
        if self._parser is None:  # an SSE stream: what its client sends is dropped
            return
        self._cancel_idle()
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade as exc:
            offset = exc.args[0] if exc.args else len(data)
            self._upgrade(data[offset:])
        except httptools.HttpParserError as exc:
            self._refuse(400, f"Malformed request: {exc}")
        except _TooLarge as exc:
            self._refuse(431, str(exc))

    def eof_received(self) -> bool | None:
        if self.websocket is not None:
            self.websocket.received_eof()
        return None  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.due, self.due_head = 0.0, False
        self._queued.clear()
        self._wake_drained()
        callback, self.on_close = self.on_close, None
        if callback is not None:
            callback()
        self.server.release(self)

    def pause_writing(self) -> None:  # the transport's buffer is over its high mark
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake_drained()

    def _wake_drained(self) -> None:
        waiter, self._drained = self._drained, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def drain(self) -> None:
        """Until the transport took what was written (below its high mark), or closed."""
        while self._paused and not self.closed:
            if self._drained is None:
                self._drained = self.loop.create_future()
            await self._drained

    # --- httptools callbacks --------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._url = b""
        self._building = {}
        self._header_bytes = 0
        if not self.due_head:
            self.due, self.due_head = self.loop.time() + self.server.header_timeout, True

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._count(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value))
        if len(self._building) >= MAX_HEADERS:
            raise _TooLarge("Too many request headers.")
        key = name.decode("latin-1").lower()
        if key not in self._building:
            self._building[key] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        if self.due_head:
            self.due, self.due_head = 0.0, False
        parser = self._parser
        assert parser is not None  # the parser is what calls this
        try:
            url = httptools.parse_url(self._url)
        except httptools.HttpParserInvalidURLError:
            raise httptools.HttpParserError("invalid request target") from None
        # The request's now: not kept a second time by the connection while it waits.
        headers, self._building, self._url = self._building, {}, b""
        request = Request(
            method=parser.get_method().decode("ascii", "replace"),
            path=url.path.decode("latin-1") if url.path else "/",
            query=parse_query(url.query or b""),
            headers=headers,
            keep_alive=parser.should_keep_alive(),
            upgrade=parser.should_upgrade(),
            peer=self.peer,
        )
        if request.upgrade and url.query:
            request.extra["raw_query"] = url.query.decode("latin-1")
        self.request_pending(request)

    def on_body(self, body: bytes) -> None:
        request = self._queued[-1] if self._queued else self.request
        if request is not None:
            request.body_bytes += len(body)
            if request.body_bytes > MAX_BODY:
                raise _TooLarge("This service takes no request body: send GET.")

    def on_message_complete(self) -> None:
        pass

    # --- requests -----------------------------------------------------------------------
    def request_pending(self, request: Request) -> None:
        if request.upgrade:
            self._queued.append(request)  # handled in _upgrade, once the parser stops
            return
        self._queued.append(request)
        if len(self._queued) > MAX_QUEUED and self.transport is not None:
            self.transport.pause_reading()
        self._next()

    def _next(self) -> None:
        if self.busy or self.closed or not self._queued:
            if not self.busy and not self._queued and not self.closed:
                self._arm_idle()
            return
        request = self._queued.pop(0)
        if self.transport is not None and len(self._queued) <= MAX_QUEUED // 2:
            self.transport.resume_reading()
        self.request = request
        self.busy = True
        try:
            self.app.handle(self, request)
        except Exception:
            log.exception("unexpected error answering %s %s", request.method, request.path)
            if self.busy and not self.streaming:
                self.respond(
                    500,
                    {"Content-Type": "application/json"},
                    envelope(error="Internal server error."),
                )

    def _upgrade(self, rest: bytes) -> None:
        request = self._queued.pop() if self._queued else None
        if request is None or self.busy or self._queued:
            self._refuse(400, "An upgrade must be the only request on its connection.")
            return
        self.request = request
        self.busy = True
        request.extra["rest"] = rest
        self.app.handle(self, request)

    def respond(
        self,
        status: int,
        headers: dict[str, str],
        body: bytes,
        *,
        close: bool = False,
    ) -> None:
        """Answer the current request in full; the next one (if any) is served after."""
        request, transport = self.request, self.transport
        if request is None or transport is None or self.closed:
            return
        # after an upgrade the parser reads no more requests: an answer ends the connection
        keep_alive = request.keep_alive and not close and not request.upgrade
        headers["X-Request-ID"] = request.request_id
        headers.update(request.extra.get("cors", ()))
        data = head(status, headers, length=len(body), keep_alive=keep_alive)
        if request.method != "HEAD" and body:
            # One write for a small answer; a large one is not copied into the head.
            if len(body) <= 16 << 10:
                transport.write(data + body)
            else:
                transport.writelines((data, body))
        else:
            transport.write(data)
        self.finish(keep_alive)

    def respond_prefixed(self, prefix: bytes, body: bytes) -> None:
        """``respond`` with a head whose common part is built (``replies.prefix_of``):
        one answer written to many readers costs each a few concatenations."""
        request, transport = self.request, self.transport
        if request is None or transport is None or self.closed:
            return
        cors = request.extra.get("cors")
        data = [prefix, b"X-Request-ID: ", request.request_id.encode("ascii"), b"\r\n"]
        if cors:
            data.extend(f"{name}: {value}\r\n".encode("latin-1") for name, value in cors.items())
        data.append(b"Content-Length: %d\r\n" % len(body))
        data.append(b"\r\n" if request.keep_alive else b"Connection: close\r\n\r\n")
        if request.method != "HEAD":
            data.append(body)
        transport.write(b"".join(data))
        self.finish(request.keep_alive)

    def finish(self, keep_alive: bool) -> None:
        """The current request is answered (its bytes written or queued)."""
        self.request = None
        self.busy = False
        self.on_close = None
        if not keep_alive:
            self.close()
            return
        self._next()

    async def send_body(
        self,
        headers: dict[str, str],
        length: int,
        prefix: bytes,
        file: Any,
        start: int,
        stop: int,
        suffix: bytes,
        hub: Any,
    ) -> None:
        """Answer with ``prefix``, the file's bytes ``start:stop`` and ``suffix``, read in
        pieces (in the thread pool) as fast as the reader takes them: a large message is
        never held whole."""
        request, transport = self.request, self.transport
        if request is None or transport is None or self.closed:
            return
        headers["X-Request-ID"] = request.request_id
        headers.update(request.extra.get("cors", ()))
        transport.write(head(200, headers, length=length, keep_alive=request.keep_alive) + prefix)
        if request.method != "HEAD":
            position, fd = start, file.fileno()
            while position < stop and not self.closed:
                chunk = await hub.run(os.pread, fd, min(SEND_CHUNK, stop - position), position)
                if not chunk:  # the file shrank: the length sent cannot be kept
                    self.abort()
                    return
                transport.write(chunk)
                position += len(chunk)
                await self.drain()
            self.write(suffix)
        self.finish(request.keep_alive)

    def start_stream(self, status: int, headers: dict[str, str], first: bytes) -> None:
        """A response whose body goes on until the connection closes (SSE)."""
        request, transport = self.request, self.transport
        if request is None or transport is None or self.closed:
            return
        headers["X-Request-ID"] = request.request_id
        headers.update(request.extra.get("cors", ()))
        self.streaming = True
        transport.write(head(status, headers, length=None, keep_alive=False) + first)
        self.keep_only_the_streams_part()

    def keep_only_the_streams_part(self) -> None:
        """A stream reads no more requests once it started (a WebSocket's frames go to
        ``websocket``): its parser goes, with the bound methods it holds (about 0.9 KiB
        of each of ten thousand readers' memory), and what its request no longer needs
        (``keep_only_the_answers_part``)."""
        self._parser = None
        self.keep_only_the_answers_part()

    def keep_only_the_answers_part(self) -> None:
        """A request answered later (a stream, or a long-poll parked on its queue) needs
        no more of itself than what its answer's head says: method, keep-alive, request
        id, CORS headers. A copy without its headers, query and other extras (about half
        a kilobyte to a kilobyte and a half less of each waiting reader's memory)."""
        request = self.request
        if request is not None:
            cors = request.extra.get("cors")
            self.request = Request(
                method=request.method,
                path=request.path,
                query={},
                headers={},
                keep_alive=request.keep_alive,
                upgrade=request.upgrade,
                request_id=request.request_id,
                peer=request.peer,
                extra={} if cors is None else {"cors": cors},
            )

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.closed:
            self.transport.write(data)

    def pending(self) -> int:
        """Bytes written and not yet taken by the kernel (a slow reader's backlog)."""
        transport = self.transport
        return transport.get_write_buffer_size() if transport is not None else 0

    def close(self) -> None:
        """Close after what is written is sent (cut after a grace, for a reader that
        never reads: its buffer must not stay)."""
        if self.closed or self.transport is None:
            return
        self.closed = True
        transport = self.transport
        transport.close()
        if transport.get_write_buffer_size():
            self.loop.call_later(self.server.header_timeout, transport.abort)

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    # --- limits -------------------------------------------------------------------------
    def _count(self, size: int) -> None:
        self._header_bytes += size
        if self._header_bytes > MAX_HEADER_BYTES:
            raise _TooLarge("Request head too large.")

    def _refuse(self, status: int, reason: str) -> None:
        if self.transport is None or self.closed:
            return
        if not self.streaming and not self.busy:
            body = envelope(error=reason)
            self.transport.write(
                head(
                    status, {"Content-Type": "application/json"}, length=len(body), keep_alive=False
                )
                + body
            )
        self.close()

    def expire(self) -> None:
        """Its deadline passed (``ConnectionLimits.sweep``): a request head that did not
        arrive in time is refused, an idle keep-alive connection closed."""
        head, self.due, self.due_head = self.due_head, 0.0, False
        if head:
            self._refuse(408, "Request head not received in time.")
        else:
            self.close()

    def _arm_idle(self) -> None:
        if not self.due_head:  # a head on its way keeps its own, shorter, deadline
            self.due = self.loop.time() + self.server.idle_timeout

    def _cancel_idle(self) -> None:
        if not self.due_head:
            self.due = 0.0


class _TooLarge(Exception):
    pass


class ConnectionLimits:
    """Open connections and the timeouts every connection applies: one sweep a second
    (at most a quarter of the shorter timeout) over the open connections cuts those past
    their deadline (``Connection.due``), so a timeout fires up to that much late."""

    def __init__(
        self,
        max_connections: int,
        header_timeout: float,
        idle_timeout: float,
        on_refused: Callable[[], None] = lambda: None,
    ) -> None:
        self.max_connections = max_connections
        self.header_timeout = header_timeout
        self.idle_timeout = idle_timeout
        self.on_refused = on_refused
        self.open: set[Connection] = set()
        self.sweep_every = min(1.0, header_timeout / 4, idle_timeout / 4)
        self._sweeper: asyncio.TimerHandle | None = None

    def admit(self, conn: Connection) -> bool:
        if len(self.open) >= self.max_connections:
            self.on_refused()
            return False
        self.open.add(conn)
        if self._sweeper is None:
            self._sweeper = conn.loop.call_later(self.sweep_every, self.sweep, conn.loop)
        return True

    def sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        """Expire the connections past their deadline; again in ``sweep_every`` while
        any is open (10,000 connections: under a millisecond)."""
        now = loop.time()
        for conn in [c for c in self.open if 0 < c.due <= now]:
            conn.expire()
        self._sweeper = loop.call_later(self.sweep_every, self.sweep, loop) if self.open else None

    def release(self, conn: Connection) -> None:
        self.open.discard(conn)


def parse_query(raw: bytes) -> dict[str, bytes]:
    """The query string, percent-decoded to bytes; a repeated name: the last (as PHP).

    A short one is remembered: a queue's waiting readers ask again with the same query
    (its ``after`` the name all of them were just answered), ten thousand times a round.
    One with a credential (``access_token``) is not kept."""
    if not raw:
        return {}
    if len(raw) <= MAX_REMEMBERED_QUERY and b"access_token" not in raw:
        return dict(_remembered_query(raw))
    return dict(_pairs(raw))


MAX_REMEMBERED_QUERY = 256


@functools.lru_cache(maxsize=256)
def _remembered_query(raw: bytes) -> tuple[tuple[str, bytes], ...]:
    return _pairs(raw)


def _pairs(raw: bytes) -> tuple[tuple[str, bytes], ...]:
    pairs = []
    for pair in raw.split(b"&"):
        if not pair:
            continue
        key, _, value = pair.partition(b"=")
        pairs.append((_decode(key).decode("latin-1"), _decode(value)))
    return tuple(pairs)


def _decode(raw: bytes) -> bytes:
    """``+`` and ``%XX`` decoded (most values have neither: a message name, a number)."""
    if b"%" not in raw and b"+" not in raw:
        return raw
    return unquote_to_bytes(raw.replace(b"+", b" "))
