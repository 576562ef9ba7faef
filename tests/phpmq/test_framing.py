"""The framing, byte for byte against the seed's worked examples (written out without
their line breaks): the test client (``wire``, from the seed alone) and the gateway's
``protocol`` module both produce them, and the gateway reads every one a client sends."""

from __future__ import annotations

import asyncio

import pytest
from zoscii_phpmq import protocol
from zoscii_phpmq.protocol import FrameReader, MessageType, PacketType, ProtocolError

from tests.phpmq import wire

ID = "d7e7f68761d34838494b233148b5486c"


def example(text: str) -> bytes:
    """A seed example as it goes over the wire: its lines joined, nothing between."""
    return "".join(line.strip() for line in text.strip().splitlines()).encode()


SEND = example("""
H0100103
P0100000000000000000000000000003
Foo
P0200000000000000000000000000011
Hello World
P0500000000000000000000000000004
3600
""")
CONSUME = example("""
H0100202
P0100000000000000000000000000003
Foo
P0400000000000000000000000000001
5
""")
DISPATCH = example(f"""
H0100304
P0100000000000000000000000000003
Foo
P0200000000000000000000000000011
Hello World
P0300000000000000000000000000032
{ID}
P0500000000000000000000000000004
3300
""")
ACK = example(f"""
H0100402
P0100000000000000000000000000003
Foo
P0300000000000000000000000000032
{ID}
""")
REQUEUE = example(f"""
H0100503
P0100000000000000000000000000003
Foo
P0300000000000000000000000000032
{ID}
P0500000000000000000000000000004
3600
""")
DEAD_LETTER = example(f"""
H0100602
P0100000000000000000000000000003
Foo
P0300000000000000000000000000032
{ID}
""")


def test_the_examples_are_as_long_as_the_format_says() -> None:
    # 8-byte message header, 32-byte packet headers, contents
    assert len(SEND) == 8 + 3 * 32 + 3 + 11 + 4
    assert len(DISPATCH) == 8 + 4 * 32 + 3 + 11 + 32 + 4
    assert SEND.startswith(b"H0100103P01" + b"0" * 28 + b"3Foo")


def test_the_test_client_writes_the_examples() -> None:
    assert wire.send("Foo", "Hello World", 3600) == SEND
    assert wire.consume("Foo", 5) == CONSUME
    assert wire.ack("Foo", ID) == ACK
    assert wire.requeue("Foo", ID, 3600) == REQUEUE
    assert wire.dead_letter("Foo", ID) == DEAD_LETTER
    assert (
        wire.message(
            wire.DISPATCH,
            (wire.QUEUE, "Foo"),
            (wire.CONTENT, "Hello World"),
            (wire.MESSAGE_ID, ID),
            (wire.TTL, "3300"),
        )
        == DISPATCH
    )


def test_the_test_client_reads_the_dispatch_example() -> None:
    message, rest = wire.parse(DISPATCH + b"H")
    assert rest == b"H"
    assert (message.type, message.queue, message.content, message.id, message.ttl) == (
        3,
        "Foo",
        b"Hello World",
        ID,
        3300,
    )


def test_the_gateway_writes_the_dispatch_example() -> None:
    p = PacketType
    frame = protocol.encode(
        MessageType.DISPATCH,
        [
            (p.QUEUE, b"Foo"),
            (p.CONTENT, b"Hello World"),
            (p.MESSAGE_ID, ID.encode()),
            (p.TTL, b"3300"),
        ],
    )
    assert frame == DISPATCH
    assert protocol.dispatch(b"Foo", b"Hello World", ID.encode(), b"3300") == DISPATCH
    assert (
        protocol.encode(
            MessageType.SEND, [(p.QUEUE, b"Foo"), (p.CONTENT, b"Hello World"), (p.TTL, b"3600")]
        )
        == SEND
    )


async def _read(data: bytes, max_content_bytes: int = 1 << 20) -> protocol.Incoming:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    frames = FrameReader(reader, max_content_bytes=max_content_bytes, timeout=1)
    return await frames.read_message()


@pytest.mark.parametrize(
    ("data", "kind", "fields"),
    [
        (SEND, MessageType.SEND, {PacketType.QUEUE: b"Foo", PacketType.TTL: b"3600"}),
        (CONSUME, MessageType.CONSUME, {PacketType.QUEUE: b"Foo", PacketType.COUNT: b"5"}),
        (
            ACK,
            MessageType.ACKNOWLEDGE,
            {PacketType.QUEUE: b"Foo", PacketType.MESSAGE_ID: ID.encode()},
        ),
        (
            REQUEUE,
            MessageType.REQUEUE,
            {PacketType.QUEUE: b"Foo", PacketType.MESSAGE_ID: ID.encode(), PacketType.TTL: b"3600"},
        ),
        (
            DEAD_LETTER,
            MessageType.DEAD_LETTER,
            {PacketType.QUEUE: b"Foo", PacketType.MESSAGE_ID: ID.encode()},
        ),
    ],
    ids=["send", "consume", "ack", "requeue", "dead_letter"],
)
def test_the_gateway_reads_every_client_example(
    data: bytes, kind: MessageType, fields: dict[PacketType, bytes]
) -> None:
    message = asyncio.run(_read(data))
    assert message.type is kind
    assert message.fields == fields
    if kind is MessageType.SEND:
        assert message.content == b"Hello World"


def test_the_seeds_35_character_packet_header_is_not_the_format() -> None:
    """The seed's prose example "P01000000000000000000000000000000256" (a 32-digit
    length) is a mistake: read as the format says, it is no 256-byte packet."""
    wrong = b"H0100201P01000000000000000000000000000000256" + b"x" * 256
    with pytest.raises(ProtocolError):
        asyncio.run(_read(wrong))


def test_the_gateways_own_authenticate_message() -> None:
    assert wire.authenticate("s3cret") == b"H0100001P06" + b"0" * 28 + b"6s3cret"
    message = asyncio.run(_read(wire.authenticate("s3cret")))
    assert (message.type, message.fields) == (
        MessageType.AUTHENTICATE,
        {PacketType.TOKEN: b"s3cret"},
    )


def test_a_real_clients_send_has_ttl_zero() -> None:
    message = asyncio.run(_read(wire.send("Foo", b"\x00\xff", 0)))
    assert message.fields[PacketType.TTL] == b"0" and message.content == b"\x00\xff"


class Sink:
    """An upload file's stand-in: what a large content was streamed into, piece by piece."""

    def __init__(self) -> None:
        self.pieces: list[bytes] = []

    async def write(self, chunk: bytes) -> None:
        self.pieces.append(chunk)


async def _read_in_pieces(data: bytes, piece: int, count: int) -> list[protocol.Incoming]:
    """``count`` messages from ``data`` arriving ``piece`` bytes at a time, as a slow link
    delivers them; contents over 100 bytes streamed to a sink, as large ones are."""
    reader = asyncio.StreamReader()

    async def feed() -> None:
        for at in range(0, len(data), piece):
            await asyncio.sleep(0)
            reader.feed_data(data[at : at + piece])
        reader.feed_eof()

    async def open_sink(length: int) -> Sink:
        return Sink()

    frames = FrameReader(
        reader,
        max_content_bytes=1 << 20,
        timeout=1,
        inline_bytes=100,
        open_sink=open_sink,
    )
    feeding = asyncio.create_task(feed())
    messages = [await frames.read_message() for _ in range(count)]
    await feeding
    return messages


@pytest.mark.parametrize("piece", [1, 7, 33, 1 << 20])
def test_messages_are_read_whatever_pieces_they_arrive_in(piece: int) -> None:
    """Byte by byte, in odd pieces or all at once: the same messages, a large content
    streamed to its sink and a small one kept as bytes."""
    large = bytes(range(256)) * 2
    data = wire.send("Foo", large, 60) + ACK + wire.send("Bar", b"small", 0) + CONSUME
    first, ack, small, consume = asyncio.run(_read_in_pieces(data, piece, 4))
    assert isinstance(first.content, Sink) and b"".join(first.content.pieces) == large
    assert (first.size, first.fields[PacketType.TTL]) == (len(large), b"60")
    assert (ack.type, ack.fields[PacketType.MESSAGE_ID]) == (MessageType.ACKNOWLEDGE, ID.encode())
    assert (small.content, small.fields[PacketType.QUEUE]) == (b"small", b"Bar")
    assert consume.fields == {PacketType.QUEUE: b"Foo", PacketType.COUNT: b"5"}
