"""Streams: a queue followed live over Server-Sent Events or a WebSocket.

A stream starts after a pointer (``after``, or for SSE the browser's ``Last-Event-ID``,
which wins), catches up from the disk with backpressure (it reads the next batch only
once the reader took the last), then joins its queue's follower and receives each round
as one write: the round's events are encoded once for every stream at the same place.

Memory per stream is bounded. While live, a reader whose connection still holds more
than ``ZOSCII_LIVE_MAX_PENDING_BYTES`` unsent is not written to any more: it gets the
reason (SSE: an ``event: disconnect`` whose data says where to resume; WebSocket: a close
frame, code 1008, with the reason) behind what it already has, and the connection closes
(cut after the header timeout if it never reads). It resumes after the last name it
received: a browser's EventSource does so by itself (Last-Event-ID), ``client.stream``
too. Messages over ``ZOSCII_LIVE_MAX_INLINE_BYTES`` travel as a notice (name, size) that
the reader fetches, so no stream holds a message of a gigabyte.

The WebSocket handshake and the frames a client sends are the websockets library's
(sans-I/O: a ``ServerProtocol`` for the handshake, then an open ``Protocol`` for the
frames: pings answered, close handshake); the frames sent here are built once per round
(``replies.ws_message``: a server's frames are not masked).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from websockets.http11 import Request as WsRequest
from websockets.protocol import Protocol, Side
from websockets.server import ServerProtocol

from zoscii_live.follow import Follower, Hub, Item, Reader, first_after, read_items
from zoscii_live.http import Connection, Request
from zoscii_live.metrics import LiveMetrics
from zoscii_live.replies import (
    SSE_HEARTBEAT,
    WS_PING,
    sse_disconnect,
    sse_large,
    sse_message,
    sse_start,
    ws_close,
    ws_message,
    ws_notice,
)
from zosciimq.errors import QueueNotFound

log = logging.getLogger(__name__)
# websockets logs every connection at INFO: ten thousand readers, twenty thousand lines
_QUIET = logging.getLogger(f"{__name__}.websockets")
_QUIET.setLevel(logging.WARNING)

CATCH_UP_MESSAGES = 100
WS_MAX_INCOMING = 64 << 10  # a reader sends nothing but control frames
SSE_HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",  # nginx: pass each event on at once
}
CLOSE_SLOW = 1008  # policy violation
CLOSE_GONE = 4404  # the queue does not exist (any more)
CLOSE_STOPPING = 1001  # going away


class Subscriber(Reader):
    __slots__ = ("conn", "follower", "kind", "position", "streams", "written")

    def __init__(
        self, streams: Streams, follower: Follower, conn: Connection, kind: str, position: str
    ) -> None:
        self.streams = streams
        self.follower = follower
        self.conn = conn
        self.kind = kind  # "sse" or "websocket"
        self.position = position  # the last name written to it
        self.written = False  # messages written since the last heartbeat tick

    def deliver(self, items: list[Item], names: list[str], cache: dict[Any, Any]) -> None:
        start = first_after(names, self.position)
        if start == len(names):
            return
        key = (self.kind, start)
        encoded = cache.get(key)
        if encoded is None:
            encoded = cache[key] = encode(self.kind, items[start:])
        if self.streams.send(self, encoded[0], names[-1]):
            self.sent(cache, self.kind, len(names) - start, encoded[1])

    def fail(self, error: Exception) -> None:
        if isinstance(error, QueueNotFound):
            self.streams.disconnect(self, "queue_not_found", str(error))
        else:
            self.streams.disconnect(self, "error", "The stream failed; resume later.")

    def closed(self) -> None:
        """Its connection closed (``Connection.on_close``: a bound method, a third of a
        closure's size)."""
        self.streams.closed(self)


def encode(kind: str, items: list[Item]) -> tuple[bytes, int]:
    """The events (or frames) of ``items`` and their message bytes."""
    chunks = []
    size = 0
    for item in items:
        size += item.size
        if kind == "sse":
            chunks.append(
                sse_large(item.name, item.size)
                if item.data is None
                else sse_message(item.name, item.data)
            )
        elif item.data is None:
            chunks.append(ws_notice({"event": "large", "name": item.name, "size": item.size}))
        else:
            chunks.append(ws_message(item.name, item.data))
    return b"".join(chunks), size


class WebSocket:
    """The frames a reader sends (pings, the close handshake), through websockets."""

    __slots__ = ("conn", "protocol", "subscriber")

    def __init__(self, conn: Connection, protocol: Protocol) -> None:
        self.conn = conn
        self.protocol = protocol
        self.subscriber: Subscriber | None = None

    def received(self, data: bytes) -> None:
        self.protocol.receive_data(data)
        self._flush()

    def received_eof(self) -> None:
        self.protocol.receive_eof()
        self._flush()

    def _flush(self) -> None:
        self.protocol.events_received()  # a reader's own messages mean nothing here
        for chunk in self.protocol.data_to_send():
            if chunk:
                self.conn.write(chunk)
            else:
                self.conn.close()
        if self.protocol.close_expected():
            self.conn.close()


class Streams:
    def __init__(self, hub: Hub, metrics: LiveMetrics) -> None:
        self.hub = hub
        self.metrics = metrics
        self.max_pending = hub.settings.max_pending_bytes
        self.subscribers: set[Subscriber] = set()

    # --- starting -------------------------------------------------------------------------
    def start_sse(self, conn: Connection, queue: str, after: str) -> None:
        conn.kind = "sse"
        conn.start_stream(200, dict(SSE_HEADERS), sse_start())
        self._follow(conn, queue, after, "sse")

    def start_websocket(self, conn: Connection, request: Request, queue: str, after: str) -> bool:
        """The handshake; False (and an HTTP error written) when it is not one."""
        protocol = ServerProtocol(max_size=WS_MAX_INCOMING, logger=_QUIET)
        # The library reads the handshake from the bytes, as a sans-I/O protocol does:
        # the head httptools parsed is given to it again, as it came.
        target = request.path + (
            "?" + request.extra["raw_query"] if request.extra.get("raw_query") else ""
        )
        lines = [f"GET {target} HTTP/1.1"]
        lines += [f"{name}: {value}" for name, value in request.headers.items()]
        protocol.receive_data(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        handshake = next((e for e in protocol.events_received() if isinstance(e, WsRequest)), None)
        if handshake is None:
            conn.close()
            return False
        response = protocol.accept(handshake)
        protocol.send_response(response)
        for chunk in protocol.data_to_send():
            conn.write(chunk)
        if response.status_code != 101:
            conn.close()
            return False
        conn.streaming = True
        conn.kind = "websocket"
        # The frames that follow are read by a protocol that starts open: the handshake's
        # one keeps its request (every header, parsed) for as long as it lives, with
        # its handshake state about 4.5 KiB of each reader. No extension or subprotocol
        # is offered here, so nothing else was negotiated that the new one must know.
        websocket = WebSocket(conn, Protocol(Side.SERVER, max_size=WS_MAX_INCOMING, logger=_QUIET))
        conn.websocket = websocket
        rest = request.extra.get("rest", b"")
        conn.keep_only_the_streams_part()
        subscriber = self._follow(conn, queue, after, "websocket")
        websocket.subscriber = subscriber
        if rest:
            websocket.received(rest)
        return True

    def _follow(self, conn: Connection, queue: str, after: str, kind: str) -> Subscriber:
        follower = self.hub.follower(queue)
        subscriber = Subscriber(self, follower, conn, kind, after)
        self.subscribers.add(subscriber)
        conn.on_close = subscriber.closed
        self.hub.spawn(self._catch_up(subscriber))
        return subscriber

    async def _catch_up(self, subscriber: Subscriber) -> None:
        """From the disk, batch by batch as the reader takes them, until a read finds
        nothing and no round moved the cursor meanwhile: then live."""
        follower, conn = subscriber.follower, subscriber.conn
        inline = self.hub.settings.max_inline_bytes
        try:
            await self.hub.warm(follower)
            while not conn.closed:
                recent = follower.recent.after(subscriber.position, CATCH_UP_MESSAGES)
                if recent == [] or (recent is None and subscriber.position == follower.cursor):
                    self.hub.add(follower, subscriber)  # caught up: no read, no await since
                    return
                if recent:  # a little behind: from the follower's memory
                    self._write(subscriber, recent)
                    await conn.drain()
                    continue
                before = follower.rounds
                items = await self.hub.run(
                    read_items,
                    self.hub.queues,
                    follower.queue,
                    subscriber.position,
                    CATCH_UP_MESSAGES,
                    inline,
                )
                if conn.closed:
                    return
                if items:
                    self._write(subscriber, items)
                    await conn.drain()
                elif follower.rounds == before:
                    self.hub.add(follower, subscriber)
                    return
        except Exception as exc:
            if not isinstance(exc, QueueNotFound):
                log.error("stream of %s failed: %s", follower.queue, exc)
                self.metrics.errors.labels("stream").inc()
            subscriber.fail(exc)

    def _write(self, subscriber: Subscriber, items: list[Item]) -> None:
        data, size = encode(subscriber.kind, items)
        subscriber.conn.write(data)
        subscriber.position = items[-1].name
        subscriber.written = True
        self.metrics.count(subscriber.follower.queue, len(items), size, subscriber.kind)

    # --- while live ---------------------------------------------------------------------
    def send(self, subscriber: Subscriber, data: bytes, last: str) -> bool:
        """Write a round's events to a live stream; False when it is not (any more)."""
        conn = subscriber.conn
        if conn.closed:
            return False
        if conn.pending() + len(data) > self.max_pending:
            self.disconnect(
                subscriber,
                "slow_reader",
                f"More than {self.max_pending} bytes waited to be sent to this reader; "
                "resume after the last message received.",
            )
            return False
        conn.write(data)
        subscriber.position = last
        subscriber.written = True
        return True

    def disconnect(self, subscriber: Subscriber, code: str, reason: str) -> None:
        conn = subscriber.conn
        if conn.closed:
            return
        self.metrics.disconnects.labels(code).inc()
        if subscriber.kind == "sse":
            conn.write(sse_disconnect(code, reason, subscriber.position))
        else:
            close_code = {
                "slow_reader": CLOSE_SLOW,
                "queue_not_found": CLOSE_GONE,
                "stopping": CLOSE_STOPPING,
            }.get(code, 1011)
            conn.write(ws_close(close_code, reason))
        self.closed(subscriber)
        conn.close()

    def closed(self, subscriber: Subscriber) -> None:
        self.subscribers.discard(subscriber)
        self.hub.remove(subscriber.follower, subscriber)

    async def heartbeats(self) -> None:
        """An SSE comment or a WebSocket ping on every idle stream, so that proxies and
        NATs keep it open and dead readers are found. A stream written to since the last
        tick is not idle and gets none: ten thousand streams followed live would
        otherwise take a second fan-out of bytes nobody reads, every interval, in the
        middle of the messages' (so a stream hears from the server at least every two
        intervals, an idle one every interval)."""
        interval = self.hub.settings.heartbeat_seconds
        while True:
            await asyncio.sleep(interval)
            for subscriber in list(self.subscribers):
                if subscriber.written:
                    subscriber.written = False
                    continue
                conn = subscriber.conn
                if not conn.closed and conn.pending() < self.max_pending:
                    conn.write(SSE_HEARTBEAT if subscriber.kind == "sse" else WS_PING)

    def stop(self) -> None:
        for subscriber in list(self.subscribers):
            self.disconnect(subscriber, "stopping", "The service is stopping; resume shortly.")
