"""A zpipes client written from the notes (ZPIPES-NOTES.md) alone, not from the gateway's
codec: what zbroker's clients put on the wire, byte for byte, over a real DEALER socket.

Every request and reply is one frame: ``AA A0``, a one-byte id, then the fields
(``string``: one-byte length; ``number``: 4 bytes big-endian; ``chunk``: 4-byte length).
"""

from __future__ import annotations

import struct

import zmq

IDS = {
    "INPUT": 1, "INPUT_OK": 2, "INPUT_FAILED": 3, "OUTPUT": 4, "OUTPUT_OK": 5,
    "OUTPUT_FAILED": 6, "READ": 7, "READ_OK": 8, "READ_END": 9, "READ_TIMEOUT": 10,
    "READ_FAILED": 11, "WRITE": 12, "WRITE_OK": 13, "WRITE_TIMEOUT": 14, "WRITE_FAILED": 15,
    "CLOSE": 16, "CLOSE_OK": 17, "CLOSE_FAILED": 18, "PING": 19, "PING_OK": 20, "INVALID": 21,
}  # fmt: skip
NAMES = {v: k for k, v in IDS.items()}
SIG = b"\xaa\xa0"


def input_(pipe: bytes) -> bytes:
    return SIG + bytes([1, len(pipe)]) + pipe


def output(pipe: bytes) -> bytes:
    return SIG + bytes([4, len(pipe)]) + pipe


def read(size: int, timeout_ms: int) -> bytes:
    return SIG + bytes([7]) + struct.pack(">II", size, timeout_ms)


def write(chunk: bytes, timeout_ms: int) -> bytes:
    return SIG + bytes([12]) + struct.pack(">I", len(chunk)) + chunk + struct.pack(">I", timeout_ms)


CLOSE = SIG + bytes([16])
PING = SIG + bytes([19])


def parse(frame: bytes) -> tuple[str, bytes]:
    """(reply name, its field: READ_OK's chunk, a *_FAILED reason, else b"")."""
    assert frame[:2] == SIG, frame[:8]
    name = NAMES[frame[2]]
    body = frame[3:]
    if name == "READ_OK":
        (length,) = struct.unpack(">I", body[:4])
        assert len(body) == 4 + length, (len(body), length)
        return name, body[4:]
    if name.endswith("_FAILED"):
        assert len(body) == 1 + body[0]
        return name, body[1:]
    assert body == b"", body
    return name, b""


class Pipe:
    """One zbroker client: a DEALER socket, one call at a time."""

    def __init__(self, context: zmq.Context, endpoint: str, timeout_ms: int = 5000) -> None:
        self.sock = context.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.rcvtimeo = timeout_ms
        self.sock.connect(endpoint)

    def call(self, frame: bytes) -> tuple[str, bytes]:
        self.sock.send(frame)
        return parse(self.sock.recv())

    def send(self, frame: bytes) -> None:
        self.sock.send(frame)

    def reply(self) -> tuple[str, bytes]:
        return parse(self.sock.recv())

    def open_reader(self, pipe: bytes) -> None:
        assert self.call(input_(pipe)) == ("INPUT_OK", b"")

    def open_writer(self, pipe: bytes) -> None:
        assert self.call(output(pipe)) == ("OUTPUT_OK", b"")

    def write(self, chunk: bytes, timeout_ms: int = 0) -> str:
        return self.call(write(chunk, timeout_ms))[0]

    def read(self, size: int, timeout_ms: int = 0) -> tuple[str, bytes]:
        return self.call(read(size, timeout_ms))

    def close(self) -> None:
        self.sock.close(linger=0)

    def __enter__(self) -> Pipe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
