"""Consumer-group figures: computed in the same run as the scan, through the core, served
as JSON, on the page and as metrics labelled by queue and group; read without the group
lock and without writing a byte."""

from __future__ import annotations

import shutil
from functools import partial
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from werkzeug.test import Client

from tests.statissa.datadir import HOUR, NOW, Clock, _publish
from zoscii_statissa.compute import compute_snapshot
from zoscii_statissa.scan import scan_locally
from zoscii_statissa.snapshots import SnapshotKeeper
from zoscii_statissa.web import create_app
from zosciimq.core import DataDir, QueueStore
from zosciimq.core.groups import ConsumerGroups

T = NOW.timestamp()


@pytest.fixture
def groups_root(data_root: Path) -> Path:
    """The figures' data directory plus groups on ``orders`` (six messages, the oldest
    30 h old) and the state of a group whose queue was removed."""
    data_dir = DataDir(data_root)
    queues = QueueStore(data_dir, Clock(NOW))
    groups = ConsumerGroups(data_dir, queues, clock=lambda: T)
    got = groups.consume("orders", "workers", count=4, lease=600)
    for delivery in got:
        delivery.file.close()
    groups.ack("orders", "workers", [got[0].receipt])
    groups.requeue("orders", "workers", [got[1].receipt])
    groups.dead_letter("orders", "workers", [got[2].receipt])  # makes orders--workers--dead
    idle = groups.consume("orders", "idle", count=6, lease=600)
    groups.ack("orders", "idle", [d.receipt for d in idle if not d.file.close()])
    clock = Clock(NOW)
    _publish(QueueStore(data_dir, clock), clock, "gone", NOW, 1, 1)
    for delivery in groups.consume("gone", "g", count=1, lease=600):
        delivery.file.close()
    shutil.rmtree(data_dir.queue_dir("gone"))
    return data_root


@pytest.fixture
def group_keeper(groups_root: Path) -> SnapshotKeeper:
    return SnapshotKeeper(partial(compute_snapshot, scan_locally, DataDir(groups_root)), Clock(NOW))


def test_figures_per_group(group_keeper: SnapshotKeeper) -> None:
    snapshot = group_keeper.refresh()
    found = {(g.queue, g.group): g for g in snapshot.groups}
    assert list(found) == [("orders", "idle"), ("orders", "workers")]  # not "gone"
    workers = found[("orders", "workers")]
    assert (workers.waiting, workers.leased) == (3, 1)  # 2 never delivered + 1 requeued
    assert (workers.acked, workers.redelivered, workers.dead_lettered) == (1, 0, 1)
    assert workers.oldest_unacked_timestamp == T - 30 * HOUR
    assert workers.oldest_unacked_age_seconds == 30 * HOUR
    assert workers.dead_letter_queue == "orders--workers--dead"
    idle = found[("orders", "idle")]
    assert (idle.waiting, idle.leased, idle.acked) == (0, 0, 6)
    assert idle.oldest_unacked is None and idle.oldest_unacked_age_seconds is None


def test_json_page_and_metrics(group_keeper: SnapshotKeeper, groups_root: Path) -> None:
    group_keeper.refresh()
    client = Client(create_app(group_keeper, DataDir(groups_root)))
    body = client.get("/stats.json").get_json()
    workers = next(g for g in body["consumer_groups"] if g["group"] == "workers")
    assert workers["queue"] == "orders" and workers["waiting"] == 3
    assert workers["oldest_unacked_iso"] == "2026-03-09T06:00:00Z"
    assert workers["dead_lettered"] == 1 and workers["error"] == ""

    page = client.get("/").get_data(as_text=True)
    assert "Consumer groups" in page and "workers" in page and "1d 6h" in page

    text = client.get("/metrics").get_data(as_text=True)
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    labels = (("group", "workers"), ("queue", "orders"))
    assert samples[("zoscii_group_messages_waiting", labels)] == 3
    assert samples[("zoscii_group_messages_leased", labels)] == 1
    assert samples[("zoscii_group_messages_acked_total", labels)] == 1
    assert samples[("zoscii_group_messages_redelivered_total", labels)] == 0
    assert samples[("zoscii_group_messages_dead_lettered_total", labels)] == 1
    assert samples[("zoscii_group_oldest_unacked_age_seconds", labels)] == 30 * HOUR
    assert samples[("zoscii_group_oldest_unacked_timestamp_seconds", labels)] == T - 30 * HOUR
    assert samples[("zoscii_group_state_valid", labels)] == 1
    idle = (("group", "idle"), ("queue", "orders"))
    assert ("zoscii_group_oldest_unacked_age_seconds", idle) not in samples
    assert samples[("zoscii_consumer_groups", ())] == 2


def test_read_without_the_lock_and_without_writing(groups_root: Path) -> None:
    data_dir = DataDir(groups_root)
    shutil.rmtree(data_dir.locks)
    log = data_dir.group_log_path("orders", "workers")
    with log.open("ab") as file:
        file.write(b"A half-written line")  # a consumer appending right now
    before = log.read_bytes()
    snapshot = compute_snapshot(scan_locally, data_dir, T)
    assert log.read_bytes() == before  # the core would cut the torn tail; statissa must not
    assert not data_dir.locks.exists() or not any(data_dir.locks.iterdir())
    workers = next(g for g in snapshot.groups if g.group == "workers")
    assert workers.acked == 1 and workers.leased == 1


def test_an_unreadable_group_is_reported_not_fatal(groups_root: Path) -> None:
    data_dir = DataDir(groups_root)
    (data_dir.groups / "orders" / "broken.log").mkdir()  # not a file: cannot be read
    snapshot = compute_snapshot(scan_locally, data_dir, T)
    broken = next(g for g in snapshot.groups if g.group == "broken")
    assert broken.error and broken.acked == 0
    assert len(snapshot.groups) == 3
