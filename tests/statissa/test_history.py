"""The history on the volume: one point per computation, appended atomically to the
day's file, older days pruned, rates derived from successive points."""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from functools import partial
from pathlib import Path

import pytest

from tests.statissa.datadir import DAY, HOUR, NOW, Clock, build_data_dir
from zoscii_statissa.compute import compute_snapshot
from zoscii_statissa.history import (
    History,
    HistoryPoint,
    QueuePoint,
    decode,
    encode,
    fetch_rates,
    group_series,
    point_of,
    publish_rates,
    queue_series,
    recording,
)
from zoscii_statissa.model import ConsumerGroupStats, GroupStats, Snapshot
from zoscii_statissa.scan import GroupKey, Partial, scan_locally
from zoscii_statissa.snapshots import SnapshotKeeper
from zosciimq.core import DataDir

T0 = NOW.timestamp()


def point(at: float, **queues: tuple[int, int]) -> HistoryPoint:
    """A point with queues given as (messages, published_last_hour)."""
    return HistoryPoint(
        at=at,
        messages=sum(m for m, _ in queues.values()),
        bytes=0,
        queues={name: QueuePoint(m, m * 10, 60.0, p) for name, (m, p) in queues.items()},
    )


@pytest.fixture
def history(tmp_path: Path) -> History:
    return History(DataDir(tmp_path / "data"))


def test_a_point_is_one_json_line_in_the_days_file_under_zoscii(history: History) -> None:
    first = point(T0, orders=(3, 1))
    assert history.append(first)
    path = history.directory / "history-20260310.jsonl"
    assert history.directory == history.directory.parent.parent / ".zoscii" / "statissa"
    lines = path.read_bytes().splitlines()
    assert len(lines) == 1
    raw = json.loads(lines[0])
    assert raw["v"] == 1 and raw["at"] == T0 and raw["queues"] == {"orders": [3, 30, 60.0, 1]}
    assert history.points() == [first]
    assert not [p for p in history.directory.iterdir() if p.name.endswith(".tmp")]


def test_points_accumulate_and_a_new_reader_sees_them(history: History, tmp_path: Path) -> None:
    points = [point(T0 + i * 300, orders=(i, i)) for i in range(5)]
    for p in points:
        assert history.append(p)
    assert history.points() == points
    assert History(DataDir(tmp_path / "data")).points() == points  # fresh cache, same file
    assert history.points(since=T0 + 600) == points[2:]
    assert history.points(since=T0 + 600, until=T0 + 900) == points[2:4]


def test_points_closer_than_the_spacing_are_not_kept(history: History) -> None:
    assert history.append(point(T0, orders=(1, 1)))
    assert not history.append(point(T0 + 5, orders=(2, 2)))  # a POST /refresh storm
    assert not history.append(point(T0 - 600, orders=(2, 2)))  # the clock went back
    assert history.append(point(T0 + 10, orders=(3, 3)))
    assert [p.at for p in history.points()] == [T0, T0 + 10]


def test_each_utc_day_has_its_file_and_old_days_are_pruned(tmp_path: Path) -> None:
    history = History(DataDir(tmp_path / "data"), keep_days=2)
    history.append(point(T0 - 2 * DAY, orders=(1, 0)))
    history.append(point(T0 - DAY, orders=(2, 0)))
    names = sorted(p.name for p in history.directory.iterdir())
    assert names == ["history-20260308.jsonl", "history-20260309.jsonl"]
    history.append(point(T0, orders=(3, 0)))  # 2 days kept: today and yesterday
    names = sorted(p.name for p in history.directory.iterdir())
    assert names == ["history-20260309.jsonl", "history-20260310.jsonl"]
    assert [p.messages for p in history.points()] == [2, 3]
    assert history.prune(T0 + DAY) == [history.directory / "history-20260309.jsonl"]
    assert [p.messages for p in history.points()] == [3]


def test_foreign_and_broken_lines_are_skipped(history: History) -> None:
    history.append(point(T0, orders=(1, 1)))
    path = history.path_for(T0)
    path.write_bytes(path.read_bytes() + b'{"v": 99}\nnot json\n{"v":1,"at":"x"}\n{"v":1')
    (history.directory / "notes.txt").write_text("not history")
    assert [p.at for p in history.points()] == [T0]
    assert history.append(point(T0 + 60, orders=(2, 2)))  # the torn last line stays apart
    assert [p.at for p in history.points()] == [T0, T0 + 60]
    assert decode(encode(point(T0, a=(1, 2), b=(0, 0)))) == point(T0, a=(1, 2), b=(0, 0))
    assert decode(b"[1, 2]") is None


def test_point_of_a_snapshot_takes_its_figures() -> None:
    snapshot = Snapshot(
        generated_at=T0,
        duration_seconds=0.1,
        data_dir="/data",
        queues=(
            GroupStats(
                "orders",
                messages=4,
                bytes=40,
                oldest_age_seconds=12.34,
                published_hourly=(3,) + (1,) * 23,
            ),
            GroupStats("empty"),
        ),
        store=GroupStats("store", messages=1, bytes=5),
        groups=(
            ConsumerGroupStats("orders", "workers", waiting=2, leased=1, dead_lettered=3),
            ConsumerGroupStats("orders", "broken", error="unreadable"),
        ),
    )
    p = point_of(snapshot)
    assert (p.at, p.messages, p.bytes) == (T0, 5, 45)
    assert p.queues["orders"] == QueuePoint(4, 40, 12.3, 3)
    assert p.queues["empty"] == QueuePoint(0, 0, None, 0)
    assert set(p.groups["orders"]) == {"workers"}  # an unreadable group has no figures
    assert group_series([p], "orders", "workers") == [(T0, 2.0)]
    assert queue_series([p], "empty", "oldest_age_seconds") == []
    assert queue_series([p], "orders", "messages") == [(T0, 4.0)]


def test_publish_rate_of_a_steady_flow_is_exact() -> None:
    # 120 messages an hour, all kept: every point sees 120 in its last hour
    points = [point(T0 + i * 300, q=(1000, 120)) for i in range(4)]
    rates = publish_rates(points, "q")
    assert [t for t, _ in rates] == [T0 + 300, T0 + 600, T0 + 900]
    assert all(r == pytest.approx(2.0) for _, r in rates)  # per minute


def test_publish_rate_catches_a_burst_and_never_goes_negative() -> None:
    points = [
        point(T0, q=(0, 0)),
        point(T0 + 60, q=(600, 600)),  # 600 published within that minute
        point(T0 + 120, q=(600, 600)),  # nothing since
        point(T0 + 180, q=(10, 10)),  # most of them deleted: no negative rate
    ]
    rates = [r for _, r in publish_rates(points, "q")]
    assert rates[0] == pytest.approx(600.0)
    assert rates[1] == pytest.approx(10.0)  # the even-spread estimate of what left the hour
    assert rates[2] == 0.0


def test_publish_rate_after_a_gap_and_for_a_new_queue() -> None:
    points = [
        point(T0, other=(1, 0)),
        point(T0 + 300, new=(30, 30)),
        point(T0 + 3 * HOUR, new=(90, 60)),
    ]
    rates = publish_rates(points, "new")
    assert rates[0] == (T0 + 300, pytest.approx(6.0))  # appeared: all its hour is new
    assert rates[1] == (T0 + 3 * HOUR, pytest.approx(1.0))  # a gap: only the last hour known
    assert publish_rates(points[:1], "new") == []


def _keeper(root: Path, clock: Clock, history: History, calls: list[float]) -> SnapshotKeeper:
    def counting(data_dir: DataDir, now: float) -> dict[GroupKey, Partial]:
        calls.append(now)
        return scan_locally(data_dir, now)

    compute = partial(compute_snapshot, counting, DataDir(root))
    return SnapshotKeeper(recording(compute, history), clock)


def test_each_computation_appends_its_own_figures_without_a_second_scan(tmp_path: Path) -> None:
    root = tmp_path / "data"
    build_data_dir(root)
    history, clock, calls = History(DataDir(root)), Clock(NOW), []
    keeper = _keeper(root, clock, history, calls)
    first = keeper.refresh()
    clock.moment = NOW + timedelta(minutes=5)
    second = keeper.refresh()
    assert len(calls) == 2  # one scan per computation: the history reuses its figures
    assert history.points() == [point_of(first), point_of(second)]
    orders = history.points()[-1].queues["orders"]
    assert (orders.messages, orders.bytes, orders.published_last_hour) == (6, 335, 1)
    # the scan never lists the history: it is not in queues/ or store/
    assert second.total_messages == first.total_messages


def test_a_volume_that_refuses_the_history_does_not_fail_the_computation(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "data"
    build_data_dir(root)
    history, clock = History(DataDir(root)), Clock(NOW)
    history.directory.parent.mkdir(exist_ok=True)
    history.directory.write_text("a file where the directory should be")
    keeper = _keeper(root, clock, history, [])
    with caplog.at_level(logging.WARNING):
        keeper.refresh()
        clock.moment = NOW + timedelta(minutes=5)
        keeper.refresh()
    assert keeper.status.last_run_success is True and keeper.status.runs_failed_total == 0
    assert history.last_error
    warnings = [r for r in caplog.records if "history not written" in r.getMessage()]
    assert len(warnings) == 1  # once, not at every run
    history.directory.unlink()
    clock.moment = NOW + timedelta(minutes=10)
    keeper.refresh()
    assert history.last_error == "" and len(history.points()) == 1


def test_the_history_lives_where_the_core_says(tmp_path: Path) -> None:
    """The directory is the core's (``DataDir.statissa_history``), not built here."""

    class Elsewhere(DataDir):
        @property
        def statissa_history(self) -> Path:
            return self.root / "kept-elsewhere"

    assert DataDir(tmp_path).statissa_history == tmp_path / ".zoscii" / "statissa"
    history = History(Elsewhere(tmp_path))
    assert history.directory == tmp_path / "kept-elsewhere"
    assert history.append(point(T0, orders=(1, 1)))
    assert [p.name for p in (tmp_path / "kept-elsewhere").iterdir()] == [history.path_for(T0).name]


def counted(at: float, **fetched: float | None) -> HistoryPoint:
    """A point whose queues have the api's fetch counts ``fetched`` (None: not read)."""
    return HistoryPoint(
        at=at,
        messages=0,
        bytes=0,
        queues={name: QueuePoint(0, 0, None, 0, count) for name, count in fetched.items()},
    )


def test_fetch_rate_is_the_counter_difference_per_minute() -> None:
    points = [counted(T0, orders=100.0), counted(T0 + 60, orders=160.0)]
    assert fetch_rates(points, "orders") == [(T0 + 60, 60.0)]
    points.append(counted(T0 + 180, orders=220.0))
    assert fetch_rates(points, "orders") == [(T0 + 60, 60.0), (T0 + 180, 30.0)]


def test_fetch_rate_after_an_api_restart_counts_from_zero() -> None:
    points = [counted(T0, orders=5000.0), counted(T0 + 60, orders=30.0)]
    assert fetch_rates(points, "orders") == [(T0 + 60, 30.0)]


def test_fetch_rate_of_a_new_queue_starts_at_zero_but_not_after_unknown_counts() -> None:
    known = [counted(T0, orders=10.0), counted(T0 + 60, orders=10.0, invoices=12.0)]
    assert fetch_rates(known, "invoices") == [(T0 + 60, 12.0)]
    unknown = [counted(T0, orders=None), counted(T0 + 60, orders=10.0, invoices=12.0)]
    assert fetch_rates(unknown, "invoices") == []
    assert fetch_rates(unknown, "orders") == [], "an unread count is not a zero"
    assert fetch_rates([counted(T0, orders=1.0), counted(T0 + 60, orders=None)], "orders") == []


def test_fetch_counts_go_into_the_point_and_its_line(history: History) -> None:
    with_counts = counted(T0, orders=42.0)
    assert history.append(with_counts)
    raw = json.loads((history.directory / "history-20260310.jsonl").read_bytes())
    assert raw["queues"] == {"orders": [0, 0, None, 0, 42.0]}
    assert history.points() == [with_counts]
    old_line = json.dumps(
        {"v": 1, "at": T0, "messages": 1, "bytes": 2, "queues": {"o": [1, 2, 3.0, 1]}}
    )
    decoded = decode(old_line)
    assert decoded is not None and decoded.queues["o"].fetched is None
    assert not decoded.fetch_counts_known


def test_each_computation_records_the_fetch_counts_read_with_it(tmp_path: Path) -> None:
    root = tmp_path / "data"
    build_data_dir(root)
    history, clock = History(DataDir(root)), Clock(NOW)
    reads = iter([{"orders": 7.0, "gone": 3.0}, None])
    compute = partial(compute_snapshot, scan_locally, DataDir(root))
    keeper = SnapshotKeeper(recording(compute, history, lambda: next(reads)), clock)
    keeper.refresh()
    clock.moment = NOW + timedelta(minutes=5)
    keeper.refresh()
    first, second = history.points()
    assert first.queues["orders"].fetched == 7.0
    assert "gone" not in first.queues  # counts of queues the scan did not find are dropped
    assert {q.fetched for name, q in first.queues.items() if name != "orders"} == {0.0}
    assert not second.fetch_counts_known
