"""Many readers of one queue from one asyncio process: long-poll, SSE or WebSocket.

The readers of the fan-out benchmark (``bench.fanout``) and of its small version in the
tests (``tests/live``). Each reader is one ``asyncio.Protocol`` on its own keep-alive
connection that parses just what it needs (no HTTP library: ten thousand of them must
cost the load generator less than the server):

* ``longpoll``: ``fetch`` with ``after=<its pointer>&wait=<s>&count=<n>``, again and
  again on one connection, as a tail client does (``count``: a batch when several came);
* ``sse``: one ``stream`` request (``Accept: text/event-stream``), events by ``id``;
* ``websocket``: one ``stream`` upgrade, a binary frame per message.

A message's payload starts with ``<sequence> <send time>`` (``payload``), so a reader
measures the delivery time without asking anyone. Each reader checks what the protocol
promises: names strictly increasing (no repeat, no reorder) and no sequence skipped.
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
import time
from dataclasses import dataclass, field
from urllib.parse import urlencode

KINDS = ("longpoll", "sse", "websocket")
_NAME = re.compile(rb'filename="([^"]+)"')
_LENGTH = re.compile(rb"(?i)content-length:\s*(\d+)")
_TYPE = re.compile(rb"(?i)content-type:\s*([^\r\n;]+)(?:;\s*boundary=([^\r\n]+))?")


def payload(sequence: int, size: int = 64) -> bytes:
    head = b"%d %.6f " % (sequence, time.time())
    return head + b"x" * max(0, size - len(head))


def parse_payload(data: bytes) -> tuple[int, float]:
    sequence, sent, _ = data.split(b" ", 2)
    return int(sequence), float(sent)


@dataclass
class Tally:
    """What every reader of a run saw, together."""

    readers: int
    expected: int = 0  # messages published during the measure
    requests: int = 0
    latencies: list[float] = field(default_factory=list)
    per_sequence: dict[int, int] = field(default_factory=dict)  # readers that got it
    order_errors: int = 0  # a name not above the last one: a repeat or a reorder
    gaps: int = 0  # a sequence skipped
    disconnects: int = 0
    errors: list[str] = field(default_factory=list)
    measuring: bool = False

    def received(self, reader: Reader, name: bytes, data: bytes, now: float) -> None:
        if reader.last is not None and name <= reader.last:
            self.order_errors += 1
            self._note(f"{name.decode()} after {reader.last.decode()} (seq {data[:12]!r})")
            return
        reader.last = name
        sequence, sent = parse_payload(data)
        if reader.sequence is not None and sequence != reader.sequence + 1:
            self.gaps += 1
            self._note(f"seq {sequence} after {reader.sequence} ({name.decode()})")
        reader.sequence = sequence
        reader.received += 1
        if self.measuring:
            self.latencies.append(now - sent)
            self.per_sequence[sequence] = self.per_sequence.get(sequence, 0) + 1

    def _note(self, what: str) -> None:
        """The first anomalies, as they were seen (for the report's errors)."""
        if len(self.errors) < 10:
            self.errors.append(what)

    def reached_all(self, sequences: list[int]) -> int:
        return sum(self.per_sequence.get(s, 0) >= self.readers for s in sequences)


class Reader(asyncio.Protocol):
    def __init__(self, tally: Tally, host: str, queue: str, after: str) -> None:
        self.tally = tally
        self.host = host
        self.queue = queue
        self.after = after
        self.last: bytes | None = None
        self.sequence: int | None = None
        self.received = 0
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.ready = asyncio.get_running_loop().create_future()
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.start()

    def connection_lost(self, exc: Exception | None) -> None:
        self.tally.disconnects += 1
        if not self.closed.done():
            self.closed.set_result(None)

    def start(self) -> None:
        raise NotImplementedError

    @property
    def pointer(self) -> str:
        return self.last.decode() if self.last is not None else self.after

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class LongPollReader(Reader):
    wait = 30
    count = 100

    def start(self) -> None:
        self.ask()
        if not self.ready.done():
            self.ready.set_result(None)

    def ask(self) -> None:
        query = urlencode(
            {
                "action": "fetch",
                "q": self.queue,
                "after": self.pointer,
                "wait": self.wait,
                "count": self.count,
            }
        )
        assert self.transport is not None
        self.transport.write(f"GET /?{query} HTTP/1.1\r\nHost: {self.host}\r\n\r\n".encode())
        self.tally.requests += 1

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buffer[:end])
            match = _LENGTH.search(head)
            length = int(match.group(1)) if match else 0
            if len(self.buffer) < end + 4 + length:
                return
            body = bytes(self.buffer[end + 4 : end + 4 + length])
            del self.buffer[: end + 4 + length]
            self.answer(head, body, time.time())
            self.ask()

    def answer(self, head: bytes, body: bytes, now: float) -> None:
        kind = _TYPE.search(head)
        if kind is None or not head.startswith(b"HTTP/1.1 200"):
            self.tally.errors.append(head.split(b"\r\n", 1)[0].decode(errors="replace"))
            return
        mimetype = kind.group(1).strip()
        if mimetype == b"application/octet-stream":
            name = _NAME.search(head)
            assert name is not None
            self.tally.received(self, name.group(1), body, now)
        elif mimetype == b"multipart/mixed":
            for name, data in split_multipart(body, kind.group(2).strip()):
                self.tally.received(self, name, data, now)


def split_multipart(body: bytes, boundary: bytes) -> list[tuple[bytes, bytes]]:
    parts = []
    position = 0
    marker = b"--" + boundary + b"\r\n"
    while body.startswith(marker, position):
        end = body.index(b"\r\n\r\n", position)
        head = body[position:end]
        length = int(_LENGTH.search(head).group(1))  # type: ignore[union-attr]
        name = _NAME.search(head).group(1)  # type: ignore[union-attr]
        data = body[end + 4 : end + 4 + length]
        parts.append((name, data))
        position = end + 4 + length + 2
    return parts


class SseReader(Reader):
    def start(self) -> None:
        query = urlencode({"action": "stream", "q": self.queue, "after": self.pointer})
        assert self.transport is not None
        self.transport.write(
            f"GET /?{query} HTTP/1.1\r\nHost: {self.host}\r\n"
            "Accept: text/event-stream\r\n\r\n".encode()
        )
        self.tally.requests += 1
        self.head_done = False

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if not self.head_done:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            if not self.buffer.startswith(b"HTTP/1.1 200"):
                self.tally.errors.append(bytes(self.buffer[:80]).decode(errors="replace"))
                self.close()
                return
            del self.buffer[: end + 4]
            self.head_done = True
            if not self.ready.done():
                self.ready.set_result(None)
        now = time.time()
        while True:
            end = self.buffer.find(b"\n\n")
            if end < 0:
                return
            event = bytes(self.buffer[:end])
            del self.buffer[: end + 2]
            name, kind, lines = None, b"message", []
            for line in event.split(b"\n"):
                if line.startswith(b"id: "):
                    name = line[4:]
                elif line.startswith(b"data: "):
                    lines.append(line[6:])
                elif line.startswith(b"event: "):
                    kind = line[7:]
            if name is None:
                if kind == b"disconnect":
                    self.tally.errors.append("disconnect: " + b"".join(lines).decode())
                continue
            data = b"\n".join(lines)
            if kind == b"binary":
                data = base64.b64decode(data)
            self.tally.received(self, name, data, now)


class WebSocketReader(Reader):
    def start(self) -> None:
        query = urlencode({"action": "stream", "q": self.queue, "after": self.pointer})
        key = base64.b64encode(os.urandom(16)).decode()
        assert self.transport is not None
        self.transport.write(
            (
                f"GET /?{query} HTTP/1.1\r\nHost: {self.host}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        self.tally.requests += 1
        self.head_done = False

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if not self.head_done:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            if not self.buffer.startswith(b"HTTP/1.1 101"):
                self.tally.errors.append(bytes(self.buffer[:80]).decode(errors="replace"))
                self.close()
                return
            del self.buffer[: end + 4]
            self.head_done = True
            if not self.ready.done():
                self.ready.set_result(None)
        now = time.time()
        buffer = self.buffer
        while len(buffer) >= 2:
            opcode, length = buffer[0] & 0x0F, buffer[1] & 0x7F
            start = 2
            if length == 126:
                if len(buffer) < 4:
                    return
                length, start = int.from_bytes(buffer[2:4], "big"), 4
            elif length == 127:
                if len(buffer) < 10:
                    return
                length, start = int.from_bytes(buffer[2:10], "big"), 10
            if len(buffer) < start + length:
                return
            frame = bytes(buffer[start : start + length])
            del buffer[: start + length]
            if opcode == 2:
                name, _, body = frame.partition(b"\n")
                self.tally.received(self, name, body, now)
            elif opcode == 8:
                self.tally.errors.append(f"closed: {frame[2:].decode(errors='replace')}")


READERS: dict[str, type[Reader]] = {
    "longpoll": LongPollReader,
    "sse": SseReader,
    "websocket": WebSocketReader,
}


async def connect_readers(
    kind: str,
    count: int,
    host: str,
    port: int,
    queue: str,
    after: str,
    tally: Tally,
    *,
    parallel: int = 200,
) -> list[Reader]:
    """``count`` readers of ``kind``, connected ``parallel`` at a time, each ready (its
    request sent, its stream's head received) when this returns."""
    loop = asyncio.get_running_loop()
    readers: list[Reader] = []
    gate = asyncio.Semaphore(parallel)

    async def one() -> None:
        async with gate:
            _, reader = await loop.create_connection(
                lambda: READERS[kind](tally, f"{host}:{port}", queue, after), host, port
            )
            await asyncio.wait_for(reader.ready, 60)
            readers.append(reader)

    await asyncio.gather(*(one() for _ in range(count)))
    return readers
