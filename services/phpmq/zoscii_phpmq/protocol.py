"""PHPMQ framing: what goes over the TCP connection, byte for byte.

A message is an 8-byte header and as many packets as it announces, with no separators::

    H 01 001 03                       flag, protocol version, message type, packet count
    P 01 00000000000000000000000000003 Foo     flag, packet type, 29-digit length, content
    P 02 00000000000000000000000000011 Hello World
    P 05 00000000000000000000000000001 0

(the spaces and line breaks are for reading only). The packet header is 32 bytes: the
seed's prose speaks of a "32-byte length" and has one 35-character example, which real
clients do not send (docs: ``/work/shared/PHPMQ-NOTES.md``, README.md here).

Message types: 001 send, 002 consume request, 003 dispatch (server to client), 004
acknowledge, 005 requeue, 006 dead letter; and this gateway's own 000, "authenticate",
whose one packet (type 06) holds the bearer token. Packet types: 01 queue name, 02
message content, 03 message id, 04 count, 05 TTL (seconds), 06 token.

Reading is strict: anything that does not follow the format (a wrong flag or version,
an unknown type, a packet count or packet type the message type does not allow, a
packet twice or missing, a length that is not 29 digits or over the limit, the
connection ending inside a message) raises ``ProtocolError`` with a short fixed
``reason`` (a metrics label); the gateway closes the connection, as PHPMQ has no error
message to answer with.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Protocol

MESSAGE_FLAG = b"H"
PACKET_FLAG = b"P"
VERSION = b"01"
MESSAGE_HEADER_BYTES = 8  # H + 2-digit version + 3-digit type + 2-digit packet count
PACKET_HEADER_BYTES = 32  # P + 2-digit type + 29-digit length
LENGTH_DIGITS = 29
MAX_FIELD_BYTES = 1024  # any packet but the content: a queue, an id, a number, a token
CHUNK_BYTES = 1 << 20  # content is read (and streamed on) in pieces of at most this


class MessageType(IntEnum):
    AUTHENTICATE = 0  # this gateway's addition (packet 06), see README.md
    SEND = 1
    CONSUME = 2
    DISPATCH = 3
    ACKNOWLEDGE = 4
    REQUEUE = 5
    DEAD_LETTER = 6


class PacketType(IntEnum):
    QUEUE = 1
    CONTENT = 2
    MESSAGE_ID = 3
    COUNT = 4
    TTL = 5
    TOKEN = 6  # this gateway's addition: the bearer token of an AUTHENTICATE


@dataclass(frozen=True)
class Shape:
    """The packets a message type may carry, and those it must."""

    allowed: frozenset[PacketType]
    required: frozenset[PacketType]


def _shape(allowed: Iterable[PacketType], required: Iterable[PacketType]) -> Shape:
    return Shape(frozenset(allowed), frozenset(required))


P = PacketType
SHAPES: Mapping[MessageType, Shape] = {
    MessageType.AUTHENTICATE: _shape([P.TOKEN], [P.TOKEN]),
    # TTL optional: absent means no expiry, as the content "0" does (the real client
    # always sends "0").
    MessageType.SEND: _shape([P.QUEUE, P.CONTENT, P.TTL], [P.QUEUE, P.CONTENT]),
    MessageType.CONSUME: _shape([P.QUEUE, P.COUNT], [P.QUEUE, P.COUNT]),
    MessageType.DISPATCH: _shape(
        [P.QUEUE, P.CONTENT, P.MESSAGE_ID, P.TTL], [P.QUEUE, P.CONTENT, P.MESSAGE_ID, P.TTL]
    ),
    MessageType.ACKNOWLEDGE: _shape([P.QUEUE, P.MESSAGE_ID], [P.QUEUE, P.MESSAGE_ID]),
    # TTL optional: absent keeps the message's TTL.
    MessageType.REQUEUE: _shape([P.QUEUE, P.MESSAGE_ID, P.TTL], [P.QUEUE, P.MESSAGE_ID]),
    MessageType.DEAD_LETTER: _shape([P.QUEUE, P.MESSAGE_ID], [P.QUEUE, P.MESSAGE_ID]),
}
# What a client may send (003 goes the other way only).
FROM_CLIENT = frozenset(SHAPES) - {MessageType.DISPATCH}


class ProtocolError(Exception):
    """A frame that breaks the format; ``reason`` is a fixed word (a metrics label)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


# --- writing ----------------------------------------------------------------------------------
def message_header(message_type: int, packets: int) -> bytes:
    if not 0 <= message_type <= 999 or not 0 <= packets <= 99:
        raise ValueError(f"message type {message_type} or packet count {packets} out of range")
    return b"%s%s%03d%02d" % (MESSAGE_FLAG, VERSION, message_type, packets)


def packet_header(packet_type: int, length: int) -> bytes:
    if not 0 <= packet_type <= 99 or not 0 <= length < 10**LENGTH_DIGITS:
        raise ValueError(f"packet type {packet_type} or length {length} out of range")
    return b"%s%02d%029d" % (PACKET_FLAG, packet_type, length)


def encode(message_type: int, packets: Iterable[tuple[int, bytes]]) -> bytes:
    """One whole message, ready for a single send."""
    items = list(packets)
    parts = [message_header(message_type, len(items))]
    for packet_type, content in items:
        parts.append(packet_header(packet_type, len(content)))
        parts.append(bytes(content))
    return b"".join(parts)


# --- reading ----------------------------------------------------------------------------------
def parse_message_header(raw: bytes) -> tuple[MessageType, int]:
    """(type, packet count) of an 8-byte message header, checked."""
    if raw[:1] != MESSAGE_FLAG:
        raise ProtocolError("bad_flag", f"message header starts with {raw[:1]!r}, not 'H'")
    if raw[1:3] != VERSION:
        raise ProtocolError("bad_version", f"protocol version {raw[1:3]!r}, not '01'")
    digits = raw[3:6]
    if not digits.isdigit() or int(digits) not in FROM_CLIENT:
        raise ProtocolError("bad_type", f"message type {digits!r} is not one a client sends")
    message_type = MessageType(int(digits))
    count = raw[6:8]
    shape = SHAPES[message_type]
    if not count.isdigit() or not len(shape.required) <= int(count) <= len(shape.allowed):
        raise ProtocolError(
            "bad_count",
            f"packet count {count!r} for message type {message_type.value:03d} "
            f"(it has {len(shape.required)} to {len(shape.allowed)})",
        )
    return message_type, int(count)


def parse_packet_header(raw: bytes, message_type: MessageType) -> tuple[PacketType, int]:
    """(type, length) of a 32-byte packet header, checked against the message type."""
    if raw[:1] != PACKET_FLAG:
        raise ProtocolError("bad_flag", f"packet header starts with {raw[:1]!r}, not 'P'")
    digits = raw[1:3]
    if not digits.isdigit() or int(digits) not in PacketType._value2member_map_:
        raise ProtocolError("bad_packet_type", f"packet type {digits!r}")
    packet_type = PacketType(int(digits))
    if packet_type not in SHAPES[message_type].allowed:
        raise ProtocolError(
            "packet_not_allowed",
            f"packet type {packet_type.value:02d} in message type {message_type.value:03d}",
        )
    length = raw[3:PACKET_HEADER_BYTES]
    if len(length) != LENGTH_DIGITS or not length.isdigit():
        raise ProtocolError("bad_length", f"packet length {length[:40]!r} is not 29 digits")
    return packet_type, int(length)


class ContentSink(Protocol):
    """Where a message's content goes while it arrives (an upload file)."""

    async def write(self, chunk: bytes) -> None: ...


@dataclass
class Incoming:
    """One message from a client: its small packets as bytes, the content as the sink
    it was streamed into (or bytes, without a sink)."""

    type: MessageType
    fields: dict[PacketType, bytes] = field(default_factory=dict)
    content: ContentSink | bytes | None = None

    def text(self, packet: PacketType) -> str | None:
        raw = self.fields.get(packet)
        return None if raw is None else raw.decode("utf-8", "replace")


class FrameReader:
    """Reads messages from a stream, strictly, within limits and time.

    Deadlines: the message header and each packet header ``timeout``; a packet's
    content ``timeout`` plus one second per ``min_rate`` bytes it declares (a slow link
    may send a big message, a trickle may not hold a connection for ever; 0: each read
    of it ``timeout``); with
    ``deadline`` (a loop time), everything but content by then (a connection's first
    message). The wait for a message's first byte is the caller's business: consumers
    sit idle between messages.
    ``open_sink(length)``: where a content packet goes; None keeps it in memory.
    ``before_content(type, packets so far)``: called once a content packet's header is
    read and its length accepted, before a byte of it; it raises to refuse the message
    there (a sender without the right to the queue writes nothing to disk).
    """

    def __init__(
        self,
        reader: asyncio.StreamReader,
        *,
        max_content_bytes: int,
        timeout: float,
        min_rate: float = 0.0,
        open_sink: Callable[[int], Awaitable[ContentSink]] | None = None,
        before_content: Callable[[MessageType, Mapping[PacketType, bytes]], None] | None = None,
    ) -> None:
        self.reader = reader
        self.max_content_bytes = max_content_bytes
        self.timeout = timeout
        self.min_rate = min_rate
        self.open_sink = open_sink
        self.before_content = before_content
        self.started = False  # inside a message: its first byte has been read

    async def read_message(self, first: bytes, deadline: float | None = None) -> Incoming:
        """The rest of the message whose first byte ``first`` the caller read."""
        self.started = True
        header = first + await self._exactly(
            MESSAGE_HEADER_BYTES - len(first), "message header", deadline
        )
        message_type, count = parse_message_header(header)
        message = Incoming(message_type)
        seen: set[PacketType] = set()
        for _ in range(count):
            raw = await self._exactly(PACKET_HEADER_BYTES, "packet header", deadline)
            packet_type, length = parse_packet_header(raw, message_type)
            if packet_type in seen:
                raise ProtocolError(
                    "duplicate_packet", f"packet type {packet_type.value:02d} twice"
                )
            seen.add(packet_type)
            if packet_type is PacketType.CONTENT:
                if length > self.max_content_bytes:
                    raise ProtocolError(
                        "too_large",
                        f"content of {length} bytes over the limit of {self.max_content_bytes}",
                    )
                if self.before_content is not None:
                    self.before_content(message_type, message.fields)
                message.content = await self._content(length)
            else:
                if length > MAX_FIELD_BYTES:
                    raise ProtocolError(
                        "too_large",
                        f"packet type {packet_type.value:02d} of {length} bytes "
                        f"(at most {MAX_FIELD_BYTES})",
                    )
                message.fields[packet_type] = await self._exactly(length, "packet", deadline)
        missing = SHAPES[message_type].required - seen
        if missing:
            names = ", ".join(f"{p.value:02d}" for p in sorted(missing))
            raise ProtocolError(
                "missing_packet", f"message type {message_type.value:03d} without packet {names}"
            )
        self.started = False
        return message

    async def _content(self, length: int) -> ContentSink | bytes:
        deadline = None
        if self.min_rate > 0:
            deadline = asyncio.get_running_loop().time() + self.timeout + length / self.min_rate
        if self.open_sink is None:
            return await self._exactly(length, "content", deadline)
        sink = await self.open_sink(length)
        left = length
        while left:
            chunk = await self._exactly(min(left, CHUNK_BYTES), "content", deadline)
            await sink.write(chunk)
            left -= len(chunk)
        return sink

    async def _exactly(self, count: int, what: str, deadline: float | None = None) -> bytes:
        if count == 0:
            return b""
        timeout = self.timeout
        if deadline is not None:
            timeout = min(timeout, deadline - asyncio.get_running_loop().time())
        try:
            return await asyncio.wait_for(self.reader.readexactly(count), max(timeout, 0.0))
        except asyncio.IncompleteReadError as exc:
            raise ProtocolError(
                "truncated", f"connection ended in a {what} ({len(exc.partial)} of {count} bytes)"
            ) from None
        except TimeoutError:
            raise ProtocolError(
                "timeout", f"{what} not read within its deadline ({timeout:.3g} s left)"
            ) from None
