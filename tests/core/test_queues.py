"""Queues: ordering, visibility, nonces, the index as a cache, and crashes."""

import bisect
import errno
import hashlib
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.publisher import payload
from tests.support.queues import publish_many
from zosciimq.core import DataDir, QueueStore, Upload, parse_name
from zosciimq.core import index as idx
from zosciimq.core.locking import FileLock
from zosciimq.core.nonces import Nonces
from zosciimq.errors import QueueNotFound, StorageFull, TryAgain

REPO = Path(__file__).resolve().parents[2]


def drain(queues: QueueStore, queue: str, after: str = "") -> list[tuple[str, bytes]]:
    """Follow the queue by pointer as a consumer does."""
    seen = []
    while True:
        result = queues.fetch(queue, after)
        if result.file is None:
            return seen
        with result.file:
            seen.append((result.name, result.file.read()))
        after = result.name


def test_names_increase_in_publish_order(publish, queues, clock) -> None:
    names = [publish("orders", b"a"), publish("orders", b"b")]
    clock.advance(seconds=1)
    names.append(publish("orders", b"c"))
    assert names == sorted(names) and len(set(names)) == 3
    assert [parse_name(n).counter for n in names] == [0, 1, 0]
    assert [body for _, body in drain(queues, "orders")] == [b"a", b"b", b"c"]


def test_names_keep_increasing_when_the_clock_steps_back(publish, clock) -> None:
    first = publish("orders", b"1")
    clock.advance(hours=-2)
    second = publish("orders", b"2")
    assert second > first
    assert parse_name(second).stamp == parse_name(first).stamp


def test_retention_digits_are_in_the_name(publish) -> None:
    assert parse_name(publish("orders", b"x", retention=30)).retention_days == 30


def test_more_than_ten_thousand_in_one_second_asks_to_try_again(
    publish, data_dir, queues, clock
) -> None:
    stamp = clock.now.strftime("%Y%m%d%H%M%S")
    queue_dir = data_dir.queue_dir("busy")
    queue_dir.mkdir(parents=True)
    (queue_dir / f"{stamp}9999-0001-{uuid.uuid4()}.bin").write_bytes(b"last of the second")
    with pytest.raises(TryAgain):
        publish("busy", b"one too many")
    assert len(list(queue_dir.iterdir())) == 1
    clock.advance(seconds=1)
    assert publish("busy", b"next second") is not None


def test_fetch_replies_for_missing_empty_and_caught_up(publish, queues, data_dir) -> None:
    with pytest.raises(QueueNotFound):
        queues.fetch("nope")
    data_dir.queue_dir("quiet").mkdir(parents=True)
    assert queues.fetch("quiet").queue_empty
    name = publish("quiet", b"x")
    caught_up = queues.fetch("quiet", name)
    assert caught_up.file is None and not caught_up.queue_empty


def test_a_pointer_at_a_deleted_message_still_finds_the_next(publish, queues, data_dir) -> None:
    names = [publish("orders", bytes([i])) for i in range(5)]
    for gone in names[1:4]:
        (data_dir.queue_dir("orders") / gone).unlink()
    result = queues.fetch("orders", names[1])
    assert result.name == names[4]
    result.close()
    assert [n for n, _ in drain(queues, "orders")] == [names[0], names[4]]


def test_files_written_by_another_program_are_seen(publish, queues, data_dir, clock) -> None:
    """The original PHP server (or an operator) may write into the same directory."""
    first = publish("orders", b"ours")
    clock.advance(seconds=5)
    foreign = f"{clock.now.strftime('%Y%m%d%H%M%S')}0000-0000-{uuid.uuid4()}.bin"
    (data_dir.queue_dir("orders") / foreign).write_bytes(b"theirs")
    (data_dir.queue_dir("orders") / "notes.txt").write_bytes(b"not a message")
    assert drain(queues, "orders") == [(first, b"ours"), (foreign, b"theirs")]
    clock.advance(seconds=-10)  # and the sequencer continues above the foreign name
    assert publish("orders", b"later") > foreign


def test_the_index_survives_restarts_and_is_rebuilt_when_lost(publish, data_dir, clock) -> None:
    names = [publish("orders", bytes([i])) for i in range(3)]
    assert [n for n, _ in drain(QueueStore(data_dir, clock=clock), "orders")] == names
    data_dir.index_path("orders").unlink()
    assert [n for n, _ in drain(QueueStore(data_dir, clock=clock), "orders")] == names
    data_dir.index_path("orders").write_bytes(b"garbage")  # torn or corrupt
    assert [n for n, _ in drain(QueueStore(data_dir, clock=clock), "orders")] == names


def test_uploads_left_in_temp_never_show_up(publish, queues, data_dir) -> None:
    upload = Upload(data_dir)
    upload.write(b"half a message")
    upload.sync()  # the process "dies" here: never committed, never discarded
    assert upload.path.parent == data_dir.temp
    publish("orders", b"whole")
    assert [body for _, body in drain(queues, "orders")] == [b"whole"]


def test_upload_is_removed_when_not_committed(data_dir) -> None:
    with Upload(data_dir) as upload:
        upload.write(b"abc")
    assert list(data_dir.temp.iterdir()) == []


def test_a_publisher_dying_after_the_rename_is_finished_by_the_next(
    publish, data_dir, queues, monkeypatch
) -> None:
    """Crash between "renamed into place" and "committed": invisible, then completed in order."""
    first = publish("orders", b"1")

    class Died(BaseException):
        pass

    def die(*args: object, **kwargs: object) -> None:
        raise Died

    monkeypatch.setattr(Nonces, "mark_many", die)
    with pytest.raises(Died):
        publish("orders", b"2", nonce="retry-token")
    header = idx.IndexFile.open(data_dir.index_path("orders")).header()
    assert header.pending == 1
    orphan = header.last
    assert (data_dir.queue_dir("orders") / orphan).exists()
    monkeypatch.undo()

    # The next one to look (here a reader; a publisher does the same) sees the queue lock
    # free with a publish pending: its publisher died, so it finishes it, in order.
    assert drain(queues, "orders") == [(first, b"1"), (orphan, b"2")]
    assert publish("orders", b"2", nonce="retry-token") is None  # the retry: already there
    third = publish("orders", b"3")
    assert drain(queues, "orders") == [(first, b"1"), (orphan, b"2"), (third, b"3")]


def test_a_reader_does_not_finish_a_publish_that_is_still_running(
    publish, data_dir, queues
) -> None:
    """pending set while the publisher holds the lock: the reader trusts the index."""
    first = publish("orders", b"1")
    index = idx.IndexFile.open(data_dir.index_path("orders"))
    header = index.header()
    lock = FileLock(data_dir.queue_lock_path("orders"))
    lock.acquire()
    try:
        in_flight = "209912312359590000-0001-00000000-0000-4000-8000-000000000000.bin"
        index.write_records(header.committed, [in_flight])
        header.pending, header.last = 1, in_flight
        index.write_header(header)
        (data_dir.queue_dir("orders") / in_flight).write_bytes(b"in flight")
        seen = []
        reader = threading.Thread(target=lambda: seen.extend(drain(queues, "orders")))
        reader.start()
        reader.join(timeout=10)
        assert seen == [(first, b"1")], "a reader made an in-flight publish visible"
    finally:
        lock.release()
        index.close()


@pytest.mark.parametrize("step", ["write_records", "write_header"])
def test_a_failed_index_write_leaves_nothing_behind(publish, data_dir, monkeypatch, step) -> None:
    """Disk full writing the index, before anything else of the publish."""

    def full(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(idx.IndexFile, step, full)
    with pytest.raises(StorageFull):
        publish("orders", b"x", nonce="n-1")
    assert list(data_dir.queue_dir("orders").iterdir()) == []
    assert not data_dir.nonce_path("n-1").exists()
    assert list(data_dir.temp.iterdir()) == []
    monkeypatch.undo()
    assert publish("orders", b"y", nonce="n-1") is not None  # the retry goes through


def test_a_nonce_stores_once_across_queues_and_the_store(publish, store, data_dir) -> None:
    assert publish("orders", b"x", nonce="abc") is not None
    assert publish("orders", b"x", nonce="abc") is None
    assert publish("other", b"x", nonce="abc") is None
    with Upload(data_dir) as upload:
        upload.write(b"x")
        assert store.store(upload, retention_days=0, nonce="abc").duplicate
    assert data_dir.nonce_path("abc").exists()


def test_concurrent_requests_with_one_nonce_store_once(data_dir, queues) -> None:
    results: list[str | None] = []
    barrier = threading.Barrier(8)

    def worker() -> None:
        with Upload(data_dir) as upload:
            upload.write(b"same")
            barrier.wait()
            results.append(queues.publish("orders", upload, retention_days=0, nonce="once").name)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(name is not None for name in results) == 1
    assert len(list(data_dir.queue_dir("orders").iterdir())) == 1


def test_concurrent_first_publishes_to_a_new_queue_all_succeed(data_dir, queues) -> None:
    barrier = threading.Barrier(8)
    names: list[str] = []

    def worker(number: int) -> None:
        with Upload(data_dir) as upload:
            upload.write(b"%d" % number)
            barrier.wait()
            names.append(queues.publish("fresh", upload, retention_days=0).name)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(names)) == 8
    assert [n for n, _ in drain(queues, "fresh")] == sorted(names)


def test_consumer_sees_every_message_once_in_order_while_processes_publish(tmp_path) -> None:
    """Three publishing processes and a pointer-following consumer, all at once."""
    data_dir = DataDir(tmp_path / "data")
    data_dir.ensure()
    publishers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.support.publisher", str(data_dir.root), "q", "300", tag],
            stdout=subprocess.PIPE,
            cwd=REPO,
        )
        for tag in ("a", "b", "c")
    ]
    consumer = QueueStore(data_dir)
    seen: list[tuple[str, bytes]] = []
    after = ""
    while True:
        running = any(p.poll() is None for p in publishers)
        try:
            result = consumer.fetch("q", after)
        except QueueNotFound:
            continue
        if result.file is None:
            if not running:
                break
            continue
        with result.file:
            seen.append((result.name, result.file.read()))
        after = result.name
    acked = {}
    for publisher in publishers:
        out, _ = publisher.communicate()
        assert publisher.returncode == 0
        for line in out.decode().splitlines():
            name, digest = line.split()
            acked[name] = digest
    names = [name for name, _ in seen]
    assert names == sorted(names), "a consumer saw names out of order"
    assert len(names) == len(set(names)) == 900, "a message was seen twice or missed"
    assert set(names) == set(acked)
    for name, body in seen:
        assert hashlib.sha256(body).hexdigest() == acked[name]


def test_kill_9_while_publishing_loses_no_acknowledged_message(tmp_path) -> None:
    data_dir = DataDir(tmp_path / "data")
    data_dir.ensure()
    publisher = subprocess.Popen(
        [sys.executable, "-m", "tests.support.publisher", str(data_dir.root), "q", "100000", "k"],
        stdout=subprocess.PIPE,
        cwd=REPO,
    )
    acked = {}
    assert publisher.stdout is not None
    for line in publisher.stdout:
        name, digest = line.decode().split()
        acked[name] = digest
        if len(acked) == 400:
            publisher.send_signal(signal.SIGKILL)
            break
    rest, _ = publisher.communicate()
    for line in rest.decode().splitlines():  # acknowledged before the kill landed
        if len(line.split()) == 2:
            name, digest = line.split()
            acked[name] = digest

    queues = QueueStore(data_dir)
    with Upload(data_dir) as upload:
        upload.write(b"after the crash")
        after_crash = queues.publish("q", upload, retention_days=1).name
    seen = drain(queues, "q")
    names = [name for name, _ in seen]
    assert names == sorted(names) and len(names) == len(set(names))
    assert names[-1] == after_crash
    for name, body in seen[:-1]:
        if name in acked:
            assert hashlib.sha256(body).hexdigest() == acked[name]
        else:  # the one in flight at the kill: whole, or not there at all
            number = int(body.split(b"\x00")[0].split(b":")[1])
            assert body == payload("k", number)
    assert set(acked) <= set(names), "an acknowledged message was lost"
    on_disk = {p.name for p in data_dir.queue_dir("q").iterdir()}
    assert on_disk == set(names), "a message file exists that consumers cannot see"


def test_a_consumer_following_its_pointer_is_not_searched_for(data_dir, queues, monkeypatch):
    """The next fetch after a name just handed out starts at that name's position: a
    few reads per fetch, not a binary search, and still correct when the hint is stale."""
    names = []
    for start in range(0, 2000, 200):  # an index of 2000 names, written 200 at a time
        bodies = [b"%d" % i for i in range(start, start + 200)]
        names += [r.name for r in publish_many(queues, data_dir, "q", bodies)]
    assert queues.fetch("q", names[1000]).name == names[1001]  # warm: a search
    reads = []
    real_pread = os.pread
    me = threading.get_ident()  # not the background checkpoint's reads of the log

    def counting_pread(*args: Any) -> bytes:
        if threading.get_ident() == me:
            reads.append(args)
        return real_pread(*args)

    monkeypatch.setattr(os, "pread", counting_pread)
    after = names[1001]
    for expected in names[1002:1010]:
        result = queues.fetch("q", after)
        result.close()
        assert result.name == expected
        after = result.name
    monkeypatch.undo()
    assert len(reads) <= 8 * 4, f"{len(reads)} reads for 8 fetches: searched every time"


def test_links_planted_in_the_data_directory_are_never_followed(
    publish, queues, data_dir, tmp_path
) -> None:
    """Issue 15: a linked queue directory was read and written through, a linked message
    file served. Neither is followed; the rest of the queue is served as before."""
    from zosciimq.errors import QueueUnusable

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"not yours")
    data_dir.queues.joinpath("linked").symlink_to(outside, target_is_directory=True)
    with pytest.raises(QueueNotFound):
        queues.fetch("linked")
    with pytest.raises(QueueUnusable):
        publish("linked", b"x")
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]

    first = publish("q", b"first")
    planted = "209901010000000000-0001-00000000-0000-4000-8000-000000000000.bin"
    data_dir.queue_dir("q").joinpath(planted).symlink_to(outside / "secret")
    queues.rebuild_index("q")
    assert drain(queues, "q") == [(first, b"first")], "a linked message file was served"

    index = data_dir.index_path("q")
    index.unlink()
    index.symlink_to(outside / "secret")
    later = publish("q", b"later")
    assert not index.is_symlink() and (outside / "secret").read_bytes() == b"not yours"
    assert [body for _, body in drain(queues, "q")] == [b"first", b"later"] and later


_TIMED_PUBLISHER = """
import sys, time
from zosciimq.core import DataDir, QueueStore, Upload
root, queue, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
layout = DataDir(root)
queues = QueueStore(layout)
print("ready", flush=True)
go = int(sys.stdin.readline())
while time.monotonic_ns() < go:
    time.sleep(0.001)
for i in range(count):
    began = time.monotonic_ns()
    with Upload(layout) as upload:
        upload.write(b"%d" % i)
        name = queues.publish(queue, upload, retention_days=1).name
    print(began, time.monotonic_ns(), name, flush=True)
"""


def test_names_rise_in_acknowledgement_order_across_processes(tmp_path) -> None:
    """Three processes publishing at once: a publish that began after another one (of any
    process) was acknowledged always has the higher name. (CLOCK_MONOTONIC is one clock
    for every process of the machine.)"""
    data_dir = DataDir(tmp_path / "data")
    data_dir.ensure()
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _TIMED_PUBLISHER, str(data_dir.root), "q", "150"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=REPO,
        )
        for _ in range(3)
    ]
    for child in children:  # the interpreters start, then all begin at once
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
    go = b"%d\n" % (time.monotonic_ns() + 50_000_000)
    for child in children:
        assert child.stdin is not None
        child.stdin.write(go)
        child.stdin.close()
    spans = []
    for child in children:
        assert child.stdout is not None
        out = child.stdout.read()  # 150 lines: each child's fit in its pipe meanwhile
        assert child.wait(timeout=120) == 0
        for line in out.decode().splitlines():
            began, ended, name = line.split()
            spans.append((int(began), int(ended), name))
    names = [name for _, _, name in spans]
    assert len(set(names)) == 450
    assert [n for n, _ in drain(QueueStore(data_dir), "q")] == sorted(names)
    by_end = sorted(spans, key=lambda span: span[1])
    ends = [ended for _, ended, _ in by_end]
    highest = list(itertools.accumulate((name for _, _, name in by_end), max))
    for began, _, name in spans:
        done_before = bisect.bisect_left(ends, began)  # acknowledged before this began
        if done_before:
            assert highest[done_before - 1] < name, "a later publish got a lower name"
