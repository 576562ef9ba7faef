"""A PHPMQ client written from the seed (the php-mq/protocol README) alone: none of the
gateway's code, so the two implementations check each other.

Message header: ``H`` + version ``01`` + 3-digit message type + 2-digit packet count
(8 bytes). Packet header: ``P`` + 2-digit packet type + the content length as 29 digits,
zero-padded (32 bytes), then the content. No separators: the line breaks of the seed's
examples are for reading.
"""

from __future__ import annotations

import select
import socket
import time
from dataclasses import dataclass

SEND, CONSUME, DISPATCH, ACK, REQUEUE, DEAD_LETTER = 1, 2, 3, 4, 5, 6
AUTHENTICATE = 0  # the gateway's addition
QUEUE, CONTENT, MESSAGE_ID, COUNT, TTL, TOKEN = 1, 2, 3, 4, 5, 6


def message(message_type: int, *packets: tuple[int, bytes | str]) -> bytes:
    out = [f"H01{message_type:03d}{len(packets):02d}".encode()]
    for packet_type, content in packets:
        data = content.encode() if isinstance(content, str) else content
        out.append(f"P{packet_type:02d}{len(data):029d}".encode())
        out.append(data)
    return b"".join(out)


def send(queue: str, content: bytes | str, ttl: int | str = 0) -> bytes:
    return message(SEND, (QUEUE, queue), (CONTENT, content), (TTL, str(ttl)))


def consume(queue: str, count: int) -> bytes:
    return message(CONSUME, (QUEUE, queue), (COUNT, str(count)))


def ack(queue: str, message_id: str) -> bytes:
    return message(ACK, (QUEUE, queue), (MESSAGE_ID, message_id))


def requeue(queue: str, message_id: str, ttl: int | None = None) -> bytes:
    if ttl is None:
        return message(REQUEUE, (QUEUE, queue), (MESSAGE_ID, message_id))
    return message(REQUEUE, (QUEUE, queue), (MESSAGE_ID, message_id), (TTL, str(ttl)))


def dead_letter(queue: str, message_id: str) -> bytes:
    return message(DEAD_LETTER, (QUEUE, queue), (MESSAGE_ID, message_id))


def authenticate(token: str) -> bytes:
    return message(AUTHENTICATE, (TOKEN, token))


@dataclass
class Message:
    type: int
    packets: dict[int, bytes]

    @property
    def queue(self) -> str:
        return self.packets[QUEUE].decode()

    @property
    def content(self) -> bytes:
        return self.packets[CONTENT]

    @property
    def id(self) -> str:
        return self.packets[MESSAGE_ID].decode()

    @property
    def ttl(self) -> int:
        return int(self.packets[TTL])


def parse(data: bytes) -> tuple[Message, bytes]:
    """The first message of ``data`` and what follows it."""
    header, rest = data[:8], data[8:]
    assert header[:3] == b"H01", header
    message_type, count = int(header[3:6]), int(header[6:8])
    packets = {}
    for _ in range(count):
        packet_header, rest = rest[:32], rest[32:]
        assert packet_header[:1] == b"P" and len(packet_header) == 32, packet_header
        length = int(packet_header[3:32])
        packets[int(packet_header[1:3])] = rest[:length]
        rest = rest[length:]
    return Message(message_type, packets), rest


class Closed(Exception):
    """The server closed the connection."""


class Client:
    """A connection to the gateway, reading as the real client does: one read of the
    8-byte header, then the packets."""

    def __init__(self, port: int, host: str = "127.0.0.1", source: str | None = None) -> None:
        """``source``: the local address to connect from (any of 127.0.0.0/8 on Linux:
        tests play clients of several addresses)."""
        bind = None if source is None else (source, 0)
        self.sock = socket.create_connection((host, port), timeout=5, source_address=bind)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _exactly(self, count: int, deadline: float) -> bytes:
        data = b""
        while len(data) < count:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = self.sock.recv(count - len(data))
            except TimeoutError:
                raise
            except ConnectionResetError:
                raise Closed("reset") from None
            if not chunk:
                raise Closed(f"closed after {len(data)} of {count} bytes")
            data += chunk
        return data

    def read(self, timeout: float = 5.0) -> Message:
        deadline = time.monotonic() + timeout
        header = self._exactly(8, deadline)
        assert header[:3] == b"H01", header
        packets = {}
        for _ in range(int(header[6:8])):
            packet_header = self._exactly(32, deadline)
            assert packet_header[:1] == b"P", packet_header
            packets[int(packet_header[1:3])] = self._exactly(int(packet_header[3:32]), deadline)
        return Message(int(header[3:6]), packets)

    def read_at_once(self, timeout: float = 5.0) -> Message:
        """As the real client: wait until readable, then non-blocking reads: the 8-byte
        header in one read, and everything after it already there (one send)."""
        readable, _, _ = select.select([self.sock], [], [], timeout)
        assert readable, "nothing dispatched"
        self.sock.setblocking(False)
        try:
            header = self.sock.recv(8)
            assert len(header) == 8, f"a split header: {header!r}"
            packets = {}
            for _ in range(int(header[6:8])):
                packet_header = self.sock.recv(32)
                assert len(packet_header) == 32, f"a split packet header: {packet_header!r}"
                length = int(packet_header[3:32])
                content = b""
                while len(content) < length:
                    chunk = self.sock.recv(length - len(content))  # BlockingIOError: split
                    assert chunk, "closed inside a message"
                    content += chunk
                packets[int(packet_header[1:3])] = content
        finally:
            self.sock.setblocking(True)
        return Message(int(header[3:6]), packets)

    def expect_nothing(self, seconds: float) -> None:
        """Nothing arrives (and the connection stays open) for ``seconds``."""
        readable, _, _ = select.select([self.sock], [], [], seconds)
        if readable:
            data = self.sock.recv(1 << 16, socket.MSG_PEEK)
            raise AssertionError(f"unexpected: {data[:200]!r}" if data else "connection closed")

    def wait_closed(self, timeout: float = 5.0) -> None:
        """The server closes the connection (it may still send nothing before)."""
        deadline = time.monotonic() + timeout
        while True:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                if not self.sock.recv(1 << 16):
                    return
            except ConnectionResetError:
                return
            except TimeoutError:
                raise AssertionError("the connection stayed open") from None
