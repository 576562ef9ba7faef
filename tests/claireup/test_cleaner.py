"""One run against a real data directory, with the clock in the test's hand."""

from __future__ import annotations

import os
import threading
from datetime import UTC, datetime, timedelta

import pytest

from tests.support.clock import FakeClock
from tests.support.message_files import (
    all_files,
    set_mtime,
    utc,
    write_queue_message,
    write_store_message,
)
from tests.support.queues import publish_body
from zoscii_claireup.report import AREA_INDEX, AREA_NONCE, AREA_QUEUE, AREA_STORE, AREA_TEMP
from zosciimq.core import DataDir, QueueStore, Upload, orphans
from zosciimq.core.index import IndexFile
from zosciimq.core.nonces import Nonces


def publish(queues: QueueStore, queue: str, body: bytes, retention: int) -> str:
    name = publish_body(queues, queue, body, retention).name
    assert name is not None
    return name


def index_names(data_dir: DataDir, queue: str) -> list[str]:
    with IndexFile.open(data_dir.index_path(queue)) as index:
        return list(index.iter_from(0, index.header().committed))


class StopAfter(threading.Event):
    """A stop event that a SIGTERM would have set after ``files`` files."""

    def __init__(self, files: int) -> None:
        super().__init__()
        self.remaining = files

    def is_set(self) -> bool:
        self.remaining -= 1
        return self.remaining < 0 or super().is_set()


def test_exactly_the_expired_set_is_deleted(data_dir, clock, make_cleaner):
    now = clock.now
    second = timedelta(seconds=1)
    due, kept = set(), set()
    for queue in ("orders", "audit-log"):
        due.add(write_queue_message(data_dir, queue, now, 0))  # RRRR 0000, this very second
        due.add(write_queue_message(data_dir, queue, now - timedelta(days=400), 0))
        kept.add(write_queue_message(data_dir, queue, now + second, 0))  # clock behind a peer
        due.add(write_queue_message(data_dir, queue, now - timedelta(days=1), 1))  # at expiry
        kept.add(write_queue_message(data_dir, queue, now - timedelta(days=1) + second, 1))
        due.add(write_queue_message(data_dir, queue, now - timedelta(days=9999), 9999))
        kept.add(write_queue_message(data_dir, queue, now - timedelta(days=9999) + second, 9999))
        kept.add(write_queue_message(data_dir, queue, now, 9999))
    due.add(write_store_message(data_dir, now - timedelta(days=7), 7, b"12345"))
    due.add(write_store_message(data_dir, now - timedelta(days=7), 7, unidentified=True))
    kept.add(write_store_message(data_dir, now - timedelta(days=7) + second, 7))
    kept.add(write_store_message(data_dir, now, 1, unidentified=True))
    due.add(write_store_message(data_dir, now - timedelta(minutes=1), 0))

    report = make_cleaner().run()

    remaining = all_files(data_dir.queues) | all_files(data_dir.store)
    assert remaining == kept
    assert not report.interrupted and report.outcome == "success"
    assert report.tally(AREA_QUEUE, "orders").deleted == 4
    assert report.tally(AREA_QUEUE, "audit-log").deleted == 4
    assert report.tally(AREA_QUEUE, "orders").scanned == 8
    assert report.tally(AREA_STORE).deleted == 3
    assert report.tally(AREA_STORE).deleted_bytes == 5 + 1 + 1
    assert report.total().deleted == len(due)
    assert report.total().unparsable == 0
    # the directories themselves stay: a publisher may be about to rename into them
    assert data_dir.queue_dir("orders").is_dir()


def test_a_second_later_the_next_second_is_due(data_dir, clock, make_cleaner):
    message = write_queue_message(data_dir, "q", clock.now - timedelta(days=3), 3)
    clock.advance(seconds=-1)
    assert make_cleaner().run().total().deleted == 0
    assert message.exists()
    clock.advance(seconds=1)
    assert make_cleaner().run().total().deleted == 1
    assert not message.exists()


def test_leap_day(data_dir, make_cleaner, clock):
    clock.now = utc(2024, 2, 29, 10, 0, 0)
    due = write_queue_message(data_dir, "q", utc(2024, 2, 28, 10, 0, 0), 1)
    not_yet = write_queue_message(data_dir, "q", utc(2024, 2, 28, 10, 0, 1), 1)
    published_today = write_queue_message(data_dir, "q", utc(2024, 2, 29, 0, 0, 0), 1)
    make_cleaner().run()
    assert not due.exists()
    assert not_yet.exists() and published_today.exists()
    clock.now = utc(2024, 3, 1, 0, 0, 0)  # 2024-02-29 + 1 day, not 2024-03-02
    make_cleaner().run()
    assert not not_yet.exists() and not published_today.exists()


def test_unparsable_files_are_kept_and_reported(data_dir, clock, make_cleaner, tmp_path):
    long_ago = clock.now - timedelta(days=365)
    queue = data_dir.queue_dir("orders")
    good = write_queue_message(data_dir, "orders", long_ago, 0)
    stamp = good.name[:14]
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"not ours")
    strange = [
        queue / "notes.txt",
        queue / good.name.upper(),  # upper-case GUID
        queue / ("20251301000000" + good.name[14:]),  # month 13
        queue / (good.name[:-4] + ".bin.bak"),
        queue / (stamp + "0000-00x1" + good.name[23:]),
        data_dir.queues / "README",
        data_dir.queues / "Orders" / good.name,  # not a queue name: not a queue
        data_dir.store / "stray.bin",
        data_dir.store / "a" / "stray.bin",
        data_dir.store / "a" / "b" / "c" / "garbage.bin",
        data_dir.nonces / "bad nonce!",
    ]
    for path in strange:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"?")
    named_like_a_message = queue / write_queue_message(data_dir, "other", long_ago, 0).name
    named_like_a_message.mkdir()
    link = queue / write_queue_message(data_dir, "other", long_ago, 0).name
    link.symlink_to(outside)
    deep = data_dir.store / "a" / "b" / "c" / "d"
    deep.mkdir()

    report = make_cleaner().run()

    for path in [*strange, named_like_a_message, link, outside, deep]:
        assert os.path.lexists(path), path
    assert not good.exists()  # the rest of the queue was cleaned as usual
    assert report.tally(AREA_QUEUE, "orders").unparsable == 7
    assert report.tally(AREA_QUEUE).unparsable == 2  # README and Orders/
    assert report.tally(AREA_STORE).unparsable == 4
    assert report.tally(AREA_NONCE).unparsable == 1
    assert str(data_dir.store / "a" / "b" / "c" / "garbage.bin") in report.unparsable_sample
    assert report.outcome == "success"  # unparsable files are reported, not errors


def test_the_unparsable_report_is_capped(data_dir, make_cleaner):
    data_dir.queue_dir("q").mkdir(parents=True)
    for number in range(30):
        (data_dir.queue_dir("q") / f"junk-{number}").write_bytes(b"")
    report = make_cleaner(report_limit=10).run()
    assert report.tally(AREA_QUEUE, "q").unparsable == 30
    assert len(report.unparsable_sample) == 11 and report.unparsable_sample[-1] == "..."


def test_nonce_markers_older_than_the_window(data_dir, clock, make_cleaner):
    nonces = Nonces(data_dir)
    ages = {"old": 301, "at-window": 300, "young": 10, "from-the-future": -60}
    for nonce, age in ages.items():
        assert nonces.mark(nonce)
        set_mtime(data_dir.nonce_path(nonce), clock.now - timedelta(seconds=age))

    report = make_cleaner(nonce_window_seconds=300).run()

    assert not nonces.used("old")
    assert all(nonces.used(nonce) for nonce in ("at-window", "young", "from-the-future"))
    assert report.tally(AREA_NONCE).deleted == 1
    assert report.tally(AREA_NONCE).scanned == 4


def test_upload_leftovers_older_than_the_safe_age(data_dir, make_cleaner):
    now = datetime.now(UTC)
    clock = FakeClock(now)
    crashed = data_dir.temp / "0123456789abcdef.part"
    crashed.write_bytes(b"half a message")
    set_mtime(crashed, now - timedelta(hours=25))
    recent = data_dir.temp / "fedcba9876543210.part"
    recent.write_bytes(b"x")
    set_mtime(recent, now - timedelta(hours=23))
    # an upload that started long ago and is still streaming: each write refreshes mtime
    with Upload(data_dir) as slow:
        slow.write(b"first chunk")
        set_mtime(slow.path, now - timedelta(days=3))
        slow.write(b", second chunk")

        report = make_cleaner(clock=clock, temp_max_age_seconds=24 * 3600).run()

        assert not crashed.exists()
        assert recent.exists() and slow.path.exists()
        name = QueueStore(data_dir).publish("q", slow, retention_days=1).name
    assert (data_dir.queue_dir("q") / name).read_bytes() == b"first chunk, second chunk"
    assert report.tally(AREA_TEMP).deleted == 1
    assert report.tally(AREA_TEMP).deleted_bytes == len(b"half a message")


def test_dry_run_deletes_nothing_and_lists_what_a_run_would(data_dir, clock, make_cleaner):
    for queue in ("a", "b"):
        for days in range(5):
            write_queue_message(data_dir, queue, clock.now - timedelta(days=days), 2)
    write_store_message(data_dir, clock.now - timedelta(days=30), 1)
    Nonces(data_dir).mark("n1")
    set_mtime(data_dir.nonce_path("n1"), clock.now - timedelta(hours=1))
    leftover = data_dir.temp / "dead.part"
    leftover.write_bytes(b"")
    set_mtime(leftover, clock.now - timedelta(days=2))
    QueueStore(data_dir).rebuild_index("a")
    before = {path: path.stat().st_mtime_ns for path in all_files(data_dir.root)}

    listed: list[tuple[str, int]] = []
    dry = make_cleaner(dry_run_sink=lambda path, size: listed.append((path, size))).run(
        dry_run=True
    )

    assert {path: path.stat().st_mtime_ns for path in all_files(data_dir.root)} == before
    assert dry.dry_run and dry.total().deleted == len(listed) == 3 * 2 + 1 + 1 + 1
    real = make_cleaner().run()
    assert set(map(str, set(before) - all_files(data_dir.root))) == {path for path, _ in listed}
    assert real.total().deleted == dry.total().deleted
    assert real.total().deleted_bytes == dry.total().deleted_bytes


def test_a_consumer_pointing_at_a_deleted_message_gets_the_next(data_dir, clock, make_cleaner):
    publisher_clock = FakeClock(clock.now - timedelta(days=10))
    queues = QueueStore(data_dir, clock=publisher_clock)
    expired = [publish(queues, "jobs", b"old %d" % n, 2) for n in range(5)]
    publisher_clock.now = clock.now - timedelta(hours=1)
    fresh = [publish(queues, "jobs", b"new %d" % n, 2) for n in range(3)]
    pointer = expired[2]

    report = make_cleaner().run()

    assert report.tally(AREA_QUEUE, "jobs").deleted == 5
    # the index holds exactly what is on disk, so nobody steps over deleted names
    assert index_names(data_dir, "jobs") == fresh
    consumer = QueueStore(data_dir, clock=clock)
    result = consumer.fetch("jobs", after=pointer)
    try:
        assert result.name == fresh[0]
        assert result.file.read() == b"new 0"
    finally:
        result.close()
    assert consumer.depth("jobs") == 3


def test_the_index_keeps_its_floor_after_a_queue_is_emptied(data_dir, clock, make_cleaner):
    publisher_clock = FakeClock(clock.now - timedelta(days=10))
    queues = QueueStore(data_dir, clock=publisher_clock)
    names = [publish(queues, "q", b"m", 1) for _ in range(3)]
    make_cleaner().run()
    assert index_names(data_dir, "q") == []
    # a publisher whose clock stepped back still gets a name above the deleted ones,
    # so a consumer holding names[-1] as its pointer does not miss the new message
    publisher_clock.now = clock.now - timedelta(days=20)
    newer = publish(queues, "q", b"after the cleanup", 1)
    assert newer > names[-1]
    result = queues.fetch("q", after=names[-1])
    assert result.name == newer
    result.close()


def test_indexes_of_vanished_queues_and_stale_rebuild_leftovers(data_dir, clock, make_cleaner):
    queues = QueueStore(data_dir, clock=clock)
    publish(queues, "kept", b"m", 5)
    publish(queues, "gone", b"m", 5)
    assert data_dir.wal_path("gone").exists()  # created with the queue's first publish
    data_dir.journal_path("gone").write_bytes(b"")  # as an earlier version left it
    for path in data_dir.queue_dir("gone").iterdir():
        path.unlink()
    data_dir.queue_dir("gone").rmdir()  # an operator removed the queue
    for sidecar in (data_dir.ttl_path("gone"), data_dir.usage_path("gone")):
        sidecar.write_bytes(b"expiries or policy counts")
    data_dir.ttl_path("kept").write_bytes(b"")
    old_tmp = data_dir.indexes / ".kept.idx.0123abcd.tmp"
    young_tmp = data_dir.indexes / ".kept.idx.4567cdef.tmp"
    for path, age in ((old_tmp, timedelta(days=2)), (young_tmp, timedelta(minutes=5))):
        path.write_bytes(b"")
        set_mtime(path, clock.now - age)
    locks_before = set(data_dir.locks.iterdir())

    report = make_cleaner().run()

    # a queue's write-ahead log (and an old journal) goes with its index, and only then
    assert not data_dir.index_path("gone").exists() and not data_dir.wal_path("gone").exists()
    assert not data_dir.journal_path("gone").exists()
    assert data_dir.index_path("kept").exists() and data_dir.wal_path("kept").exists()
    assert not old_tmp.exists() and young_tmp.exists()
    assert set(data_dir.locks.iterdir()) == locks_before  # lock files are never removed
    assert not data_dir.ttl_path("gone").exists() and not data_dir.usage_path("gone").exists()
    assert data_dir.ttl_path("kept").exists()
    assert report.tally(AREA_INDEX).deleted == 6


def test_the_vanished_queue_rule_is_the_cores(data_dir, make_cleaner, monkeypatch) -> None:
    """claireup asks ``zosciimq.core.orphans`` for every index-directory file of a queue
    and counts what it freed; it judges none of them itself."""
    asked = []

    def forget(data_dir, found, *, dry_run=False):
        asked.append((found.name, dry_run))
        return 7 if found.queue == "gone" else None

    monkeypatch.setattr(orphans, "forget_if_vanished", forget)
    for queue in ("gone", "kept"):
        data_dir.index_path(queue).parent.mkdir(parents=True, exist_ok=True)
        data_dir.index_path(queue).write_bytes(b"")
    report = make_cleaner().run(dry_run=True)
    assert sorted(asked) == [("gone.idx", True), ("kept.idx", True)]
    assert (report.tally(AREA_INDEX).deleted, report.tally(AREA_INDEX).deleted_bytes) == (1, 7)
    assert data_dir.index_path("gone").exists()


def test_an_interrupted_run_stops_and_a_rerun_finishes(data_dir, clock, make_cleaner):
    due, kept = set(), set()
    for queue in ("a", "b", "c"):
        for number in range(40):
            published = clock.now - timedelta(days=number % 4, minutes=number)
            path = write_queue_message(data_dir, queue, published, 2)
            (due if number % 4 >= 2 else kept).add(path)
        QueueStore(data_dir).rebuild_index(queue)

    first = make_cleaner(stop=StopAfter(files=50)).run()

    assert first.interrupted and first.outcome == "interrupted"
    assert 0 < first.total().deleted < len(due)
    assert kept <= all_files(data_dir.queues)
    # the queue cleaned halfway had its index rebuilt: consumers see no deleted name
    assert index_names(data_dir, "b") == sorted(p.name for p in all_files(data_dir.queue_dir("b")))

    second = make_cleaner().run()

    assert not second.interrupted
    assert first.total().deleted + second.total().deleted == len(due)
    assert all_files(data_dir.queues) == kept


def test_progress_is_logged(data_dir, clock, make_cleaner, caplog):
    for number in range(25):
        write_queue_message(data_dir, "q", clock.now - timedelta(days=1), number % 3)
    with caplog.at_level("INFO", logger="zoscii_claireup"):
        make_cleaner(progress_every_files=10).run()
    progress = [r.getMessage() for r in caplog.records if r.getMessage().startswith("progress:")]
    assert len(progress) == 2
    assert progress[0].startswith("progress: 10 files scanned")


def test_a_fresh_volume_is_an_empty_run(tmp_path, clock):
    from zoscii_claireup.cleaner import Cleaner

    cleaner = Cleaner(
        DataDir(tmp_path / "nothing-here-yet"),
        nonce_window_seconds=300,
        temp_max_age_seconds=3600,
        clock=clock,
    )
    report = cleaner.run()
    assert report.outcome == "success" and report.total().scanned == 0


def test_a_naive_clock_is_refused(make_cleaner):
    with pytest.raises(ValueError, match="naive"):
        make_cleaner(clock=lambda: datetime(2025, 1, 1)).run()
