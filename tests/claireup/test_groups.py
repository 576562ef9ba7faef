"""Consumer-group state: what claireup deletes (the state of vanished queues), what it
compacts (the history of messages retention deleted), and what it must never lose (an
ack, a lease, a count), also while consumers work on the same group."""

from __future__ import annotations

import os
import shutil
import threading
from datetime import timedelta
from pathlib import Path

from prometheus_client import CollectorRegistry

from tests.support.clock import FakeClock
from tests.support.queues import publish_body
from zoscii_claireup.metrics import ClaireupMetrics
from zoscii_claireup.report import AREA_GROUP
from zoscii_claireup.settings import Settings
from zosciimq.core import DataDir, QueueStore
from zosciimq.core.groups import ConsumerGroups, Delivery


def groups_for(data_dir: DataDir, clock: FakeClock) -> ConsumerGroups:
    """A consumer process's view of the groups (its own cache of every group's state)."""
    return ConsumerGroups(
        data_dir, QueueStore(data_dir, clock), clock=lambda: clock.now.timestamp()
    )


def publish(
    data_dir: DataDir, clock: FakeClock, queue: str, count: int, *, days_ago: float, keep: int
):
    """``count`` messages published ``days_ago`` with ``keep`` days of retention."""
    then = FakeClock(clock.now - timedelta(days=days_ago))
    queues = QueueStore(data_dir, then)
    return [publish_body(queues, queue, b"m%d" % i, keep).name for i in range(count)]


def consume(groups: ConsumerGroups, queue: str, count: int, group: str = "g") -> list[Delivery]:
    got = groups.consume(queue, group, count=count, lease=3600)
    for delivery in got:
        delivery.file.close()
    return got


def log_lines(data_dir: DataDir, queue: str, group: str = "g") -> int:
    return data_dir.group_log_path(queue, group).read_bytes().count(b"\n")


def test_state_of_a_vanished_queue_is_deleted_but_not_its_lock(data_dir, clock, make_cleaner):
    publish(data_dir, clock, "gone", 2, days_ago=0, keep=30)
    publish(data_dir, clock, "kept", 1, days_ago=0, keep=30)
    groups = groups_for(data_dir, clock)
    for queue in ("gone", "kept"):
        consume(groups, queue, 1, "g")
        consume(groups, queue, 1, "h")
    shutil.rmtree(data_dir.queue_dir("gone"))  # an operator removed the queue
    log_path = data_dir.group_log_path("gone", "g")
    leftover = log_path.with_name(".g.log.0123abcd.tmp")  # a crashed rewrite's
    leftover.write_bytes(b"x" * 7)
    size = log_path.stat().st_size + data_dir.group_log_path("gone", "h").stat().st_size

    listed: list[tuple[str, int]] = []
    dry = make_cleaner(dry_run_sink=lambda path, n: listed.append((path, n))).run(dry_run=True)
    assert dry.tally(AREA_GROUP).deleted == 3 and log_path.exists()
    assert sorted(item for item in listed if "/groups/" in item[0]) == sorted(
        [
            (str(log_path), log_path.stat().st_size),
            (str(leftover), 7),
            (str(data_dir.group_log_path("gone", "h")), size - log_path.stat().st_size),
        ]
    )

    report = make_cleaner().run()
    tally = report.tally(AREA_GROUP)
    assert (tally.deleted, tally.deleted_bytes, tally.errors) == (3, size + 7, 0)
    assert report.groups.dirs_removed == 1 and report.outcome == "success"
    assert not (data_dir.groups / "gone").exists()
    assert data_dir.group_lock_path("gone", "g").exists()  # waited on, maybe: never removed
    assert groups.groups_of("kept") == ["g", "h"]  # a live queue's groups are untouched
    assert groups.stats("kept", "g").leased == 1

    # The queue is made anew: its groups start from nothing, in a process that knew the
    # old state (its cache) as in a new one.
    publish(data_dir, clock, "gone", 1, days_ago=0, keep=30)
    assert [d.deliveries for d in consume(groups, "gone", 5)] == [1]
    assert groups_for(data_dir, clock).stats("gone", "g").leased == 1


def test_forget_leaves_the_state_of_an_existing_queue_alone(data_dir, clock):
    publish(data_dir, clock, "q", 1, days_ago=0, keep=30)
    groups = groups_for(data_dir, clock)
    consume(groups, "q", 1)
    assert groups.forget("q", "g") == []
    assert not groups.drop_queue_dir("q")
    assert groups.stats("q", "g").leased == 1


def test_history_of_deleted_messages_is_compacted_and_no_ack_or_lease_is_lost(
    data_dir, clock, make_cleaner
):
    expired = publish(data_dir, clock, "q", 5, days_ago=2, keep=1)  # due at this run
    fresh = publish(data_dir, clock, "q", 2, days_ago=0, keep=30)
    consumer = groups_for(data_dir, clock)
    got = {d.name: d for d in consume(consumer, "q", 7)}
    assert list(got) == expired + fresh
    done = [got[n].receipt for n in (*expired[:3], fresh[0])]
    assert all(o.result == "ok" for o in consumer.ack("q", "g", done))
    consumer.requeue("q", "g", [got[expired[4]].receipt])  # waits for a redelivery
    leased = got[expired[3]].receipt  # still held by its consumer
    before = consumer.stats("q", "g")
    lines = log_lines(data_dir, "q")

    # A dry run cannot tell: the messages it would delete are still there.
    assert make_cleaner(dry_run_sink=None).run(dry_run=True).groups.compacted == 0
    assert make_cleaner(groups=False).run().tally("queue", "q").deleted == 5
    dry = make_cleaner(dry_run_sink=None).run(dry_run=True)  # now it can
    assert dry.groups.compacted == 1 and log_lines(data_dir, "q") == lines

    report = make_cleaner().run()
    upkeep = report.groups
    # 3 acks and 1 requeue remembered (settled receipts answer retries) of gone messages
    assert (upkeep.compacted, upkeep.acks_dropped, upkeep.waiting_dropped) == (1, 4, 1)
    assert upkeep.lines_dropped == lines - log_lines(data_dir, "q") > 0
    assert upkeep.bytes_reclaimed > 0
    assert make_cleaner().run().groups.compacted == 0  # nothing left to drop: left alone

    after = groups_for(data_dir, clock).stats("q", "g")  # a process that starts now
    assert (after.acked, after.redelivered, after.dead_lettered) == (
        before.acked,
        before.redelivered,
        before.dead_lettered,
    )
    assert after.leased == 2  # the lease of a deleted message, and fresh[1]'s
    assert after.waiting == 0  # the requeued message is gone: nothing left to deliver
    # The consumer that knew the old log: its lease holds, its repeated ack answers ok.
    assert consumer.ack("q", "g", [leased])[0].result == "ok"
    assert consumer.ack("q", "g", [got[fresh[0]].receipt])[0].result == "ok"
    # A retried ack of a message retention deleted is no longer remembered.
    assert consumer.ack("q", "g", [done[0]])[0].result == "unknown"
    assert consumer.ack("q", "g", [got[fresh[1]].receipt])[0].result == "ok"
    assert groups_for(data_dir, clock).stats("q", "g").acked == before.acked + 2
    assert consume(consumer, "q", 10) == []  # nothing is delivered twice

    # The ack of the deleted message that was leased is history of a gone message now.
    assert make_cleaner().run().groups.acks_dropped == 1


def test_metrics_count_the_group_upkeep(data_dir, clock, make_cleaner):
    expired = publish(data_dir, clock, "q", 3, days_ago=2, keep=1)
    groups = groups_for(data_dir, clock)
    groups.ack("q", "g", [d.receipt for d in consume(groups, "q", 3)])
    metrics = ClaireupMetrics(CollectorRegistry())
    report = make_cleaner().run()
    metrics.record(report)
    value = metrics.registry.get_sample_value
    assert report.tally("queue", "q").deleted == len(expired)
    assert value("zoscii_claireup_group_logs_compacted_total") == 1
    assert value("zoscii_claireup_group_entries_dropped_total", {"kind": "ack"}) == 3
    assert value("zoscii_claireup_group_entries_dropped_total", {"kind": "waiting"}) == 0
    assert value("zoscii_claireup_group_log_lines_dropped_total") > 0
    assert value("zoscii_claireup_group_log_bytes_reclaimed_total") > 0
    assert value("zoscii_claireup_scanned_files_total", {"area": "group"}) == 1
    assert any("group logs: compacted=1" in line for line in report.summary_lines())


def test_the_groups_phase_can_be_switched_off(data_dir, clock, make_cleaner):
    assert not Settings.from_env({"ZOSCII_CLAIREUP_GROUPS": "false"}).groups
    assert Settings.from_env({}).groups
    publish(data_dir, clock, "gone", 1, days_ago=0, keep=30)
    consume(groups_for(data_dir, clock), "gone", 1)
    shutil.rmtree(data_dir.queue_dir("gone"))
    make_cleaner(groups=False).run()
    assert data_dir.group_log_path("gone", "g").exists()


def test_a_log_made_anew_in_place_is_read_from_its_start(data_dir, clock):
    """A process's cached state must not be applied to another log that happens to have
    the same inode (a rewrite or a deletion, then a new file): it would skip its start."""
    publish(data_dir, clock, "q", 1, days_ago=1, keep=30)  # older than the others
    others = publish(data_dir, clock, "other", 3, days_ago=0, keep=30)
    groups = groups_for(data_dir, clock)
    consume(groups, "q", 1)
    assert groups.stats("q", "g").leased == 1  # cached: this file, one line read
    consume(groups_for(data_dir, clock), "other", 3)  # another log: three lines
    path = data_dir.group_log_path("q", "g")
    with open(path, "r+b") as log:  # a different log at the same path and inode
        log.write(data_dir.group_log_path("other", "g").read_bytes())
    stats = groups.stats("q", "g")
    assert stats.leased == 3 and stats.oldest_unacked == others[0]


def test_consumers_working_while_claireup_compacts_lose_nothing(data_dir, clock):
    """Consumers lease and ack while messages they acked are deleted (as retention would)
    and the log is compacted again and again: every ack counts once, nothing is
    delivered twice, and every receipt of an acked message is answered."""
    total = 120
    names = publish(data_dir, clock, "q", total, days_ago=0, keep=30)
    acked: list[str] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def work() -> None:
        consumer = groups_for(data_dir, clock)  # a worker process of the api
        try:
            while got := consume(consumer, "q", 3):
                outcomes = consumer.ack("q", "g", [d.receipt for d in got])
                assert [o.result for o in outcomes] == ["ok"] * len(got)
                acked.extend(d.name for d in got)
        except BaseException as exc:
            errors.append(exc)
        finally:
            done.set()

    worker = threading.Thread(target=work)
    worker.start()
    cleaner = groups_for(data_dir, clock)
    compactions = 0
    while not done.is_set():
        for name in list(acked):  # retention deletes what the group has done with
            Path(data_dir.queue_dir("q"), name).unlink(missing_ok=True)
        compactions += cleaner.tidy("q", "g").compacted
    worker.join()
    compactions += cleaner.tidy("q", "g").compacted
    assert not errors, errors
    assert sorted(acked) == names  # each exactly once
    assert compactions >= 1
    stats = groups_for(data_dir, clock).stats("q", "g")
    assert (stats.acked, stats.leased, stats.redelivered) == (total, 0, 0)
    assert not [n for n in os.listdir(data_dir.groups / "q") if n.endswith(".tmp")]
