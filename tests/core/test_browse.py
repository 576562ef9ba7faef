"""browse: the newest names of a queue and a message's first bytes, read without
writing anything, from the index when it agrees with the directory and from a bounded
listing otherwise; queue and message names from outside checked by the core."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from tests.support.clock import FakeClock
from zosciimq.core import DataDir, QueueStore, browse
from zosciimq.core import index as idx
from zosciimq.core.names import new_name
from zosciimq.errors import InvalidInput, MessageNotFound, QueueNotFound

Publish = Callable[..., str]


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root`` with its size and mtime: what a reader must not change."""
    found = {}
    for directory, dirs, files in os.walk(root):
        for entry in dirs + files:
            path = os.path.join(directory, entry)
            stat = os.lstat(path)
            found[os.path.relpath(path, root)] = (stat.st_size, stat.st_mtime_ns)
    return found


def _fill(publish: Publish, clock: FakeClock, count: int, queue: str = "orders") -> list[str]:
    names = []
    for i in range(count):
        names.append(publish(queue, b"body %03d" % i, retention=7))
        clock.advance(seconds=1)
    return names


def test_latest_reads_the_newest_names_from_the_index(
    data_dir: DataDir, publish: Publish, clock: FakeClock
) -> None:
    names = _fill(publish, clock, 30)
    found = browse.latest(data_dir, "orders", 5)
    assert found.source == "index" and found.complete
    assert [m.name for m in found.messages] == names[::-1][:5]
    newest = found.messages[0]
    assert newest.size == len(b"body 029") and newest.retention_days == 7
    assert newest.published_at == clock.now - timedelta(seconds=1)
    assert browse.latest(data_dir, "orders", 100).messages[-1].name == names[0]


def test_reading_writes_nothing_and_takes_no_lock(
    data_dir: DataDir, publish: Publish, clock: FakeClock
) -> None:
    names = _fill(publish, clock, 5)
    os.unlink(data_dir.index_path("orders"))  # the listing path too: no index is rebuilt
    before = _tree(data_dir.root)
    assert browse.latest(data_dir, "orders").source == "listing"
    assert browse.peek(data_dir, "orders", names[0]).head == b"body 000"
    assert _tree(data_dir.root) == before


def test_a_directory_changed_by_another_writer_is_listed(
    data_dir: DataDir, publish: Publish, clock: FakeClock
) -> None:
    names = _fill(publish, clock, 10)
    clock.advance(hours=1)
    foreign = str(new_name(clock.now, 3))  # the original's PHP server, an operator's cp
    (data_dir.queue_dir("orders") / foreign).write_bytes(b"from elsewhere")
    found = browse.latest(data_dir, "orders", 3)
    assert found.source == "listing" and found.complete
    assert [m.name for m in found.messages] == [foreign, names[-1], names[-2]]


def test_a_missing_or_damaged_index_falls_back_to_the_listing(
    data_dir: DataDir, publish: Publish, clock: FakeClock
) -> None:
    names = _fill(publish, clock, 4)
    path = data_dir.index_path("orders")
    path.write_bytes(b"garbage" * 100)
    found = browse.latest(data_dir, "orders")
    assert found.source == "listing" and [m.name for m in found.messages] == names[::-1]
    path.unlink()
    assert browse.latest(data_dir, "orders").source == "listing"


def test_indexed_names_whose_files_are_gone_are_skipped(
    data_dir: DataDir, publish: Publish, clock: FakeClock
) -> None:
    names = _fill(publish, clock, 6)
    header = idx.IndexFile.open(data_dir.index_path("orders"))
    assert header is not None
    recorded = header.header()
    header.close()
    assert recorded is not None
    # as a policy's drop or a power loss leaves it: the index lists a name whose file is
    # gone while its header still agrees with the directory
    os.unlink(data_dir.queue_dir("orders") / names[-1])
    os.utime(data_dir.queue_dir("orders"), ns=(recorded.dir_mtime_ns, recorded.dir_mtime_ns))
    found = browse.latest(data_dir, "orders", 2)
    assert found.source == "index"
    assert [m.name for m in found.messages] == [names[-2], names[-3]]


def test_the_listing_is_bounded(data_dir: DataDir, publish: Publish, clock: FakeClock) -> None:
    _fill(publish, clock, 12)
    os.unlink(data_dir.index_path("orders"))
    found = browse.latest(data_dir, "orders", 3, scan_limit=5)
    assert found.source == "listing" and not found.complete
    assert len(found.messages) == 3
    assert browse.latest(data_dir, "orders", 3, scan_limit=12).complete


def test_a_publish_in_flight_is_waited_for_then_the_directory_listed(
    data_dir: DataDir, publish: Publish, clock: FakeClock
) -> None:
    names = _fill(publish, clock, 3)
    index = idx.IndexFile.open(data_dir.index_path("orders"))
    assert index is not None
    header = index.header()
    assert header is not None
    header.pending = 1  # names allocated, not committed: the directory moved on
    index.write_header(header)
    index.close()
    clock.advance(seconds=5)
    extra = str(new_name(clock.now, 1))
    (data_dir.queue_dir("orders") / extra).write_bytes(b"x")
    found = browse.latest(data_dir, "orders")
    assert found.source == "listing" and found.messages[0].name == extra
    assert [m.name for m in found.messages[1:]] == names[::-1]


def test_strays_and_malformed_files_are_never_names(
    data_dir: DataDir, publish: Publish, clock: FakeClock
) -> None:
    names = _fill(publish, clock, 2)
    directory = data_dir.queue_dir("orders")
    (directory / ("9" * 18 + "-0001-not-a-guid.bin")).write_bytes(b"?")
    (directory / "notes.txt").write_bytes(b"?")
    os.mkdir(directory / ("9" * 14 + "0000-0001-" + str(uuid.uuid4()) + ".bin"))
    os.unlink(data_dir.index_path("orders"))
    assert [m.name for m in browse.latest(data_dir, "orders").messages] == names[::-1]


def test_peek_gives_the_metadata_and_the_first_bytes(
    data_dir: DataDir, publish: Publish, queues: QueueStore
) -> None:
    body = bytes(range(256)) * 4
    name = publish("bin", body, retention=30)
    seen = browse.peek(data_dir, "bin", name, 100)
    assert seen.head == body[:100] and not seen.complete
    assert seen.info.size == len(body) and seen.info.retention_days == 30
    assert seen.info.published_at.strftime("%Y%m%d%H%M%S") == name[:14]
    assert (seen.info.expires_at - seen.info.published_at).days == 30
    whole = browse.peek(data_dir, "bin", name, browse.MAX_PEEK_BYTES * 10)
    assert whole.head == body and whole.complete
    assert browse.peek(data_dir, "bin", name, 0).head == b""


@pytest.mark.parametrize("queue", ["../queues", "Orders", "temp", "a/b", "", ".", "x" * 129])
def test_a_queue_name_from_outside_is_checked(data_dir: DataDir, queue: str) -> None:
    with pytest.raises(InvalidInput):
        browse.latest(data_dir, queue)
    with pytest.raises(InvalidInput):
        browse.peek(data_dir, queue, str(new_name(FakeClock().now, 1)))


@pytest.mark.parametrize(
    "name",
    [
        "../../../etc/passwd",
        "/etc/passwd",
        "202603011200000000-0001-8037864b-5438-4bac-87c4-ca0a6222945f.bin/..",
        "202603011200000000-0001-9A5316D1-C7CE-435A-946D-7D1302621AA5.bin",
        "..",
        "",
    ],
)
def test_a_message_name_from_outside_is_checked(
    data_dir: DataDir, publish: Publish, name: str
) -> None:
    publish("orders", b"x")
    with pytest.raises(InvalidInput):
        browse.peek(data_dir, "orders", name)


def test_missing_queues_and_messages(data_dir: DataDir, publish: Publish) -> None:
    publish("orders", b"x")
    absent = str(new_name(FakeClock().now, 1))
    with pytest.raises(QueueNotFound):
        browse.latest(data_dir, "nope")
    with pytest.raises(QueueNotFound):
        browse.peek(data_dir, "nope", absent)
    with pytest.raises(MessageNotFound):
        browse.peek(data_dir, "orders", absent)


def test_links_and_special_files_are_never_followed_or_read(
    data_dir: DataDir, publish: Publish, tmp_path: Path
) -> None:
    publish("orders", b"x")
    secret = tmp_path / "secret"
    secret.write_bytes(b"not for the console")
    directory = data_dir.queue_dir("orders")
    linked = str(new_name(FakeClock().now, 1))
    os.symlink(secret, directory / linked)
    with pytest.raises(MessageNotFound):
        browse.peek(data_dir, "orders", linked)
    fifo = str(new_name(FakeClock().now, 1))
    os.mkfifo(directory / fifo)
    done = threading.Event()

    def attempt() -> None:
        with pytest.raises(MessageNotFound):
            browse.peek(data_dir, "orders", fifo)
        done.set()

    threading.Thread(target=attempt, daemon=True).start()
    assert done.wait(5), "peek blocked on a FIFO"
    os.unlink(data_dir.index_path("orders"))
    assert linked not in [m.name for m in browse.latest(data_dir, "orders").messages]
    # a queue directory that is a link is no queue
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / str(new_name(FakeClock().now, 1))).write_bytes(b"outside")
    os.symlink(outside, data_dir.queues / "linked")
    with pytest.raises(QueueNotFound):
        browse.latest(data_dir, "linked")
