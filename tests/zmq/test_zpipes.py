"""zpipes with zbroker's semantics, through real DEALER sockets speaking the notes' bytes.

Each behaviour is one the notes (ZPIPES-NOTES.md) record of the reference broker: pipes
created on demand, stream reads of exactly N bytes, WRITE_OK once a reader is attached,
short read then READ_END after the writer closed, timeouts, two replies for a CLOSE
during a pending call, the wrong direction answered INVALID, a reader's CLOSE discarding
what was queued, idle expiry. And what the reference does not do: chunks on disk, as
ordinary queue messages.
"""

from __future__ import annotations

import time

import pytest
import zmq
from zoscii_zmq.pipes import pipe_queue

from tests.support.zmq_gateway import Gateway, connect, pipe_name
from tests.zmq import wire


def test_the_notes_example_bytes_are_what_the_client_sends() -> None:
    assert wire.input_(b"qp") == bytes.fromhex("aaa001027170")
    assert wire.read(12, 100) == bytes.fromhex("aaa007 0000000c 00000064".replace(" ", ""))
    assert wire.write(b"Hello", 0) == bytes.fromhex(
        "aaa00c 00000005 48656c6c6f 00000000".replace(" ", "")
    )
    assert wire.CLOSE == b"\xaa\xa0\x10"


def test_a_stream_is_read_in_exact_sizes_across_chunks(
    gateway: Gateway, context: zmq.Context
) -> None:
    name = pipe_name()
    with connect(context, gateway.ipc) as writer, connect(context, gateway.ipc) as reader:
        writer.open_writer(name)
        reader.open_reader(name)
        for chunk in (b"CHUNK1", b"CHUNK2", b"CHUNK3"):
            assert writer.write(chunk) == "WRITE_OK"
        assert reader.read(1) == ("READ_OK", b"C")
        assert reader.read(10) == ("READ_OK", b"HUNK1CHUNK")
        assert reader.read(3, 100) == ("READ_OK", b"2CH")
        assert reader.read(10, 200) == ("READ_TIMEOUT", b"")  # 3 bytes left: not enough
        assert writer.call(wire.CLOSE) == ("CLOSE_OK", b"")
        assert reader.read(10, 200) == ("READ_OK", b"UNK3")  # the writer closed: a short read
        assert reader.read(10, 200) == ("READ_END", b"")
        assert reader.read(0) == ("READ_END", b"")
        assert reader.call(wire.CLOSE) == ("CLOSE_OK", b"")
    # every chunk is an ordinary message of the pipe's queue, byte-exact, in order
    assert [data for _, data in gateway.messages(pipe_queue(name))] == [
        b"CHUNK1",
        b"CHUNK2",
        b"CHUNK3",
    ]


def test_write_waits_for_a_reader_and_times_out(gateway: Gateway, context: zmq.Context) -> None:
    name = pipe_name()
    with connect(context, gateway.ipc) as writer, connect(context, gateway.ipc) as reader:
        writer.open_writer(name)
        started = time.monotonic()
        assert writer.write(b"nobody reads", 150) == "WRITE_TIMEOUT"
        assert time.monotonic() - started >= 0.14
        assert gateway.messages(pipe_queue(name)) == []  # not written
        writer.send(wire.write(b"waits", 0))  # no timeout: answered once a reader comes
        time.sleep(0.2)
        reader.open_reader(name)
        assert writer.reply() == ("WRITE_OK", b"")
        assert reader.read(5, 1000) == ("READ_OK", b"waits")


def test_a_pending_read_is_answered_when_data_comes(gateway: Gateway, context: zmq.Context) -> None:
    name = pipe_name()
    with connect(context, gateway.ipc) as writer, connect(context, gateway.ipc) as reader:
        reader.open_reader(name)
        writer.open_writer(name)
        reader.send(wire.read(8, 0))
        time.sleep(0.1)
        assert writer.write(b"1234") == "WRITE_OK"
        assert writer.write(b"5678") == "WRITE_OK"
        assert reader.reply() == ("READ_OK", b"12345678")
        # a read with no writer attached waits too (no READ_END before a writer closed)
        assert reader.read(1, 100) == ("READ_TIMEOUT", b"")


def test_close_during_a_pending_call_gets_two_replies(
    gateway: Gateway, context: zmq.Context
) -> None:
    name = pipe_name()
    with connect(context, gateway.ipc) as reader, connect(context, gateway.ipc) as writer:
        reader.open_reader(name)
        reader.send(wire.read(12, 0))
        reader.send(wire.PING)  # answered while the read waits
        assert reader.reply() == ("PING_OK", b"")
        reader.send(wire.CLOSE)
        assert reader.reply() == ("READ_FAILED", b"pipe closed while waiting")
        assert reader.reply() == ("CLOSE_OK", b"")
        assert reader.read(12, 100) == ("INVALID", b"")  # nothing open now
        other = pipe_name()
        writer.open_writer(other)
        writer.send(wire.write(b"x", 0))
        writer.send(wire.CLOSE)
        assert writer.reply()[0] == "WRITE_FAILED"
        assert writer.reply() == ("CLOSE_OK", b"")


def test_one_reader_and_several_writers_fair_queued(gateway: Gateway, context: zmq.Context) -> None:
    name = pipe_name()
    with (
        connect(context, gateway.ipc) as reader,
        connect(context, gateway.ipc) as second,
        connect(context, gateway.ipc) as w1,
        connect(context, gateway.ipc) as w2,
    ):
        reader.open_reader(name)
        assert second.call(wire.input_(name)) == ("INPUT_FAILED", b"the pipe has a reader")
        w1.open_writer(name)
        w2.open_writer(name)  # the 2014 broker refuses a second writer; the seed allows it
        for i in range(5):
            assert w1.write(b"a%d" % i) == "WRITE_OK"
            assert w2.write(b"b%d" % i) == "WRITE_OK"
        assert reader.read(20, 1000) == ("READ_OK", b"a0b0a1b1a2b2a3b3a4b4")
        assert w1.call(wire.CLOSE) == ("CLOSE_OK", b"")
        assert reader.read(1, 150) == ("READ_TIMEOUT", b"")  # w2 is still attached
        assert w2.call(wire.CLOSE) == ("CLOSE_OK", b"")
        assert reader.read(1, 150) == ("READ_END", b"")


def test_the_wrong_direction_is_invalid_and_changes_nothing(
    gateway: Gateway, context: zmq.Context
) -> None:
    name = pipe_name()
    with connect(context, gateway.ipc) as writer, connect(context, gateway.ipc) as reader:
        writer.open_writer(name)
        reader.open_reader(name)
        assert writer.read(1, 10) == ("INVALID", b"")
        assert reader.write(b"x", 10) == "INVALID"
        assert reader.call(wire.output(name)) == ("INVALID", b"")
        assert writer.write(b"still") == "WRITE_OK"
        assert reader.read(5, 1000) == ("READ_OK", b"still")
        assert writer.call(wire.CLOSE) == ("CLOSE_OK", b"")
        assert writer.call(wire.CLOSE) == ("INVALID", b"")  # closing a closed pipe


def test_a_reader_close_discards_and_fails_the_writer(
    gateway: Gateway, context: zmq.Context
) -> None:
    name = pipe_name()
    with connect(context, gateway.ipc) as writer, connect(context, gateway.ipc) as reader:
        writer.open_writer(name)
        reader.open_reader(name)
        assert writer.write(b"queued, never read") == "WRITE_OK"
        assert reader.call(wire.CLOSE) == ("CLOSE_OK", b"")
        assert writer.write(b"too late", 100) == "WRITE_FAILED"
        assert writer.call(wire.CLOSE) == ("CLOSE_OK", b"")
        # both ends closed: the pipe is empty when opened again
        reader.open_reader(name)
        writer.open_writer(name)
        assert reader.read(1, 150) == ("READ_TIMEOUT", b"")
        assert writer.write(b"new") == "WRITE_OK"
        assert reader.read(3, 1000) == ("READ_OK", b"new")


@pytest.mark.slow  # waits out the idle expiry
def test_a_silent_client_is_dropped(gateway: Gateway, context: zmq.Context) -> None:
    """ZOSCII_ZPIPES_IDLE_SECONDS=3 here (zbroker's server/timeout): no reply for the
    dropped call, the next request is a new client's."""
    name = pipe_name()
    with (
        connect(context, gateway.ipc, timeout_ms=8000) as reader,
        connect(context, gateway.ipc) as other,
    ):
        reader.open_reader(name)
        reader.send(wire.read(1, 0))
        time.sleep(4.5)
        assert reader.read(1, 10) == ("INVALID", b"")  # the dropped read got no reply
        other.open_reader(name)  # the pipe's reader end is free again


def test_malformed_frames_get_invalid(gateway: Gateway, context: zmq.Context) -> None:
    before = gateway.metric("zoscii_zmq_errors_total", socket="zpipes", reason="bad_signature")
    with connect(context, gateway.ipc) as client:
        for frame in (
            b"\xaa\xa0",  # truncated
            b"\xaa\xa1\x01\x00",  # wrong signature
            b"\xaa\xa0\x63",  # no such id
            b"\xaa\xa0\x02",  # a reply, not a request
            b"\xaa\xa0\x01\x05ab",  # string runs past the frame
            wire.input_(b"x") + b"junk",  # trailing bytes
            b"hello",  # nothing the gateway speaks
        ):
            assert client.call(frame) == ("INVALID", b""), frame
        client.sock.send_multipart([wire.PING, b"second frame"])
        assert client.reply() == ("INVALID", b"")
        assert client.call(wire.PING) == ("PING_OK", b"")  # and the client goes on
    assert (
        gateway.metric("zoscii_zmq_errors_total", socket="zpipes", reason="bad_signature")
        == before + 2
    )
    gateway.wait_for_log(r"invalid request \(trailing_bytes\)")


def test_an_oversized_chunk_is_refused(gateway: Gateway, context: zmq.Context) -> None:
    name = pipe_name()
    with connect(context, gateway.ipc) as writer, connect(context, gateway.ipc) as reader:
        reader.open_reader(name)
        writer.open_writer(name)
        assert writer.call(wire.write(b"x" * ((1 << 20) + 1), 0))[0] == "WRITE_FAILED"
        assert reader.read(2 << 20, 10)[0] == "READ_FAILED"
        assert writer.write(b"ok") == "WRITE_OK"
    assert [d for _, d in gateway.messages(pipe_queue(name))] == [b"ok"]


def test_pipelined_writes_are_committed_and_answered_in_order(
    gateway: Gateway, context: zmq.Context
) -> None:
    name = pipe_name()
    with connect(context, gateway.ipc) as writer, connect(context, gateway.ipc) as reader:
        reader.open_reader(name)
        writer.open_writer(name)
        for i in range(500):
            writer.send(wire.write(b"%04d" % i, 0))
        assert [writer.reply()[0] for _ in range(500)] == ["WRITE_OK"] * 500
        assert reader.read(2000, 2000) == ("READ_OK", b"".join(b"%04d" % i for i in range(500)))


def test_the_seed_command_interface(gateway: Gateway, context: zmq.Context) -> None:
    name = pipe_name()
    sock = context.socket(zmq.DEALER)
    sock.rcvtimeo = 5000
    sock.connect(gateway.ipc)
    try:
        sock.send_multipart([b"READ", name])
        assert sock.recv_multipart() == [b"ERROR", b"OPEN the pipe first"]
        sock.send_multipart([b"OPEN", name])
        for chunk in (b"one", b"two", b""):
            sock.send_multipart([b"WRITE", name, chunk])  # pipelined
        assert [sock.recv_multipart() for _ in range(4)] == [[b"OK"]] * 4
        for chunk in (b"one", b"two", b""):
            sock.send_multipart([b"READ", name])
            assert sock.recv_multipart() == [chunk]
        sock.send_multipart([b"CLOSE", name])
        assert sock.recv_multipart() == [b"OK"]
    finally:
        sock.close(linger=0)
    # a zpipes client reading the same pipe sees the seed's chunks as a stream
    with connect(context, gateway.ipc) as writer:
        writer.open_writer(name)  # (the seed's chunks were all read: nothing left)
        assert [d for _, d in gateway.messages(pipe_queue(name))] == [b"one", b"two", b""]


def test_names_map_to_queues(gateway: Gateway, context: zmq.Context) -> None:
    assert pipe_queue(b"orders") == "zpipe-orders"
    assert pipe_queue(b"Orders").startswith("zpipe_") and len(pipe_queue(b"Orders")) == 46
    assert pipe_queue(b"Orders") != pipe_queue(b"orders")
    with (
        connect(context, gateway.endpoint("zpipes")) as writer,
        connect(context, gateway.ipc) as reader,
    ):
        reader.open_reader("ünïcode/pipe".encode())  # over TCP and ipc alike
        writer.open_writer("ünïcode/pipe".encode())
        assert writer.write(b"any name") == "WRITE_OK"
        assert reader.read(8, 1000) == ("READ_OK", b"any name")


def test_health_and_metrics(gateway: Gateway) -> None:
    health = gateway.health()
    assert health["status"] == "ok"
    assert "zpipes_sessions" in health
    assert gateway.metric("zoscii_zmq_zpipes_requests_total", command="WRITE") > 0
