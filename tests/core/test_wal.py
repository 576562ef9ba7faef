"""The write-ahead log: its file (a ring of checksummed records), and recovery from it.

A restart of the machine is simulated by giving the recovery another boot id: what a
power loss takes (an unflushed rename, a file's bytes) is taken by the test by hand,
which is exactly what the log must make good. The real power losses (ext4 on a loop
device, copied as the power goes) are in tests/security/test_crash_steps.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support.lanes import arrive_while_locked
from tests.support.queues import publish_body, publish_many, queue_contents, uploads_of, wal_records
from zosciimq.core import DataDir, DataStore, QueueStore, Upload
from zosciimq.core import wal as walfile
from zosciimq.core.checkpoint import CHECKPOINT_THREAD, Durability, Mode
from zosciimq.core.groups import ConsumerGroups
from zosciimq.core.names import parse_name
from zosciimq.core.outgoing import Outgoing
from zosciimq.core.wal import (
    DATA_START,
    HEAD_SIZE,
    SLOT_SIZE,
    Entry,
    LogFull,
    Record,
    WriteAheadLog,
)

REPO = Path(__file__).resolve().parents[2]
NO_CHECKPOINT = Durability(checkpoint_seconds=3600)  # the records stay to be redone


@pytest.fixture
def rebooted(monkeypatch):
    """Makes the process look like it runs after a restart of the machine."""

    def reboot() -> None:
        monkeypatch.setattr(walfile, "boot_id", lambda: f"boot-{time.monotonic_ns()}")

    return reboot


def record_of(number: int, size: int = 100) -> Record:
    return Record("q", [Entry(f"queues/q/{number:064d}", size, bytes([number % 256]) * size)])


def log_at(tmp_path: Path, name: str = "q.wal") -> WriteAheadLog:
    wal = WriteAheadLog.open(str(tmp_path / name), create=True)
    assert wal is not None
    return wal


# --- the file ---------------------------------------------------------------------------------
def test_records_go_round_the_ring_and_come_back_in_order(tmp_path: Path) -> None:
    wal = log_at(tmp_path)
    header = wal.header()
    record_size = record_of(0, 20_000).size()
    written = 0
    for lap in range(3 * (header.size // record_size)):
        record = record_of(lap, 20_000)
        if not wal.fits(header, record):  # the ring is full: checkpoint what is there
            header = wal.checkpointed(header, header.tail_off, header.tail_lsn, "")
        header = wal.append(header, record)
        if lap % 7 == 6:  # a checkpoint part of the way, as the background one does
            kept = list(wal.records(header))
            middle = kept[len(kept) // 2]
            header = wal.checkpointed(header, middle.offset, middle.lsn, "")
        written += 1
    tail = list(wal.records(header))
    assert tail, "nothing after the checkpoint"
    numbers = [r.entries[0].path for r in tail]
    assert numbers == [f"queues/q/{n:064d}" for n in range(written - len(tail), written)]
    assert all(
        r.entries[0].data == record_of(written - len(tail) + i, 20_000).entries[0].data
        for i, r in enumerate(tail)
    )
    assert os.path.getsize(wal.path) == header.size, "the log changed size"


def test_a_full_ring_refuses_a_record_until_it_is_checkpointed(tmp_path: Path) -> None:
    wal = log_at(tmp_path)
    header = wal.header()
    big = record_of(1, 300_000)
    for _ in range(3):
        header = wal.append(header, big)
    with pytest.raises(LogFull):
        wal.append(header, big)  # would overwrite the first: refused, nothing written
    assert len(list(wal.records(header))) == 3
    header = wal.checkpointed(header, header.tail_off, header.tail_lsn, "")
    header = wal.make_room(header, big, grow=False)
    header = wal.append(header, big)
    assert [r.lsn for r in wal.records(header)] == [header.tail_lsn - 1]


def test_a_record_larger_than_the_log_makes_it_grow(tmp_path: Path) -> None:
    wal = log_at(tmp_path)
    header = wal.header()
    huge = record_of(2, 3 * walfile.INITIAL_SIZE)
    assert not wal.fits(header, huge)
    header = wal.make_room(header, huge, grow=False)
    assert header.size >= 4 * walfile.INITIAL_SIZE
    header = wal.append(header, huge)
    again = WriteAheadLog.open(wal.path, create=False)
    assert again is not None
    assert [r.entries[0].data for r in again.records(again.header())] == [huge.entries[0].data]


@pytest.mark.parametrize("where", ["head", "body", "zeros"])
def test_a_torn_record_ends_the_chain(tmp_path: Path, where: str) -> None:
    """A record half written when the power went (its CRC fails) and whatever follows it
    were never answered: recovery stops before it."""
    wal = log_at(tmp_path)
    header = wal.header()
    records = [record_of(n) for n in range(5)]
    for record in records:
        header = wal.append(header, record)
    torn = records[3]
    offset = {"head": torn.offset + 8, "body": torn.offset + HEAD_SIZE + 50}.get(where)
    if offset is None:
        os.pwrite(wal.fd, bytes(torn.end - torn.offset), torn.offset)
    else:
        os.pwrite(wal.fd, b"\xff", offset)
    assert [r.lsn for r in wal.records(header)] == [r.lsn for r in records[:3]]


def test_a_torn_header_slot_leaves_the_other(tmp_path: Path) -> None:
    wal = log_at(tmp_path)
    header = wal.append(wal.header(), record_of(1))
    before = wal.write_header(header)
    header = wal.write_header(wal.append(before, record_of(2)))
    newest = (header.generation % 2) * SLOT_SIZE
    os.pwrite(wal.fd, b"garbage", newest + 40)
    reread = WriteAheadLog.open(wal.path, create=False)
    assert reread is not None
    assert reread.header().generation == before.generation
    # the chain still reaches the second record, and the tail is found past it
    assert [r.entries[0].path[-1:] for r in reread.records(reread.header())] == ["1", "2"]
    assert reread.header().tail_lsn == header.tail_lsn


def test_an_append_writes_no_header_and_the_tail_is_found_by_the_chain(tmp_path: Path) -> None:
    """A flush of the log must carry the record's blocks only, not a header slot at the
    other end of the file: another process (or a recovery) finds the tail by following
    the whole records from the header's."""
    wal = log_at(tmp_path)
    slots = os.pread(wal.fd, 2 * SLOT_SIZE, 0)
    header = wal.header()
    for number in range(3):
        header = wal.append(header, record_of(number))
    assert os.pread(wal.fd, 2 * SLOT_SIZE, 0) == slots
    other = WriteAheadLog.open(wal.path, create=False)
    assert other is not None
    seen = other.header()
    assert (seen.tail_off, seen.tail_lsn) == (header.tail_off, header.tail_lsn)
    assert header.tail_lsn == 4
    seen = other.append(seen, record_of(3))  # the other process appends: this one sees it
    assert wal.header().tail_lsn == seen.tail_lsn == 5
    assert [r.lsn for r in wal.records(wal.header())] == [1, 2, 3, 4]


def test_the_tail_stops_before_a_torn_record_and_the_next_append_takes_its_place(
    tmp_path: Path,
) -> None:
    wal = log_at(tmp_path)
    header = wal.header()
    records = [record_of(number) for number in range(3)]
    for record in records:
        header = wal.append(header, record)
    os.pwrite(wal.fd, b"\xff", records[2].offset + HEAD_SIZE + 50)  # a power loss tore it
    reopened = WriteAheadLog.open(wal.path, create=False)
    assert reopened is not None
    header = reopened.header()
    assert (header.tail_off, header.tail_lsn) == (records[2].offset, 3)
    header = reopened.append(header, record_of(7))
    assert [r.entries[0].data for r in reopened.records(header)] == [
        bytes([n]) * 100 for n in (0, 1, 7)
    ]


def test_interval_appends_write_the_header_once_after_each_checkpoint(tmp_path: Path) -> None:
    """``relaxed`` tells a recovery after a power loss to distrust newer files: it is in
    the header before the first relaxed record's files are written, then left alone."""
    wal = log_at(tmp_path)

    def on_disk() -> walfile.LogHeader:
        fresh = WriteAheadLog.open(wal.path, create=False)
        assert fresh is not None
        return fresh.header()

    header = wal.append(wal.header(), record_of(1), relaxed=True)
    assert on_disk().relaxed
    slots = os.pread(wal.fd, 2 * SLOT_SIZE, 0)
    header = wal.append(header, record_of(2), relaxed=True)
    assert os.pread(wal.fd, 2 * SLOT_SIZE, 0) == slots
    header = wal.checkpointed(header, header.tail_off, header.tail_lsn, "")
    assert not on_disk().relaxed
    wal.append(header, record_of(3), relaxed=True)
    assert on_disk().relaxed


def test_a_log_never_finished_is_made_again(tmp_path: Path) -> None:
    path = tmp_path / "q.wal"
    path.write_bytes(b"\x00" * 100)  # a crash while it was being made
    assert WriteAheadLog.open(str(path), create=False) is None
    wal = WriteAheadLog.open(str(path), create=True)
    assert wal is not None and wal.header().empty
    assert os.path.getsize(path) == walfile.INITIAL_SIZE


def test_take_back_removes_the_last_record_even_after_going_round(tmp_path: Path) -> None:
    wal = log_at(tmp_path)
    header = wal.header()
    filler = record_of(0, walfile.INITIAL_SIZE // 2)
    header = wal.append(header, filler)
    header = wal.checkpointed(header, header.tail_off, header.tail_lsn, "")
    header = wal.append(header, record_of(1))
    last = record_of(2, walfile.INITIAL_SIZE // 2)  # does not fit before the end: wraps
    header = wal.append(header, last)
    assert last.offset == DATA_START
    header = wal.take_back(header, last)
    assert [r.entries[0].path[-1:] for r in wal.records(header)] == ["1"]
    header = wal.append(header, record_of(3))
    assert [r.entries[0].path[-1:] for r in wal.records(header)] == ["1", "3"]


# --- recovery after a restart of the machine ---------------------------------------------
def test_what_a_power_loss_took_is_made_again_from_the_log(data_dir: DataDir, rebooted) -> None:
    queues = QueueStore(data_dir, durability=NO_CHECKPOINT)
    bodies = [b"missing", b"short", b"empty", b"kept", bytes(range(256))]
    uploads = uploads_of(data_dir, bodies)
    messages = [
        Outgoing(u, 3, f"n-{i}", time.time() + 3600 if i == 0 else None)
        for i, u in enumerate(uploads)
    ]
    names = [r.name for r in queues.publish_many("q", messages)]
    for upload in uploads:
        upload.discard()
    directory = data_dir.queue_dir("q")
    # What a power loss can leave of unflushed files: gone, cut short, empty, and its
    # markers and expiries gone too.
    (directory / names[0]).unlink()
    (directory / names[1]).write_bytes(b"sh")
    (directory / names[2]).write_bytes(b"")
    for i in range(5):
        data_dir.nonce_path(f"n-{i}").unlink()
    data_dir.ttl_path("q").unlink()
    data_dir.index_path("q").write_bytes(b"\x00" * 4096)

    rebooted()
    report = QueueStore(data_dir).recover_volume()
    assert report.queues == ["q"] and report.records == 1
    assert sorted(report.rewritten) == sorted(f"queues/q/{n}" for n in names[:3])
    assert queue_contents(data_dir, "q") == list(zip(names, bodies, strict=True))
    assert all(data_dir.nonce_path(f"n-{i}").exists() for i in range(5))
    assert names[0] in QueueStore(data_dir).expiries("q", names)
    assert wal_records(data_dir, "q") == [], "the redone records were not checkpointed"
    retry = publish_many(QueueStore(data_dir), data_dir, "q", [b"missing"], nonces=["n-0"])
    assert retry[0].duplicate


def test_a_queue_deleted_since_is_not_brought_back(data_dir: DataDir, rebooted) -> None:
    queues = QueueStore(data_dir, durability=NO_CHECKPOINT)
    publish_body(queues, "gone", b"x")
    for path in data_dir.queue_dir("gone").iterdir():
        path.unlink()
    data_dir.queue_dir("gone").rmdir()  # by an operator, on purpose
    rebooted()
    QueueStore(data_dir).recover_volume()
    assert not data_dir.queue_dir("gone").exists()
    assert not data_dir.wal_path("gone").exists()


def test_what_claireup_and_a_purge_delete_stays_deleted(data_dir: DataDir, rebooted) -> None:
    """A deleter deletes only what the log's checkpoint covers, so a recovery (which
    redoes records after it) never brings a deleted message back."""
    queues = QueueStore(data_dir, durability=NO_CHECKPOINT)
    first = publish_body(queues, "q", b"old").name
    bound = queues.checkpoint("q")
    assert bound == first and wal_records(data_dir, "q") == []
    later = publish_body(queues, "q", b"new").name
    assert later > bound  # not covered: a deleter leaves it for its next run
    (data_dir.queue_dir("q") / first).unlink()
    rebooted()
    QueueStore(data_dir).recover_volume()
    assert [n for n, _ in queue_contents(data_dir, "q")] == [later]


def test_interval_durability_moves_aside_what_the_log_cannot_prove(
    data_dir: DataDir, rebooted
) -> None:
    relaxed = Durability(mode=Mode.INTERVAL, checkpoint_seconds=3600)
    queues = QueueStore(data_dir, durability=relaxed)
    proven = publish_body(queues, "q", b"proven").name
    lost = publish_body(queues, "q", b"lost record").name
    # The power went after the second file's name reached the disk but before its log
    # record did (interval: answered before the flush): the log ends at the first.
    header = WriteAheadLog.open(str(data_dir.wal_path("q")), create=False).header()
    records = list(WriteAheadLog.open(str(data_dir.wal_path("q")), create=False).records(header))
    wal = WriteAheadLog.open(str(data_dir.wal_path("q")), create=False)
    os.pwrite(wal.fd, bytes(HEAD_SIZE), records[-1].offset)
    (data_dir.queue_dir("q") / lost).write_bytes(b"lost re")  # torn as well
    rebooted()
    report = QueueStore(data_dir).recover_volume()
    assert report.suspects == [f"q/{lost}"]
    assert queue_contents(data_dir, "q") == [(proven, b"proven")]
    assert (data_dir.suspects / "q" / lost).read_bytes() == b"lost re"


def test_the_store_is_made_again_from_its_log(data_dir: DataDir, rebooted) -> None:
    store = DataStore(data_dir, durability=NO_CHECKPOINT)
    with Upload(data_dir) as upload:
        upload.write(b"stored")
        name = store.store(upload, retention_days=2, nonce="s-1").name
    with Upload(data_dir) as upload:
        upload.write(b"replicated")
        given = parse_name(name.replace(name[14:18], "0001").replace(".bin", "-u.bin"))
        assert store.put(upload, given)
    path = store.path_of(parse_name(name))
    path.unlink()
    data_dir.nonce_path("s-1").unlink()
    replica = store.path_of(given)
    assert store.identify([given]) == [str(given.identified())]  # identified since
    rebooted()
    report = DataStore(data_dir).recover_volume()
    assert report.rewritten == [os.path.relpath(path, data_dir.root)]
    assert path.read_bytes() == b"stored" and data_dir.nonce_path("s-1").exists()
    assert not replica.exists(), "an identified message was made again under its -u name"


def test_a_recovery_killed_midway_is_done_again_by_the_next(tmp_path: Path) -> None:
    """kill -9 while redoing a record (between two of its files): idempotent."""
    data_dir = DataDir(tmp_path / "data")
    data_dir.ensure()
    queues = QueueStore(data_dir, durability=NO_CHECKPOINT)
    bodies = [b"m%d" % i for i in range(20)]
    names = [r.name for r in publish_many(queues, data_dir, "q", bodies)]
    for name in names:
        (data_dir.queue_dir("q") / name).unlink()
    script = (
        "import os, sys\n"
        "from zosciimq.core import DataDir, QueueStore\n"
        "from zosciimq.core import recovery, wal\n"
        "wal.boot_id = lambda: 'after-the-power-loss'\n"
        "real, made = recovery._write, []\n"
        "def dying(*a):\n"
        "    real(*a); made.append(a)\n"
        "    if len(made) == 7: os._exit(9)\n"
        "recovery._write = dying\n"
        "QueueStore(DataDir(sys.argv[1])).recover_volume()\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(data_dir.root)], cwd=REPO)
    assert done.returncode == 9
    assert 0 < len(list(data_dir.queue_dir("q").iterdir())) < 20
    walfile_boot = walfile.boot_id
    try:
        walfile.boot_id = lambda: "after-the-power-loss"  # type: ignore[assignment]
        QueueStore(data_dir).recover_volume()
    finally:
        walfile.boot_id = walfile_boot  # type: ignore[assignment]
    assert queue_contents(data_dir, "q") == list(zip(names, bodies, strict=True))


def test_a_checkpoint_killed_before_it_moved_redoes_harmlessly(
    data_dir: DataDir, rebooted, monkeypatch
) -> None:
    """The volume flushed, the process dies before the checkpoint moves: the records are
    redone (their files are there and whole: nothing to write) and nothing doubles."""
    queues = QueueStore(data_dir, durability=NO_CHECKPOINT)
    names = [r.name for r in publish_many(queues, data_dir, "q", [b"a", b"b"])]

    class Died(BaseException):
        pass

    def die(*args: object) -> None:
        raise Died

    monkeypatch.setattr(WriteAheadLog, "checkpointed", die)
    with pytest.raises(Died):
        queues.checkpoint("q")
    monkeypatch.undo()
    rebooted()
    report = QueueStore(data_dir).recover_volume()
    assert report.records == 1 and report.rewritten == []
    assert queue_contents(data_dir, "q") == list(zip(names, [b"a", b"b"], strict=True))


# --- processes -----------------------------------------------------------------------------------
def test_two_processes_on_one_queue_while_one_is_killed_again_and_again(tmp_path: Path) -> None:
    """A steady publisher and one killed -9 three times mid-stream, on one queue: nothing
    acknowledged by either is lost, names rise in acknowledgement order per process, and
    every message on disk is whole and served once."""
    data_dir = DataDir(tmp_path / "data")
    data_dir.ensure()

    def start(tag: str, count: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.publisher",
                str(data_dir.root),
                "q",
                str(count),
                tag,
                "2",
                "3",
            ],
            stdout=subprocess.PIPE,
            cwd=REPO,
        )

    acked: dict[str, list[str]] = {"steady": [], "killed": []}

    def read(tag: str, process: subprocess.Popen[bytes], stop_after: int | None) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            acked[tag].append(line.split()[0].decode())
            if stop_after is not None and len(acked[tag]) >= stop_after:
                process.send_signal(signal.SIGKILL)
                break
        process.wait()

    steady = start("steady", 1500)
    reader = threading.Thread(target=read, args=("steady", steady, None))
    reader.start()
    for round_ in range(3):
        victim = start(f"killed{round_}", 5000)
        read("killed", victim, len(acked["killed"]) + 150)
    reader.join(120)
    seen = queue_contents(data_dir, "q")
    names = [name for name, _ in seen]
    assert names == sorted(names) and len(set(names)) == len(names)
    assert set(acked["steady"]) | set(acked["killed"]) <= set(names), "acknowledged, lost"
    assert len(acked["steady"]) == 1500
    on_disk = {p.name for p in data_dir.queue_dir("q").iterdir()}
    assert on_disk == set(names)


# --- settlements share a flush ------------------------------------------------------------
def test_eight_consumers_acking_at_once_share_flushes(data_dir: DataDir, monkeypatch) -> None:
    queues = QueueStore(data_dir)
    groups = ConsumerGroups(data_dir, queues)
    publish_many(queues, data_dir, "q", [b"%d" % i for i in range(400)])
    flushes = _count_flushes(monkeypatch, ".log")
    outcomes: list[str] = []
    start = threading.Barrier(8)

    def consumer(number: int) -> None:
        start.wait()
        while True:
            deliveries = groups.consume("q", "g", count=1, lease=60, consumer=f"c{number}")
            if not deliveries:
                return
            for delivery in deliveries:
                delivery.file.close()
                outcomes.extend(o.result for o in groups.ack("q", "g", [delivery.receipt]))

    threads = [threading.Thread(target=consumer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert outcomes == ["ok"] * 400
    assert groups.stats("q", "g").acked == 400
    assert flushes[0] < 400, "no two acks ever shared a flush"


def _count_flushes(monkeypatch, suffix: str) -> list[int]:
    """Counts the commits' fdatasync calls on files whose path ends with ``suffix``: not
    the background checkpoint's, which moves the log's checkpoint once a second after
    commits and so came into the count on a slow machine (CI: 5 flushes for 2)."""
    flushes = [0]
    real = os.fdatasync

    def counting(fd: int) -> None:
        if threading.current_thread().name != CHECKPOINT_THREAD and os.readlink(
            f"/proc/self/fd/{fd}"
        ).endswith(suffix):
            flushes[0] += 1
        real(fd)

    monkeypatch.setattr(os, "fdatasync", counting)
    return flushes


def test_acks_arriving_while_the_leader_waits_for_the_group_lock_share_its_flush(
    data_dir: DataDir, monkeypatch
) -> None:
    """Another process holds the consumer group's lock: the acks that arrive while this
    process's leader waits for it are settled in the leader's commit, one flush."""
    queues = QueueStore(data_dir)
    groups = ConsumerGroups(data_dir, queues)
    publish_many(queues, data_dir, "q", [b"%d" % i for i in range(4)])
    receipts = []
    for delivery in groups.consume("q", "g", count=4, lease=60, consumer="c"):
        delivery.file.close()
        receipts.append(delivery.receipt)
    flushes = _count_flushes(monkeypatch, ".log")

    def ack(receipt: str):
        return lambda: [o.result for o in groups.ack("q", "g", [receipt])]

    results = arrive_while_locked(
        lambda: groups._locked("q", "g"),
        lambda: groups._lanes[("q", "g")],
        ack(receipts[0]),
        [ack(receipt) for receipt in receipts[1:]],
    )
    assert results == [["ok"]] * 4
    assert flushes[0] == 1, "the acks that came meanwhile waited for another flush"
    assert groups.stats("q", "g").acked == 4


@pytest.mark.parametrize(
    ("arrivals", "flushes_expected"),
    [
        (((b"b", None), (b"c", None)), 1),
        (((b"d", "n-d"), (b"e", None)), 2),  # d's nonce lock is not held: d, then e, wait
    ],
)
def test_stores_arriving_while_the_leader_waits_for_the_lock_share_its_flush(
    data_dir: DataDir, monkeypatch, arrivals, flushes_expected
) -> None:
    """The store's commits join as a queue's do: one flush for those that came while the
    leader waited for the store's lock, in arrival order."""
    store = DataStore(data_dir)

    def stored(body: bytes, nonce: str | None = None):
        def run() -> str | None:
            with Upload(data_dir) as upload:
                upload.write(body)
                return store.store(upload, retention_days=1, nonce=nonce).name

        return run

    flushes = _count_flushes(monkeypatch, "store.wal")
    names = arrive_while_locked(
        lambda: store._lock,
        lambda: store._lane,
        stored(b"a"),
        [stored(body, nonce) for body, nonce in arrivals],
    )
    assert all(isinstance(name, str) for name in names), names
    assert flushes[0] == flushes_expected
    for name, body in zip(names, [b"a", *(body for body, _ in arrivals)], strict=True):
        _, file, _ = store.retrieve(str(name))
        with file:
            assert file.read() == body


def test_a_log_naming_paths_outside_the_layout_is_not_followed(
    data_dir: DataDir, tmp_path: Path, rebooted
) -> None:
    """Whatever wrote a log (a bug, a hand), recovery writes only message files of the
    layout: not through ``..``, not through a link planted in place of a directory."""
    outside = tmp_path / "outside"
    outside.mkdir()
    name = "202601010000000000-0001-00000000-0000-4000-8000-000000000000.bin"
    wal = WriteAheadLog.open(str(data_dir.store_wal_path), create=True)
    assert wal is not None
    header = wal.header()
    dirs = "/".join(parse_name(name).store_dirs)
    for path in (f"store/../../outside/{name}", f"store/{dirs}/../../../../outside/x.bin"):
        header = wal.append(header, Record("", [Entry(path, 3, b"bad")]))
    (data_dir.store / dirs.split("/")[0]).symlink_to(outside)  # a link in the store's way
    header = wal.append(header, Record("", [Entry(f"store/{dirs}/{name}", 3, b"bad")]))
    wal.sync()
    rebooted()
    report = DataStore(data_dir).recover_volume()
    assert report.rewritten == [] and len(report.lost) == 3
    assert list(outside.iterdir()) == []


def test_a_checkpointed_ring_goes_round_without_growing(data_dir: DataDir) -> None:
    """Every record checkpointed and the tail near the end of the ring: the next record
    starts it again at its beginning. (It used to grow the log instead, so every log
    doubled each time it went round, up to 256 MiB a queue.)"""
    queues = QueueStore(data_dir, durability=NO_CHECKPOINT)
    store = DataStore(data_dir, durability=NO_CHECKPOINT)
    for _ in range(30):  # 3 MB each (in the records): three times round a 1 MiB log
        publish_many(queues, data_dir, "q", [os.urandom(1000) for _i in range(100)])
        queues.checkpoint("q")
        with Upload(data_dir) as upload:
            upload.write(os.urandom(60_000))
            store.store(upload, retention_days=1)
        store.checkpoint()
        with Upload(data_dir) as upload:
            upload.write(os.urandom(40_000))
            store.store(upload, retention_days=1)
        store.checkpoint()
    assert os.path.getsize(data_dir.wal_path("q")) == walfile.INITIAL_SIZE
    assert os.path.getsize(data_dir.store_wal_path) == walfile.INITIAL_SIZE
    assert len(queue_contents(data_dir, "q")) == 3000
    queues.close()
    store.close()


def test_the_background_checkpoint_keeps_the_log_small(data_dir: DataDir) -> None:
    """Four megabytes through a 1 MiB log, half a megabyte at a time: the checkpoint
    frees the space as it goes, so the ring goes round and never grows, and soon after
    the last commit nothing is left to redo. (Not at full speed: how far a log grows
    before the first checkpoint returns depends on the disk's syncfs time: 0.01 s on
    ext4 on a loop device, ten times that on this VM's root file system.)"""
    queues = QueueStore(data_dir, durability=Durability(checkpoint_seconds=0.05))

    def checkpointed() -> None:
        deadline = time.monotonic() + 10
        while wal_records(data_dir, "q") and time.monotonic() < deadline:
            time.sleep(0.02)
        assert wal_records(data_dir, "q") == []

    for round_ in range(40):
        if round_ % 5 == 0:
            checkpointed()
        publish_many(queues, data_dir, "q", [os.urandom(1000) for _i in range(100)])
    size = os.path.getsize(data_dir.wal_path("q"))
    assert size == walfile.INITIAL_SIZE, f"the log grew to {size}"
    checkpointed()
    assert len(queue_contents(data_dir, "q")) == 4000
    queues.close()
