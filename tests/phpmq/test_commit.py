"""A connection's messages are committed in groups (issue 24): everything a client sent
back to back and the gateway has read goes to the core together, one commit (one log
flush) per queue, in order, before the connection reads on. Counted where the flushes
happen: ``WriteAheadLog.sync`` of an in-process gateway, and ``ConsumerGroups.ack`` for
the acks. Then what a kill -9 of the gateway process in the middle of a client's sending
leaves: every message it committed whole, none twice, none torn."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.phpmq import wire
from tests.support.phpmq_gateway import GatewayProcess, InProcessGateway
from tests.support.queues import queue_name
from zosciimq.core import DataDir, Outgoing, QueueStore, Upload
from zosciimq.core.groups import ConsumerGroups
from zosciimq.core.upload import INLINE_BYTES
from zosciimq.core.wal import WriteAheadLog
from zosciimq.errors import QueueNotFound

WRITE_CHUNK = 1024  # php-mq/client writes each message in pieces of this


def content(number: int) -> bytes:
    """Message ``number``'s bytes: its number first (order is checkable), every byte
    value, a length of its own; every 500th one over the core's inline size (streamed
    to an upload file as it arrives, not kept in memory)."""
    size = INLINE_BYTES + 1000 if number % 500 == 499 else number % 1500
    head = b"%08d|" % number
    body = bytes((number + i) % 256 for i in range(256))
    return (head + body * (size // 256 + 1))[: max(size, len(head))]


def send_like_php_mq(port: int, frames: bytes) -> None:
    """The real client's send (php-mq/client): each message written in pieces of 1 KB,
    then shutdown and close, nothing waited for (PHPMQ has no reply to a 001)."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        view = memoryview(frames)
        for at in range(0, len(frames), WRITE_CHUNK):
            sock.sendall(view[at : at + WRITE_CHUNK])
        sock.shutdown(socket.SHUT_RDWR)


def depth(store: QueueStore, queue: str) -> int:
    try:
        return store.depth(queue)
    except QueueNotFound:
        return 0


def wait_for_depths(data_dir: Path, wanted: dict[str, int], timeout: float = 30) -> None:
    store = QueueStore(DataDir(data_dir))
    try:
        deadline = time.monotonic() + timeout
        while any(depth(store, q) < n for q, n in wanted.items()):
            assert time.monotonic() < deadline, {q: depth(store, q) for q in wanted}
            time.sleep(0.02)
    finally:
        store.close()


def wait_for_metric(
    gateway: InProcessGateway, name: str, value: float, timeout: float = 10, **labels: str
) -> None:
    deadline = time.monotonic() + timeout
    while (seen := gateway.metric(name, **labels)) != value:
        assert time.monotonic() < deadline, f"{name} {labels}: {seen}, not {value}"
        time.sleep(0.01)


def read_queue(data_dir: Path, queue: str) -> list[bytes]:
    store = QueueStore(DataDir(data_dir))
    try:
        out = []
        for _, file in store.iter_after(queue, "", 1_000_000):
            with file:
                out.append(file.read())
        return out
    finally:
        store.close()


@pytest.fixture
def flushes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Every flush of a queue's write-ahead log in this process (one a commit)."""
    counted: list[int] = []
    sync = WriteAheadLog.sync

    def counting(self: WriteAheadLog) -> None:
        counted.append(1)
        sync(self)

    monkeypatch.setattr(WriteAheadLog, "sync", counting)
    yield counted


def test_messages_sent_back_to_back_are_committed_in_few_groups(
    tmp_path: Path, flushes: list[int]
) -> None:
    """2,000 messages to three queues, written as the real client writes them, then the
    connection closed: all there, in order per queue, byte-exact, in far fewer commits
    than messages."""
    queues = [queue_name("c") for _ in range(3)]
    count = 2000
    frames = b"".join(wire.send(queues[n % 3], content(n)) for n in range(count))
    with InProcessGateway(tmp_path) as gateway:
        send_like_php_mq(gateway.port, frames)
        wait_for_depths(tmp_path, {q: len(range(i, count, 3)) for i, q in enumerate(queues)})
        # counted by the event loop once the commit's call returns: a moment after
        wait_for_metric(gateway, "zoscii_phpmq_messages_total", count, event="received")
        commits = gateway.metric("zoscii_phpmq_commit_messages_count")
    for i, queue in enumerate(queues):
        assert read_queue(tmp_path, queue) == [content(n) for n in range(i, count, 3)]
    assert len(flushes) == commits  # a commit, a flush: nothing else flushed the log
    assert 3 <= len(flushes) <= count // 10, f"{len(flushes)} flushes for {count} messages"


def test_a_group_holds_at_most_the_commit_limits(tmp_path: Path, flushes: list[int]) -> None:
    queue = queue_name()
    frames = b"".join(wire.send(queue, b"%04d" % n) for n in range(500))
    with InProcessGateway(tmp_path, ZOSCII_PHPMQ_COMMIT_MESSAGES="40") as gateway:
        send_like_php_mq(gateway.port, frames)
        wait_for_depths(tmp_path, {queue: 500})
        wait_for_metric(gateway, "zoscii_phpmq_messages_total", 500, event="received")
        at_most_40 = gateway.metric("zoscii_phpmq_commit_messages_bucket", le="50.0")
        commits = gateway.metric("zoscii_phpmq_commit_messages_count")
        over_20 = commits - gateway.metric("zoscii_phpmq_commit_messages_bucket", le="20.0")
    assert read_queue(tmp_path, queue) == [b"%04d" % n for n in range(500)]
    assert at_most_40 == commits >= 500 / 40  # none over 40 (the buckets: ..., 20, 50, ...)
    assert over_20  # and they were groups, not one message each
    assert len(flushes) == commits


def test_the_acks_a_connection_received_are_settled_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """200 acks in one write: settled by a few calls into the core, not 200."""
    calls: list[int] = []
    ack = ConsumerGroups.ack

    def counting(self: ConsumerGroups, queue: str, group: str, receipts: list[str]) -> object:
        calls.append(len(receipts))
        return ack(self, queue, group, receipts)

    monkeypatch.setattr(ConsumerGroups, "ack", counting)
    queue = queue_name()
    store = QueueStore(DataDir(tmp_path))
    uploads = [Upload(store.data_dir) for _ in range(200)]
    for number, upload in enumerate(uploads):
        upload.write(b"m%d" % number)
    store.publish_many(queue, [Outgoing(upload, None) for upload in uploads])
    for upload in uploads:
        upload.discard()
    store.close()
    with InProcessGateway(tmp_path) as gateway, gateway.connect() as client:
        client.send(wire.consume(queue, 200))
        got = [client.read(timeout=10) for _ in range(200)]
        assert [m.content for m in got] == [b"m%d" % n for n in range(200)]
        client.send(b"".join(wire.ack(queue, m.id) for m in got))
        wait_for_metric(gateway, "zoscii_phpmq_messages_total", 200, event="acked")
    assert sum(calls) == 200
    assert len(calls) <= 20, calls
    stats = ConsumerGroups(DataDir(tmp_path), QueueStore(DataDir(tmp_path))).stats(queue, "phpmq")
    assert (stats.acked, stats.leased, stats.waiting) == (200, 0, 0)


def test_what_came_before_a_malformed_frame_is_committed(tmp_path: Path) -> None:
    """The messages read whole before a frame that ends the connection are published, as
    they were when each was published on its own."""
    queue = queue_name()
    with InProcessGateway(tmp_path) as gateway, gateway.connect() as client:
        good = b"".join(wire.send(queue, b"kept %d" % n) for n in range(5))
        client.send(good + b"X0100202 not a message")
        client.wait_closed()
        wait_for_depths(tmp_path, {queue: 5})
        assert gateway.metric("zoscii_phpmq_protocol_errors_total", reason="bad_flag") == 1
    assert read_queue(tmp_path, queue) == [b"kept %d" % n for n in range(5)]


def test_kill_9_while_a_client_sends_leaves_what_was_committed_whole(tmp_path: Path) -> None:
    """The gateway killed while a client is still sending (4,000 messages, some of them
    large): after recovery every message it had committed is there, in order, each
    once and byte-exact; what it had not committed is simply not there."""
    queue = queue_name("k")
    count = 4000
    frames = b"".join(wire.send(queue, content(n)) for n in range(count))
    gateway = GatewayProcess(tmp_path).start()
    sender = threading.Thread(target=_send_quietly, args=(gateway.port, frames), daemon=True)
    try:
        sender.start()
        store = QueueStore(DataDir(tmp_path))
        try:
            deadline = time.monotonic() + 30
            while (committed := depth(store, queue)) < 300:
                assert time.monotonic() < deadline, gateway.log()
                time.sleep(0.002)
        finally:
            store.close()
        gateway.kill()  # SIGKILL: no stop, no last commit
    finally:
        gateway.kill()
        sender.join(30)
    restarted = GatewayProcess(tmp_path).start()  # recovers what the kill left, at start
    try:
        kept = restarted.messages(queue)
    finally:
        restarted.terminate()
        restarted.kill()
    assert committed <= len(kept) < count  # killed in the middle, as meant
    assert [data for _, data in kept] == [content(n) for n in range(len(kept))]
    assert len({name for name, _ in kept}) == len(kept)


def _send_quietly(port: int, frames: bytes) -> None:
    with contextlib.suppress(OSError):  # the gateway dies under it
        send_like_php_mq(port, frames)
