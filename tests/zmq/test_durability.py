"""Durable pipes: a gateway killed mid-stream loses no acknowledged chunk and repeats at
most the one READ in flight; two gateways on one volume serve one pipe.

Slow tier: real processes on the disk (not tmpfs), killed with SIGKILL.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import zmq
from zoscii_zmq.pipes import pipe_queue

from tests.support.zmq_gateway import Gateway, connect, pipe_name
from tests.zmq import wire

pytestmark = pytest.mark.slow

RECORD = 100  # bytes: b"%08d" and padding
READ = 250  # a read ends mid-chunk, so the saved position has an offset


def record(number: int) -> bytes:
    return (b"%08d" % number).ljust(RECORD, b".")


def numbers(stream: bytes) -> list[int]:
    assert len(stream) % RECORD == 0, len(stream)
    return [int(stream[i : i + 8]) for i in range(0, len(stream), RECORD)]


class Writer(threading.Thread):
    """Writes records from ``start`` until told to stop or the gateway stops answering."""

    def __init__(
        self, context: zmq.Context, endpoint: str, name: bytes, start: int, end: int
    ) -> None:
        super().__init__(daemon=True)
        self.client = connect(context, endpoint, timeout_ms=2000)
        self.client.open_writer(name)
        self.next, self.end = start, end
        self.acked = start - 1

    def run(self) -> None:
        try:
            while self.next < self.end:
                if self.client.write(record(self.next)) != "WRITE_OK":
                    return
                self.acked = self.next
                self.next += 1
        except zmq.Again:  # killed: this write's reply never came
            return


class Reader(threading.Thread):
    def __init__(self, context: zmq.Context, endpoint: str, name: bytes) -> None:
        super().__init__(daemon=True)
        self.client = connect(context, endpoint, timeout_ms=2000)
        self.client.open_reader(name)
        self.got: list[bytes] = []
        self.ended = False

    def run(self) -> None:
        try:
            while True:
                reply, data = self.client.read(READ, 1500)
                if reply == "READ_OK":
                    self.got.append(data)
                elif reply == "READ_END":
                    self.ended = True
                    return
                elif reply != "READ_TIMEOUT":
                    return
        except zmq.Again:
            return


def test_kill_9_mid_stream_loses_no_acknowledged_chunk(tmp_path: Path) -> None:
    context = zmq.Context()
    gateway = Gateway(tmp_path, ZOSCII_ZPIPES_IDLE_SECONDS="30").start()
    name = pipe_name("crash")
    try:
        reader = Reader(context, gateway.ipc, name)
        writer = Writer(context, gateway.ipc, name, 0, 100_000)
        reader.start()
        writer.start()
        deadline = time.monotonic() + 30
        while len(reader.got) < 200 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(reader.got) >= 200, gateway.log()
        gateway.kill()  # SIGKILL, mid-stream
        writer.join(10)
        reader.join(10)
        before = b"".join(reader.got)
        last_read = reader.got[-1]
        acked = writer.acked
        assert acked > 0

        gateway.start()  # same data, same broker name
        reader2 = Reader(context, gateway.ipc, name)
        reader2.start()
        writer2 = Writer(context, gateway.ipc, name, acked + 1, acked + 301)
        writer2.run()
        assert writer2.acked == acked + 300
        assert writer2.client.call(wire.CLOSE) == ("CLOSE_OK", b"")
        reader2.join(30)
        assert reader2.ended, gateway.log()
        after = b"".join(reader2.got)
    finally:
        gateway.kill()

    # The pipe's whole stream, as the queue holds it (the disk's truth).
    stream = b"".join(data for _, data in gateway.messages(pipe_queue(name)))
    assert stream.startswith(before)
    # The reader that opened the pipe again was answered from where it had been
    # answered, or from the start of the one READ in flight at the kill.
    resumed_at = len(stream) - len(after)
    assert resumed_at in (len(before), len(before) - len(last_read)), (resumed_at, len(before))
    assert stream[resumed_at:] == after
    # Every acknowledged record is there once, in order; the one write in flight at the
    # kill (committed, its WRITE_OK lost) may be there twice: the writer sent it again.
    seen = numbers(stream)
    in_flight = acked + 1
    assert sorted(set(seen)) == list(range(acked + 301)), "an acknowledged record is missing"
    repeats = [n for n in set(seen) if seen.count(n) > 1]
    assert repeats in ([], [in_flight]), repeats
    assert seen == sorted(seen)
    context.destroy(linger=0)


def test_two_gateways_share_a_pipe(tmp_path: Path) -> None:
    context = zmq.Context()
    a = Gateway(tmp_path).start()
    b = Gateway(tmp_path).start()
    name = pipe_name("shared")
    try:
        with (
            connect(context, a.ipc) as writer,
            connect(context, b.ipc) as reader,
            connect(context, a.ipc) as rival,
        ):
            writer.open_writer(name)
            # no reader anywhere: the write waits, and is answered once one comes on b
            writer.send(wire.write(b"first,", 0))
            time.sleep(0.2)
            reader.open_reader(name)
            assert writer.reply() == ("WRITE_OK", b"")
            assert rival.call(wire.input_(name)) == (
                "INPUT_FAILED",
                b"the pipe has a reader (on another gateway)",
            )
            # a read on b waits for a write on a
            reader.send(wire.read(12, 3000))
            time.sleep(0.1)
            assert writer.write(b"second") == "WRITE_OK"
            assert reader.reply() == ("READ_OK", b"first,second")
            # the writer's close on a is the reader's end on b
            assert writer.write(b"tail") == "WRITE_OK"
            assert writer.call(wire.CLOSE) == ("CLOSE_OK", b"")
            assert reader.read(100, 3000) == ("READ_OK", b"tail")
            assert reader.read(100, 3000) == ("READ_END", b"")
            # the reader's close on b fails a writer of a
            writer.open_writer(name)
            assert writer.write(b"queued") == "WRITE_OK"
            assert reader.call(wire.CLOSE) == ("CLOSE_OK", b"")
            assert writer.write(b"late", 500) == "WRITE_FAILED"
            assert writer.call(wire.CLOSE) == ("CLOSE_OK", b"")
            # and a reader may now open on a, with what was queued discarded
            rival.open_reader(name)
            assert rival.read(1, 200) == ("READ_TIMEOUT", b"")
    finally:
        a.terminate()
        b.terminate()
        context.destroy(linger=0)
