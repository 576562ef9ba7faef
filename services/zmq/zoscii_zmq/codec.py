"""The zpipes wire format: zbroker's zproto codec (``zpipes_msg.xml``), byte for byte.

Every request and every reply is one ZeroMQ frame: the signature ``AA A0``, a one-byte
message id, then the fields in order. A ``string`` is a one-byte length and its bytes,
a ``number`` four bytes big-endian, a ``chunk`` a four-byte big-endian length and its
bytes. ``INPUT`` of pipe ``qp`` is the six bytes ``aa a0 01 02 71 70``.

``decode`` is strict, as a peer on the network may send anything: a frame that is short,
long, of another signature or of an id a client does not send raises ``Malformed`` with
a short reason (a metrics label) and never anything else.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

SIGNATURE = b"\xaa\xa0"
_NUMBER = struct.Struct(">I")


class Id(IntEnum):
    INPUT = 1
    INPUT_OK = 2
    INPUT_FAILED = 3
    OUTPUT = 4
    OUTPUT_OK = 5
    OUTPUT_FAILED = 6
    READ = 7
    READ_OK = 8
    READ_END = 9
    READ_TIMEOUT = 10
    READ_FAILED = 11
    WRITE = 12
    WRITE_OK = 13
    WRITE_TIMEOUT = 14
    WRITE_FAILED = 15
    CLOSE = 16
    CLOSE_OK = 17
    CLOSE_FAILED = 18
    PING = 19
    PING_OK = 20
    INVALID = 21


REQUESTS = frozenset({Id.INPUT, Id.OUTPUT, Id.READ, Id.WRITE, Id.CLOSE, Id.PING})


class Malformed(ValueError):
    """A frame that is not a zpipes request; ``reason`` is a fixed word."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


@dataclass(frozen=True)
class Request:
    """A decoded client message; the fields its id does not carry keep their defaults."""

    id: Id
    pipename: bytes = b""
    size: int = 0
    timeout: int = 0  # milliseconds, 0: forever
    chunk: bytes = b""


def is_zproto(frame: bytes) -> bool:
    return frame[:2] == SIGNATURE


def decode(frame: bytes) -> Request:
    """One frame from a client, checked to the last byte."""
    if len(frame) < 3:
        raise Malformed("truncated", f"a frame of {len(frame)} bytes")
    if frame[:2] != SIGNATURE:
        raise Malformed("bad_signature", f"signature {frame[:2].hex()}, not aaa0")
    try:
        kind = Id(frame[2])
    except ValueError:
        raise Malformed("bad_id", f"message id {frame[2]}") from None
    if kind not in REQUESTS:
        raise Malformed("bad_id", f"{kind.name} is a reply, not a request")
    body = memoryview(frame)[3:]
    fields = _Fields(body)
    if kind in (Id.INPUT, Id.OUTPUT):
        request = Request(kind, pipename=fields.string())
    elif kind is Id.READ:
        request = Request(kind, size=fields.number(), timeout=fields.number())
    elif kind is Id.WRITE:
        request = Request(kind, chunk=fields.chunk(), timeout=fields.number())
    else:
        request = Request(kind)
    fields.end()
    return request


class _Fields:
    def __init__(self, body: memoryview) -> None:
        self.body = body
        self.at = 0

    def take(self, count: int) -> memoryview:
        if self.at + count > len(self.body):
            raise Malformed(
                "truncated", f"a field runs {self.at + count - len(self.body)} bytes past the frame"
            )
        part = self.body[self.at : self.at + count]
        self.at += count
        return part

    def string(self) -> bytes:
        return bytes(self.take(self.take(1)[0]))

    def number(self) -> int:
        return int(_NUMBER.unpack(self.take(4))[0])

    def chunk(self) -> bytes:
        return bytes(self.take(self.number()))

    def end(self) -> None:
        if self.at != len(self.body):
            raise Malformed("trailing_bytes", f"{len(self.body) - self.at} bytes after the fields")


# --- encoding (replies; requests too, for tests and the benchmark's clients) ----------------
def encode(kind: Id, *fields: bytes | int, chunk: bytes | None = None) -> bytes:
    """``kind`` with its fields in order: ``bytes`` are strings, ``int`` numbers; the one
    chunk field, where the message has one, is ``chunk`` (it comes first: READ_OK, WRITE)."""
    parts = [SIGNATURE, bytes((kind,))]
    if chunk is not None:
        parts += [_NUMBER.pack(len(chunk)), chunk]
    for field in fields:
        if isinstance(field, int):
            parts.append(_NUMBER.pack(field))
        else:
            if len(field) > 255:
                raise ValueError("a zproto string holds at most 255 bytes")
            parts += [bytes((len(field),)), field]
    return b"".join(parts)


def reply(kind: Id) -> bytes:
    """A reply without fields (INPUT_OK, READ_END, PING_OK, INVALID...)."""
    return SIGNATURE + bytes((kind,))


def failed(kind: Id, reason: str) -> bytes:
    """A *_FAILED reply with its reason (cut to the 255 bytes a string holds)."""
    return encode(kind, reason.encode("utf-8", "replace")[:255])


def read_ok(chunk: bytes) -> bytes:
    return encode(Id.READ_OK, chunk=chunk)


def input_(pipename: bytes) -> bytes:
    return encode(Id.INPUT, pipename)


def output(pipename: bytes) -> bytes:
    return encode(Id.OUTPUT, pipename)


def read(size: int, timeout_ms: int = 0) -> bytes:
    return encode(Id.READ, size, timeout_ms)


def write(chunk: bytes, timeout_ms: int = 0) -> bytes:
    return encode(Id.WRITE, timeout_ms, chunk=chunk)
