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
import contextlib
import json
import os
import re
import select
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
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
    """A reader's state and parsing. Under asyncio it is the connection's protocol; in a
    reader process (``ReaderProcesses``) the process's own epoll loop feeds it bytes and
    their kernel receipt time (``feed``), with ``loop`` an event loop that never runs."""

    def __init__(
        self,
        tally: Tally,
        host: str,
        queue: str,
        after: str,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.tally = tally
        self.host = host
        self.queue = queue
        self.after = after
        self.last: bytes | None = None
        self.sequence: int | None = None
        self.received = 0
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        loop = loop or asyncio.get_running_loop()
        self.ready = loop.create_future()
        self.closed = loop.create_future()

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

    def data_received(self, data: bytes) -> None:
        self.feed(data, time.time())

    def feed(self, data: bytes, now: float) -> None:
        """Bytes that arrived at ``now`` (wall clock, as the payload's send time)."""
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

    def feed(self, data: bytes, now: float) -> None:
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
            self.answer(head, body, now)
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

    def feed(self, data: bytes, now: float) -> None:
        if self.head_done:
            if self.chunked:
                self._dechunk(data)
            else:
                self.buffer += data
        else:
            self.buffer += data
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            if not self.buffer.startswith(b"HTTP/1.1 200"):
                self.tally.errors.append(bytes(self.buffer[:80]).decode(errors="replace"))
                self.close()
                return
            head = bytes(self.buffer[:end]).lower()
            rest = bytes(self.buffer[end + 4 :])
            self.buffer.clear()
            self.head_done = True
            # A proxy (nginx) sends a body without a length in chunks, whose boundaries
            # fall anywhere in an event once several events come together.
            self.chunked = b"transfer-encoding: chunked" in head
            self.chunk_left = 0
            self.raw = bytearray()
            if self.chunked:
                self._dechunk(rest)
            else:
                self.buffer += rest
            if not self.ready.done():
                self.ready.set_result(None)
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

    def _dechunk(self, data: bytes) -> None:
        """The chunked body's bytes, without the chunk sizes, onto ``buffer``."""
        raw = self.raw
        raw += data
        while raw:
            if self.chunk_left == 0:
                end = raw.find(b"\r\n")
                if end < 0:
                    return
                size = bytes(raw[:end]).split(b";")[0].strip()
                del raw[: end + 2]
                if size:  # else the line end after a chunk's data
                    self.chunk_left = int(size, 16)
                continue
            taken = raw[: self.chunk_left]
            self.buffer += taken
            del raw[: len(taken)]
            self.chunk_left -= len(taken)


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

    def feed(self, data: bytes, now: float) -> None:
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


# --- readers in processes of their own --------------------------------------------------
#
# Ten thousand asyncio protocols in one Python process cost the load generator about as
# much CPU as the server it measures, and a reader's receipt time then includes the wait
# for the callbacks of the readers before it in the same loop. The bench's readers run in
# several processes instead, each a bare epoll loop over its sockets (no transport, no
# task, no handle per read), and each read's time is the kernel's receipt time of the
# bytes (``SO_TIMESTAMPNS``): the delivery time is the server's and the network's, not
# the reader process's queue.

SO_TIMESTAMPNS = 35  # Linux (socket.SO_TIMESTAMPNS is not exposed by every Python)
_CMSG_SPACE = socket.CMSG_SPACE(16)
_READ = 256 << 10
COALESCE_EVENTS = 64  # a reader process that finds fewer sockets ready waits ...
COALESCE_SECONDS = 0.002  # ... this long for more (it reads them all at once)


class _RawTransport(asyncio.Transport):
    """What a ``Reader`` writes to and closes, on a non-blocking socket."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self.sock = sock

    def write(self, data: bytes) -> None:
        self.sock.sendall(data)  # a request head: the socket buffer takes it at once

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)


def _worker(argv: list[str]) -> None:
    """One reader process: ``kind count host port queue after``; commands on stdin, one a
    line (``measure``, ``count``, ``stop``), answers as JSON lines on stdout."""
    kind, count, host, port, queue, after = argv
    loop = asyncio.new_event_loop()  # for the readers' futures only; it never runs
    tally = Tally(0)
    poll = select.epoll()
    readers: dict[int, Reader] = {}
    socks: dict[int, socket.socket] = {}
    connecting: set[int] = set()
    pending = int(count)
    started = 0
    stdin = sys.stdin.fileno()
    poll.register(stdin, select.EPOLLIN)
    os.set_blocking(stdin, False)
    commands = b""
    ready_said = False
    buffer = bytearray(_READ)
    view = memoryview(buffer)
    into = [view]
    cpu0 = 0.0

    def say(document: dict[str, object]) -> None:
        sys.stdout.write(json.dumps(document) + "\n")
        sys.stdout.flush()

    def connect() -> None:
        nonlocal started
        while started < pending and len(connecting) < 200:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.connect_ex((host, int(port)))
            fd = sock.fileno()
            socks[fd] = sock
            connecting.add(fd)
            poll.register(fd, select.EPOLLOUT)
            started += 1

    def drop(fd: int) -> None:
        sock = socks.pop(fd)
        connecting.discard(fd)
        poll.unregister(fd)
        sock.close()
        reader = readers.pop(fd, None)
        if reader is not None:
            reader.connection_lost(None)

    connect()
    while True:
        events = poll.poll(1.0)
        if len(events) < COALESCE_EVENTS and ready_said:
            # Few sockets ready: let more arrive before reading. The receipt times are
            # the kernel's, so the pause costs the measure nothing; it spares the
            # server's writes the wake-up of a sleeping reader process for each socket.
            time.sleep(COALESCE_SECONDS)
            events = list(dict(events + poll.poll(0)).items())
        for fd, _ in events:
            if fd == stdin:
                more = os.read(stdin, 4096)
                if not more:  # the bench is gone
                    return
                commands += more
                while b"\n" in commands:
                    line, commands = commands.split(b"\n", 1)
                    command = line.decode().strip()
                    if command == "measure":
                        tally.measuring = True
                        cpu0 = time.process_time()
                        say({"requests": tally.requests})
                    elif command == "count":
                        say({"requests": tally.requests})
                    elif command.startswith("reached "):
                        sequence = int(command.split()[1])
                        say({"reached": tally.per_sequence.get(sequence, 0)})
                    elif command == "stop":
                        say(
                            {
                                "requests": tally.requests,
                                "latencies": [round(x, 5) for x in tally.latencies],
                                "per_sequence": tally.per_sequence,
                                "order_errors": tally.order_errors,
                                "gaps": tally.gaps,
                                "disconnects": tally.disconnects,
                                "errors": tally.errors[:10],
                                "cpu_seconds": time.process_time() - cpu0,
                            }
                        )
                        return
                continue
            if fd in connecting:
                connecting.discard(fd)
                sock = socks[fd]
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                    tally.errors.append("connect failed")
                    drop(fd)
                    continue
                poll.modify(fd, select.EPOLLIN)
                reader = READERS[kind](tally, f"{host}:{port}", queue, after, loop)
                readers[fd] = reader
                reader.connection_made(_RawTransport(sock))
                connect()
                continue
            reader = readers.get(fd)
            if reader is None:  # dropped meanwhile
                continue
            try:  # into one buffer: a fresh 256 KiB bytes per read costs more than the read
                size, ancillary, _, _ = socks[fd].recvmsg_into(into, _CMSG_SPACE)
            except BlockingIOError:
                continue
            except OSError:
                size, ancillary = 0, []
            data = view[:size].tobytes()
            if not data:
                drop(fd)
                continue
            now = time.time()
            for level, kind_of, stamp in ancillary:
                if level == socket.SOL_SOCKET and kind_of == SO_TIMESTAMPNS:
                    seconds, nanoseconds = struct.unpack("qq", stamp)
                    now = seconds + nanoseconds / 1e9
            reader.feed(data, now)
        if (
            not ready_said
            and started == pending
            and not connecting
            and all(r.ready.done() or r.closed.done() for r in readers.values())
        ):
            ready_said = True
            ready = sum(r.ready.done() and not r.closed.done() for r in readers.values())
            say({"ready": ready, "errors": tally.errors[:5]})


class ReaderProcesses:
    """``count`` readers of ``kind`` in ``processes`` reader processes (``_worker``)."""

    def __init__(self) -> None:
        self.processes: list[subprocess.Popen[bytes]] = []
        self.tally: Tally | None = None
        self.cpu_seconds = 0.0

    async def start(
        self,
        kind: str,
        count: int,
        host: str,
        port: int,
        queue: str,
        after: str,
        processes: int = 2,
    ) -> None:
        shares = [count // processes + (i < count % processes) for i in range(processes)]
        for share in shares:
            self.processes.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "bench.fanout_readers",
                        kind,
                        str(share),
                        host,
                        str(port),
                        queue,
                        after,
                    ],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    cwd=Path(__file__).resolve().parent.parent,
                )
            )
        answers = await asyncio.gather(*(self._answer(p, 120) for p in self.processes))
        ready = sum(int(a.get("ready", 0)) for a in answers)
        if ready != count:
            raise RuntimeError(f"{ready} of {count} readers ready: {answers}")

    async def _answer(self, process: subprocess.Popen[bytes], timeout: float) -> dict[str, Any]:
        assert process.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), timeout)
        if not line:
            raise RuntimeError(f"a reader process ended (exit {process.wait()})")
        return json.loads(line)  # type: ignore[no-any-return]

    async def _all(self, command: str) -> list[dict[str, Any]]:
        for process in self.processes:
            assert process.stdin is not None
            process.stdin.write(command.encode() + b"\n")
            process.stdin.flush()
        return await asyncio.gather(*(self._answer(p, 120) for p in self.processes))

    async def requests(self) -> int:
        return sum(a["requests"] for a in await self._all("count"))

    async def reached(self, sequence: int) -> int:
        """Readers that received message ``sequence`` (while measuring)."""
        return sum(a["reached"] for a in await self._all(f"reached {sequence}"))

    async def measure(self) -> int:
        """From now on the readers note latencies; the requests so far."""
        return sum(a["requests"] for a in await self._all("measure"))

    async def stop(self, readers: int) -> Tally:
        """Every reader closed; what they saw, together."""
        answers = await self._all("stop")
        for process in self.processes:
            process.wait(30)
        tally = Tally(readers)
        for answer in answers:
            tally.requests += answer["requests"]
            tally.latencies.extend(answer["latencies"])
            for sequence, seen in answer["per_sequence"].items():
                tally.per_sequence[int(sequence)] = tally.per_sequence.get(int(sequence), 0) + seen
            tally.order_errors += answer["order_errors"]
            tally.gaps += answer["gaps"]
            tally.disconnects += answer["disconnects"]
            tally.errors.extend(answer["errors"])
            self.cpu_seconds += answer["cpu_seconds"]
        self.tally = tally
        return tally

    def kill(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait(10)


if __name__ == "__main__":
    _worker(sys.argv[1:])
