"""core.admin: purge, delete and replay on the disk format, without the api."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from zosciimq.core import DataDir, QueueStore, Upload
from zosciimq.core.admin import QueueAdmin, cut_of, parse_utc
from zosciimq.core.groups import ConsumerGroups
from zosciimq.errors import InvalidInput, QueueNotFound


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def parts(tmp_path: Path) -> tuple[DataDir, QueueStore, ConsumerGroups, QueueAdmin, Clock]:
    data_dir = DataDir(tmp_path / "data")
    data_dir.ensure()
    clock = Clock()
    queues = QueueStore(data_dir, clock=clock)
    groups = ConsumerGroups(data_dir, queues)
    return data_dir, queues, groups, QueueAdmin(data_dir, queues, groups), clock


def publish(data_dir: DataDir, queues: QueueStore, queue: str, data: bytes) -> str:
    upload = Upload(data_dir, 1 << 20)
    upload.write(data)
    name = queues.publish(queue, upload, retention_days=30).name
    assert name is not None
    return name


def test_times_need_a_zone() -> None:
    assert parse_utc("2024-05-01T16:00:00+02:00") == datetime(2024, 5, 1, 14, tzinfo=UTC)
    assert parse_utc("2024-05-01T14:00:00z") == datetime(2024, 5, 1, 14, tzinfo=UTC)
    for bad in ("2024-05-01T14:00:00", "", "Z", "yesterday"):
        with pytest.raises(InvalidInput):
            parse_utc(bad)
    assert cut_of("2024-05-01T14:00:00Z") == "20240501140000"


def test_replay_and_purge_by_time(parts) -> None:
    data_dir, queues, groups, admin, clock = parts
    names = []
    for hour in (12, 13, 14):
        clock.now = clock.now.replace(hour=hour)
        names.append(publish(data_dir, queues, "q", b"x"))
    replay = admin.replay_pointer("q", datetime(2024, 5, 1, 13, 0, 0, 999, tzinfo=UTC))
    assert (replay.pointer, replay.first, replay.waiting) == (names[0], names[1], 2)
    assert queues.last_before("q", "20240501120000") == ""

    groups.consume("q", "g", count=1, lease=30)
    removed = admin.purge("q", before="2024-05-01T14:00:00Z")
    assert (removed.messages, removed.bytes) == (2, 2)
    assert queues.names_after("q", "", 10) == [names[2]]
    assert groups.stats("q", "g").waiting == 1  # the later message, still to do
    assert publish(data_dir, queues, "q", b"y") > names[2]  # names keep rising


def test_delete_removes_everything_and_the_queue_comes_back(parts) -> None:
    data_dir, queues, groups, admin, _ = parts
    publish(data_dir, queues, "gone", b"abc")
    groups.consume("gone", "g", count=1, lease=30)
    removed = admin.delete("gone")
    assert (removed.messages, removed.bytes, removed.groups) == (1, 3, ["g"])
    assert not data_dir.queue_dir("gone").exists()
    assert not data_dir.index_path("gone").exists()
    assert not (data_dir.groups / "gone").exists()
    with pytest.raises(QueueNotFound):
        admin.delete("gone")
    with pytest.raises(QueueNotFound):
        queues.fetch("gone")
    name = publish(data_dir, queues, "gone", b"new")
    assert queues.names_after("gone", "", 10) == [name]
    assert groups.stats("gone", "g").waiting == 1  # a new group, from the start
    assert [q.name for q in admin.list_queues()] == ["gone"]
