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
import contextlib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Protocol

MESSAGE_FLAG = b"H"
PACKET_FLAG = b"P"
VERSION = b"01"
MESSAGE_HEADER_BYTES = 8  # H + 2-digit version + 3-digit type + 2-digit packet count
PACKET_HEADER_BYTES = 32  # P + 2-digit type + 29-digit length
LENGTH_DIGITS = 29
MAX_FIELD_BYTES = 1024  # any packet but the content: a queue, an id, a number, a token
CHUNK_BYTES = 1 << 20  # large content is streamed on in pieces of at most this
READ_BYTES = 256 << 10  # a read of the stream takes what it holds, up to this (no wait)


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


def dispatch(queue: bytes, content: bytes, message_id: bytes, ttl: bytes) -> bytes:
    """A 003 with its four packets: ``encode``'s bytes in one step (one a message sent)."""
    return b"H0100304P01%029d%bP02%029d%bP03%029d%bP05%029d%b" % (
        len(queue),
        queue,
        len(content),
        content,
        len(message_id),
        message_id,
        len(ttl),
        ttl,
    )


# --- reading ----------------------------------------------------------------------------------
def parse_message_header(raw: bytes) -> tuple[MessageType, int]:
    """(type, packet count) of an 8-byte message header, checked."""
    known = _MESSAGE_HEADERS.get(raw)
    if known is not None:
        return known
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
    known = _PACKET_TYPES.get((raw[:3], message_type))
    length = raw[3:PACKET_HEADER_BYTES]
    if known is not None and len(length) == LENGTH_DIGITS and length.isdigit():
        return known, int(length)
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


# Every header a client may send, looked up whole; the checks above say what is wrong
# with any other.
_MESSAGE_HEADERS: Mapping[bytes, tuple[MessageType, int]] = {
    message_header(kind, count): (kind, count)
    for kind in FROM_CLIENT
    for count in range(len(SHAPES[kind].required), len(SHAPES[kind].allowed) + 1)
}
_PACKET_TYPES: Mapping[tuple[bytes, MessageType], PacketType] = {
    (b"%s%02d" % (PACKET_FLAG, packet), kind): packet
    for kind in FROM_CLIENT
    for packet in SHAPES[kind].allowed
}


class ContentSink(Protocol):
    """Where a large message's content goes while it arrives (an upload file)."""

    async def write(self, chunk: bytes) -> None: ...


@dataclass
class Incoming:
    """One message from a client: its small packets as bytes, the content as bytes (up
    to ``inline_bytes``) or as the sink it was streamed into."""

    type: MessageType
    fields: dict[PacketType, bytes] = field(default_factory=dict)
    content: ContentSink | bytes | None = None
    size: int = 0  # of the content

    def text(self, packet: PacketType) -> str | None:
        raw = self.fields.get(packet)
        return None if raw is None else raw.decode("utf-8", "replace")


STREAM = "stream"  # what ``FrameReader._advance`` answers for a large content


@dataclass
class _Progress:
    """How much of a message has been taken from the buffer (it may come in pieces)."""

    message: Incoming | None = None  # None until its header is read
    left: int = 0  # packets not read yet
    seen: set[PacketType] = field(default_factory=set)
    packet: tuple[PacketType, int] | None = None  # a packet whose header is read, not its body
    content_deadline: float | None = None  # set by the content's header (with min_rate)


class FrameReader:
    """Reads messages from a stream, strictly, within limits and time.

    It reads the stream in large pieces into a buffer of its own and takes messages out
    of that, so a message already received costs no wait and no read: the caller handles
    every message a client sent back to back before the next read. ``before_read()``
    runs before each read of the stream, that is when no message in the buffer is
    complete: the gateway commits there what it has read so far (a client that sent
    many messages gets one commit for all of them, and none waits for more to arrive).

    Deadlines: the message header and each packet header ``timeout``; a packet's
    content ``timeout`` plus one second per ``min_rate`` bytes it declares (a slow link
    may send a big message, a trickle may not hold a connection for ever; 0: each read
    of it ``timeout``); with ``deadline`` (a loop time), everything but content by then
    (a connection's first message). Between messages ``wait`` waits as long as the
    caller says: consumers sit idle between messages.

    Content of up to ``inline_bytes`` is kept in memory; a larger one goes, piece by
    piece as it arrives, to ``open_sink(length)`` (None: memory too).
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
        inline_bytes: int = 0,
        open_sink: Callable[[int], Awaitable[ContentSink]] | None = None,
        before_content: Callable[[MessageType, Mapping[PacketType, bytes]], None] | None = None,
        before_read: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.reader = reader
        self.max_content_bytes = max_content_bytes
        self.timeout = timeout
        self.min_rate = min_rate
        self.inline_bytes = inline_bytes
        self.open_sink = open_sink
        self.before_content = before_content
        self.before_read = before_read
        self._buffer = bytearray()
        self._at = 0  # where the unread part of the buffer starts

    @property
    def buffered(self) -> int:
        """Bytes received and not yet read as (part of) a message."""
        return len(self._buffer) - self._at

    async def wait(self, stop: asyncio.Future[None], deadline: float | None) -> bool:
        """Until the next message's first byte is here: True; False at the end of the
        stream or once ``stop`` is done. TimeoutError past ``deadline`` (a loop time)."""
        if self.buffered:
            return True
        if self.before_read is not None:
            await self.before_read()
        if stop.done():  # what was received is handled; nothing more is read
            return False
        timeout = None if deadline is None else deadline - asyncio.get_running_loop().time()
        read = asyncio.ensure_future(self.reader.read(READ_BYTES))
        waited: set[asyncio.Future[Any]] = {read, stop}
        await asyncio.wait(waited, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if not read.done():
            read.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await read
            if not stop.done():
                raise TimeoutError
            return False
        data = read.result()
        self._take(data)
        return bool(data)

    async def read_message(self, deadline: float | None = None) -> Incoming:
        """The next message (its first byte may still be on its way). What the buffer
        holds is taken at once (``_advance``); only what is missing is waited for."""
        progress = _Progress()
        while (need := self._advance(progress)) is not None:
            count, what = need
            if what == STREAM:
                await self._stream(progress)
            elif what == "content":
                await self._fill(count, what, progress.content_deadline)
            else:
                await self._fill(count, what, deadline)
        assert progress.message is not None
        return progress.message

    def _advance(self, progress: _Progress) -> tuple[int, str] | None:
        """Take as much of the message as the buffer holds: None once it is whole, else
        the bytes its next piece needs and what that is (``STREAM``: a large content)."""
        while True:
            message = progress.message
            if message is None:
                if self.buffered < MESSAGE_HEADER_BYTES:
                    return MESSAGE_HEADER_BYTES, "message header"
                message_type, progress.left = parse_message_header(
                    self._take_bytes(MESSAGE_HEADER_BYTES)
                )
                message = progress.message = Incoming(message_type)
            if progress.packet is None:
                if not progress.left:
                    missing = SHAPES[message.type].required - progress.seen
                    if missing:
                        names = ", ".join(f"{p.value:02d}" for p in sorted(missing))
                        raise ProtocolError(
                            "missing_packet",
                            f"message type {message.type.value:03d} without packet {names}",
                        )
                    return None
                if self.buffered < PACKET_HEADER_BYTES:
                    return PACKET_HEADER_BYTES, "packet header"
                raw = self._take_bytes(PACKET_HEADER_BYTES)
                progress.packet = self._packet(message, progress, raw)
            packet_type, length = progress.packet
            if packet_type is PacketType.CONTENT:
                if self.open_sink is not None and length > self.inline_bytes:
                    return length, STREAM
                if self.buffered < length:
                    return length, "content"
                message.content, message.size = self._take_bytes(length), length
            else:
                if self.buffered < length:
                    return length, "packet"
                message.fields[packet_type] = self._take_bytes(length)
            progress.packet = None
            progress.left -= 1

    def _packet(
        self, message: Incoming, progress: _Progress, raw: bytes
    ) -> tuple[PacketType, int]:
        """A packet header, checked; a content packet's is the sender's last chance to
        be refused before a byte of the content arrives."""
        packet_type, length = parse_packet_header(raw, message.type)
        if packet_type in progress.seen:
            raise ProtocolError("duplicate_packet", f"packet type {packet_type.value:02d} twice")
        progress.seen.add(packet_type)
        if packet_type is not PacketType.CONTENT:
            if length > MAX_FIELD_BYTES:
                raise ProtocolError(
                    "too_large",
                    f"packet type {packet_type.value:02d} of {length} bytes "
                    f"(at most {MAX_FIELD_BYTES})",
                )
            return packet_type, length
        if length > self.max_content_bytes:
            raise ProtocolError(
                "too_large",
                f"content of {length} bytes over the limit of {self.max_content_bytes}",
            )
        if self.before_content is not None:
            self.before_content(message.type, message.fields)
        if self.min_rate > 0:
            progress.content_deadline = (
                asyncio.get_running_loop().time() + self.timeout + length / self.min_rate
            )
        return packet_type, length

    async def _stream(self, progress: _Progress) -> None:
        """A large content, written to its sink piece by piece as it arrives."""
        assert progress.message is not None and progress.packet is not None
        assert self.open_sink is not None
        length = progress.packet[1]
        sink = await self.open_sink(length)
        left = length
        while left:
            if not self.buffered:
                await self._fill(1, "content", progress.content_deadline)
            chunk = self._take_bytes(min(left, self.buffered, CHUNK_BYTES))
            await sink.write(chunk)
            left -= len(chunk)
        progress.message.content, progress.message.size = sink, length
        progress.packet = None
        progress.left -= 1

    def _take_bytes(self, count: int) -> bytes:
        at = self._at
        self._at = at + count
        return bytes(self._buffer[at : at + count])

    async def _fill(self, count: int, what: str, deadline: float | None) -> None:
        """Read until ``count`` bytes are buffered (``before_read`` before each read)."""
        while self.buffered < count:
            if self.before_read is not None:
                await self.before_read()
            timeout = self.timeout
            if deadline is not None:
                timeout = min(timeout, deadline - asyncio.get_running_loop().time())
            try:
                data = await asyncio.wait_for(self.reader.read(READ_BYTES), max(timeout, 0.0))
            except TimeoutError:
                raise ProtocolError(
                    "timeout", f"{what} not read within its deadline ({timeout:.3g} s left)"
                ) from None
            if not data:
                raise ProtocolError(
                    "truncated",
                    f"connection ended in a {what} ({self.buffered} of {count} bytes)",
                )
            self._take(data)

    def _take(self, data: bytes) -> None:
        if self._at:  # drop what was read, so the buffer holds one read and a part message
            del self._buffer[: self._at]
            self._at = 0
        self._buffer += data
