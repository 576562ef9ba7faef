"""The figures, computed by the real Spark job (and by the same scan in this process),
against a data directory with known contents."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from tests.statissa.datadir import DAY, HOUR, NOW, build_data_dir, compute
from zoscii_statissa.compute import Scanner, compute_snapshot
from zoscii_statissa.model import Snapshot
from zoscii_statissa.scan import scan_locally
from zosciimq.core import DataDir
from zosciimq.core.store import fanout_roots

T = NOW.timestamp()


@pytest.fixture(scope="module")
def computed(scan: Scanner, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Snapshot]:
    root = tmp_path_factory.mktemp("figures") / "data"
    build_data_dir(root)
    return root, compute(scan, root)


def test_queue_figures(computed: tuple[Path, Snapshot]) -> None:
    _root, snapshot = computed
    assert [q.name for q in snapshot.queues] == ["empty-q", "logs_2", "orders"]
    orders = snapshot.queue("orders")
    assert orders.messages == 6
    assert orders.bytes == 3 * 100 + 10 + 20 + 5
    assert orders.oldest_timestamp == T - 30 * HOUR
    assert orders.newest_timestamp == T - 600
    assert orders.oldest_age_seconds == 30 * HOUR
    assert orders.expired == 3
    assert orders.expiring_24h == 5  # the 3 expired + the 2 that expire in 22.5 h
    assert orders.published_hourly[0] == 1
    assert orders.published_hourly[1] == 2
    assert sum(orders.published_hourly[2:]) == 0  # the 30 h old ones are outside the day
    assert (orders.published_last_hour, orders.published_last_24h) == (1, 3)
    assert orders.unrecognised_files == 0


def test_odd_and_empty_queues(computed: tuple[Path, Snapshot]) -> None:
    _root, snapshot = computed
    logs = snapshot.queue("logs_2")
    assert (logs.messages, logs.bytes, logs.unrecognised_files) == (1, 0, 1)
    assert logs.oldest_timestamp == logs.newest_timestamp == T - 2 * DAY
    assert (logs.expired, logs.expiring_24h, logs.published_last_24h) == (1, 1, 0)
    empty = snapshot.queue("empty-q")
    assert (empty.messages, empty.bytes) == (0, 0)
    assert empty.oldest_timestamp is None and empty.oldest_age_seconds is None
    assert empty.storage_share == 0.0


def test_store_figures_merge_several_fanout_directories(computed: tuple[Path, Snapshot]) -> None:
    root, snapshot = computed
    assert len(fanout_roots(DataDir(root))) >= 2, "the layout should spread over directories"
    store = snapshot.store
    assert (store.messages, store.bytes, store.unidentified) == (3, 150, 1)
    assert store.oldest_timestamp == T - 3 * DAY + 41
    assert store.newest_timestamp == T - 5 * HOUR + 17
    assert (store.expired, store.expiring_24h) == (1, 1)


def test_totals_and_storage_shares(computed: tuple[Path, Snapshot]) -> None:
    _root, snapshot = computed
    assert snapshot.total_bytes == 335 + 0 + 150
    assert snapshot.total_messages == 6 + 1 + 3
    assert snapshot.queue("orders").storage_share == pytest.approx(335 / 485)
    assert snapshot.store.storage_share == pytest.approx(150 / 485)
    shares = [q.storage_share for q in snapshot.queues] + [snapshot.store.storage_share]
    assert sum(shares) == pytest.approx(1.0)


def test_replikate_pointers(computed: tuple[Path, Snapshot]) -> None:
    _root, snapshot = computed
    states = {s.state: s for s in snapshot.states}
    assert sorted(states) == ["broken_x", "fresh_store", "remote_orders"]
    remote = states["remote_orders"]
    assert remote.pointer.startswith(NOW.strftime("%Y%m%d") + "1030")
    assert remote.pointer_timestamp == T - 1.5 * HOUR
    assert remote.age_seconds == 1.5 * HOUR
    assert states["fresh_store"].pointer == "" and states["fresh_store"].age_seconds is None
    assert "Invalid pointer" in states["broken_x"].error


@pytest.mark.slow  # Spark's figures, to compare with
@pytest.mark.parametrize("scan", ["spark"], indirect=True)
def test_python_only_scan_gives_the_same_figures(computed: tuple[Path, Snapshot]) -> None:
    root, snapshot = computed
    local = compute_snapshot(scan_locally, DataDir(root), T)
    assert dataclasses.replace(local, duration_seconds=0) == dataclasses.replace(
        snapshot, duration_seconds=0
    )


def test_ages_follow_the_clock(scan: Scanner, data_root: Path) -> None:
    later = compute(scan, data_root, now=T + 2 * DAY)
    orders = later.queue("orders")
    assert orders.oldest_age_seconds == 30 * HOUR + 2 * DAY
    assert orders.published_last_24h == 0
    assert orders.expired == 5 and orders.expiring_24h == 5  # the 30-day one stays


def test_an_empty_data_directory(scan: Scanner, tmp_path: Path) -> None:
    DataDir(tmp_path).ensure()
    snapshot = compute(scan, tmp_path)
    assert snapshot.queues == ()
    assert (snapshot.store.messages, snapshot.total_bytes, snapshot.states) == (0, 0, ())


def test_a_missing_data_directory_fails(scan: Scanner, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        compute(scan, tmp_path / "nowhere")


def test_a_queue_removed_after_listing_counts_as_empty(scan: Scanner, data_root: Path) -> None:
    shutil.rmtree(data_root / "queues" / "logs_2")
    snapshot = compute(scan, data_root)
    assert [q.name for q in snapshot.queues] == ["empty-q", "orders"]
