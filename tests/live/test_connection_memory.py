"""What a waiting reader's connection keeps (``http.Connection``): once a stream runs, no
parser, request head or WebSocket handshake; once a long-poll is parked, no request head.

Each is a kilobyte or more of every one of ten thousand readers (docs/benchmarks.md,
the fan-out's memory per reader): these fail if one comes back, and check that the
reader is still served as before. In-process, so that the service's objects can be
looked at: one ``LiveApp`` on a port of the system's choice.
"""

from __future__ import annotations

import asyncio
import base64
import os
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from websockets.server import ServerProtocol
from zoscii_live.app import LiveApp
from zoscii_live.http import Connection
from zoscii_live.metrics import LiveMetrics
from zoscii_live.settings import LiveSettings

from tests.support.queues import publish_body
from zosciimq.core import DataDir, QueueStore

ORIGIN = "https://example.org"


class Live:
    def __init__(self, app: LiveApp, port: int, data: Path) -> None:
        self.app, self.port, self.data = app, port, data
        self.store = QueueStore(DataDir(data), default_retention_days=1)

    def publish(self, queue: str, content: bytes) -> str:
        name = publish_body(self.store, queue, content).name
        assert name is not None
        return name

    async def connection(self, kind: str) -> Connection:
        """The one connection doing ``kind`` (once it does)."""
        for _ in range(200):
            found = [c for c in self.app.limits.open if c.kind == kind]
            if found:
                (conn,) = found
                return conn
            await asyncio.sleep(0.01)
        raise AssertionError(f"no {kind} connection")


@asynccontextmanager
async def live_app(data: Path) -> AsyncIterator[Live]:
    DataDir(data).ensure()
    settings = LiveSettings.from_env(
        {"ZOSCII_DATA_DIR": str(data), "ZOSCII_CORS_ORIGINS": ORIGIN, "ZOSCII_LIVE_WATCH": "poll"}
    )
    app = LiveApp(settings, LiveMetrics())
    server = await asyncio.get_running_loop().create_server(app.connection, "127.0.0.1", 0)
    app.hub.start()
    try:
        yield Live(app, server.sockets[0].getsockname()[1], data)
    finally:
        server.close()
        for conn in list(app.limits.open):
            conn.abort()
        await app.hub.stop()


def get(path: str, *headers: str) -> bytes:
    lines = [f"GET {path} HTTP/1.1", "Host: t", "X-Request-ID: reader-1", f"Origin: {ORIGIN}"]
    return ("\r\n".join([*lines, *headers]) + "\r\n\r\n").encode()


def keeps_no_request_head(conn: Connection) -> None:
    assert conn.request is not None
    assert conn.request.headers == {} and conn.request.query == {}
    assert conn._building == {} and conn._url == b""  # not kept by the connection either
    assert conn._queued == []


def masked(opcode: int, payload: bytes) -> bytes:
    """A client's frame (masked, as a client must)."""
    mask = os.urandom(4)
    body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + body


async def frame(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    first, length = await reader.readexactly(2)
    assert length < 126
    return first & 0x0F, await reader.readexactly(length)


def test_a_stream_keeps_no_parser_request_head_or_handshake(tmp_path: Path) -> None:
    async def run() -> None:
        async with live_app(tmp_path) as live:
            first = live.publish("q", b"first")
            path = f"/?action=stream&q=q&after={first}"
            sse, sse_out = await asyncio.open_connection("127.0.0.1", live.port)
            sse_out.write(get(path, "Accept: text/event-stream"))
            assert (await sse.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
            ws, ws_out = await asyncio.open_connection("127.0.0.1", live.port)
            key = base64.b64encode(os.urandom(16)).decode()
            ws_out.write(
                get(
                    path,
                    "Upgrade: websocket",
                    "Connection: Upgrade",
                    f"Sec-WebSocket-Key: {key}",
                    "Sec-WebSocket-Version: 13",
                )
            )
            assert (await ws.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 101")

            for kind in ("sse", "websocket"):
                conn = await live.connection(kind)
                assert conn._parser is None  # it reads no more requests
                keeps_no_request_head(conn)
            websocket = (await live.connection("websocket")).websocket
            assert websocket is not None
            # the handshake's protocol keeps the parsed handshake request while it lives
            assert not isinstance(websocket.protocol, ServerProtocol)

            # and both are served as before: messages, a ping's pong, the close handshake
            second = await asyncio.to_thread(live.publish, "q", b"second")
            event = await asyncio.wait_for(sse.readuntil(b"\n\n"), 10)
            while not event.startswith(b"id: "):  # the stream's start (retry:) comes first
                event = await asyncio.wait_for(sse.readuntil(b"\n\n"), 10)
            assert event == f"id: {second}\ndata: second\n\n".encode()
            assert await asyncio.wait_for(frame(ws), 10) == (2, f"{second}\nsecond".encode())
            ws_out.write(masked(0x9, b"hi"))
            assert await asyncio.wait_for(frame(ws), 10) == (0xA, b"hi")
            ws_out.write(masked(0x8, struct.pack("!H", 1000)))
            assert await asyncio.wait_for(frame(ws), 10) == (0x8, struct.pack("!H", 1000))
            assert await asyncio.wait_for(ws.read(), 10) == b""  # closed after it
            sse_out.close()
            ws_out.close()

    asyncio.run(run())


def test_a_parked_long_poll_keeps_only_what_its_answer_needs(tmp_path: Path) -> None:
    async def run() -> None:
        async with live_app(tmp_path) as live:
            first = live.publish("q", b"first")
            reader, writer = await asyncio.open_connection("127.0.0.1", live.port)
            writer.write(get(f"/?action=fetch&q=q&after={first}&wait=30"))
            conn = await live.connection("longpoll")
            keeps_no_request_head(conn)
            assert conn._parser is not None  # keep-alive: the next request comes after

            second = await asyncio.to_thread(live.publish, "q", b"second")
            head = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)).decode()
            assert head.startswith("HTTP/1.1 200") and second in head
            # what the answer's head needed of the request was kept
            assert "X-Request-ID: reader-1\r\n" in head
            assert f"Access-Control-Allow-Origin: {ORIGIN}\r\n" in head
            assert await reader.readexactly(len(b"second")) == b"second"
            writer.close()

    asyncio.run(run())
