"""Consumer groups: one consumer at a time per message, leases, fencing, requeue, dead
letters, TTL, and state that outlives the process."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from zosciimq.core import DataDir, QueueStore, Upload, group_log
from zosciimq.core.groups import ConsumerGroups, dead_letter_queue
from zosciimq.core.outgoing import Outgoing
from zosciimq.core.policy import PolicySource
from zosciimq.errors import InvalidInput

REPO = Path(__file__).resolve().parents[2]


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def lease_clock() -> Clock:
    return Clock()


@pytest.fixture
def groups(data_dir: DataDir, queues: QueueStore, lease_clock: Clock) -> ConsumerGroups:
    return ConsumerGroups(data_dir, queues, clock=lease_clock, max_deliveries=3)


def put(data_dir: DataDir, queues: QueueStore, queue: str, *bodies: bytes, ttl_at=None) -> list:
    uploads = []
    for body in bodies:
        upload = Upload(data_dir)
        upload.write(body)
        uploads.append(upload)
    try:
        results = queues.publish_many(queue, [Outgoing(u, 1, None, ttl_at) for u in uploads])
    finally:
        for upload in uploads:
            upload.discard()
    return [r.name for r in results]


def take(groups: ConsumerGroups, group: str = "g", count: int = 10, lease: float = 30, **kw):
    got = groups.consume("q", group, count=count, lease=lease, **kw)
    bodies = []
    for delivery in got:
        with delivery.file:
            bodies.append(delivery.file.read())
    return got, bodies


def test_each_message_goes_to_one_consumer_and_groups_are_independent(
    data_dir, queues, groups
) -> None:
    names = put(data_dir, queues, "q", b"1", b"2", b"3")
    _, bodies_a = take(groups, count=2, consumer="a")
    _, bodies_b = take(groups, count=2, consumer="b")
    assert bodies_a == [b"1", b"2"] and bodies_b == [b"3"]
    assert take(groups)[0] == []  # everything is leased
    assert take(groups, group="other", count=5)[1] == [b"1", b"2", b"3"]  # a group of its own
    assert [n for n, f in queues.iter_after("q", "", 10) if not f.close()] == names  # readers


def test_a_lease_that_runs_out_is_delivered_again_and_the_old_receipt_is_fenced(
    data_dir, queues, groups, lease_clock
) -> None:
    put(data_dir, queues, "q", b"job")
    (first,), _ = take(groups, lease=10)
    lease_clock.now += 11
    (again,), body = take(groups, lease=10)
    assert body == [b"job"] and again.deliveries == 2 and again.receipt != first.receipt
    assert groups.ack("q", "g", [first.receipt])[0].result == "fenced"
    assert groups.ack("q", "g", [again.receipt])[0].result == "ok"
    assert groups.ack("q", "g", [again.receipt])[0].result == "ok"  # a retried ack
    assert take(groups)[0] == []
    stats = groups.stats("q", "g")
    assert (stats.acked, stats.redelivered, stats.waiting, stats.leased) == (1, 1, 0, 0)


def test_an_expired_but_not_redelivered_lease_can_still_ack(data_dir, queues, groups, lease_clock):
    put(data_dir, queues, "q", b"slow")
    (delivery,), _ = take(groups, lease=5)
    lease_clock.now += 60  # nobody else took it meanwhile: the receipt still holds it
    assert groups.ack("q", "g", [delivery.receipt])[0].result == "ok"


def test_requeue_puts_the_message_behind_the_waiting_ones(data_dir, queues, groups, lease_clock):
    put(data_dir, queues, "q", b"a", b"b", b"c")
    (a,), _ = take(groups, count=1)
    assert groups.requeue("q", "g", [a.receipt])[0].result == "ok"
    put(data_dir, queues, "q", b"d")  # arrived after the requeue: a goes before it
    _, bodies = take(groups, count=10)
    assert bodies == [b"b", b"c", b"a", b"d"]


def test_a_requeue_delay_and_a_new_ttl(data_dir, queues, groups, lease_clock) -> None:
    put(data_dir, queues, "q", b"later")
    (first,), _ = take(groups)
    groups.requeue("q", "g", [first.receipt], delay=30, ttl=100)
    assert take(groups)[0] == []
    lease_clock.now += 31
    (again,), _ = take(groups)
    assert again.deliveries == 2 and 68 <= again.ttl_left <= 70


def test_dead_letters_are_a_queue_of_their_own(data_dir, queues, groups) -> None:
    (name,) = put(data_dir, queues, "q", b"poison")
    (delivery,), _ = take(groups)
    assert groups.dead_letter("q", "g", [delivery.receipt])[0].result == "ok"
    dead = dead_letter_queue("q", "g")
    result = queues.fetch(dead)
    with result.file:
        assert result.file.read() == b"poison"
    assert result.name[19:23] == name[19:23]  # the retention it had
    assert groups.stats("q", "g").dead_lettered == 1
    assert queues.fetch("q").name == name  # the queue itself keeps it for others


def test_worn_out_and_expired_messages_go_to_the_dead_letters_by_themselves(
    data_dir, queues, groups, lease_clock
) -> None:
    put(data_dir, queues, "q", b"crashes everyone")
    for _ in range(3):  # max_deliveries = 3
        assert len(take(groups, lease=1)[0]) == 1
        lease_clock.now += 2
    assert take(groups)[0] == []
    put(data_dir, queues, "q", b"stale", ttl_at=lease_clock.now - 1)
    put(data_dir, queues, "q", b"fresh", ttl_at=lease_clock.now + 50)
    (fresh,), bodies = take(groups)
    assert bodies == [b"fresh"] and 49 <= fresh.ttl_left <= 50
    dead = [f.read() for _, f in queues.iter_after(dead_letter_queue("q", "g"), "", 10)]
    assert dead == [b"crashes everyone", b"stale"]


def test_the_queue_policy_sets_deliveries_before_the_dead_letters(
    data_dir, queues, lease_clock, tmp_path
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[queues."q"]\ndead_letter_max_deliveries = 1\n')
    groups = ConsumerGroups(
        data_dir,
        queues,
        clock=lease_clock,
        max_deliveries=3,
        max_deliveries_for=PolicySource(policy).max_deliveries_for,
    )
    put(data_dir, queues, "q", b"once")
    put(data_dir, queues, "other", b"thrice")

    def deliveries(queue: str) -> list[int]:
        got = groups.consume(queue, "g", count=1, lease=10)
        for delivery in got:
            delivery.file.close()
        lease_clock.now += 11  # every lease runs out
        return [d.deliveries for d in got]

    assert deliveries("q") == [1]
    assert deliveries("q") == []  # its one delivery was used: dead-lettered, not redelivered
    dead = [f.read() for _, f in queues.iter_after(dead_letter_queue("q", "g"), "", 10)]
    assert dead == [b"once"] and groups.stats("q", "g").dead_lettered == 1
    # a queue the policy does not cover: the server's default (3)
    assert [deliveries("other") for _ in range(4)] == [[1], [2], [3], []]


def test_a_retried_settlement_answers_as_the_first_and_is_not_applied_twice(
    data_dir, queues, groups, lease_clock, monkeypatch
) -> None:
    """A client whose reply was lost retries: the same requeue, dead letter or ack answers
    ok again, also from a new process and after compaction, but a receipt settled one way
    is not ``ok`` for another (an ack of a requeued receipt did not happen)."""
    put(data_dir, queues, "q", b"1", b"2", b"3")
    (one, two, three), _ = take(groups, count=3)
    assert groups.requeue("q", "g", [one.receipt])[0].result == "ok"
    assert groups.dead_letter("q", "g", [two.receipt])[0].result == "ok"
    assert groups.ack("q", "g", [three.receipt])[0].result == "ok"

    def retried(current: ConsumerGroups) -> list[str]:
        return [
            current.requeue("q", "g", [one.receipt])[0].result,
            current.dead_letter("q", "g", [two.receipt])[0].result,
            current.ack("q", "g", [three.receipt])[0].result,
            current.ack("q", "g", [one.receipt])[0].result,
            current.requeue("q", "g", [two.receipt])[0].result,
        ]

    assert retried(groups) == ["ok", "ok", "ok", "fenced", "unknown"]
    fresh = ConsumerGroups(data_dir, queues, clock=lease_clock, max_deliveries=3)
    assert retried(fresh) == ["ok", "ok", "ok", "fenced", "unknown"]
    stats = fresh.stats("q", "g")
    assert (stats.acked, stats.dead_lettered, stats.waiting) == (1, 1, 1), "applied twice"
    assert len(queues.names_after(dead_letter_queue("q", "g"), "", 10)) == 1

    monkeypatch.setattr(group_log, "COMPACT_AFTER_LINES", 1)
    (again,), _ = take(fresh)  # leased again; more lines than twice the state: compacted
    for _ in range(6):
        fresh.extend("q", "g", again.receipt, 30)
    assert data_dir.group_log_path("q", "g").read_text().startswith("S ")
    compacted = ConsumerGroups(data_dir, queues, clock=lease_clock, max_deliveries=3)
    assert retried(compacted) == ["ok", "ok", "ok", "fenced", "unknown"]
    assert compacted.stats("q", "g").leased == 1


def test_a_malformed_receipt_in_a_list_settles_none_and_no_answered_ack_is_lost(
    data_dir, queues, groups, lease_clock
) -> None:
    """One bad receipt among good ones fails the call whole (nothing settled, in memory
    or in the log), so a retried ack that answers ok is an ack on disk: a new process
    agrees."""
    put(data_dir, queues, "q", b"1", b"2")
    (one, two), _ = take(groups, count=2)
    for settle in (groups.ack, groups.requeue, groups.dead_letter):
        with pytest.raises(InvalidInput):
            settle("q", "g", [one.receipt, "not-a-receipt"])
    assert groups.stats("q", "g").leased == 2
    assert groups.ack("q", "g", [one.receipt])[0].result == "ok"
    fresh = ConsumerGroups(data_dir, queues, clock=lease_clock, max_deliveries=3)
    assert fresh.ack("q", "g", [one.receipt])[0].result == "ok"
    stats = fresh.stats("q", "g")
    assert (stats.acked, stats.leased, stats.dead_lettered) == (1, 1, 0)
    assert not data_dir.queue_dir(dead_letter_queue("q", "g")).exists()
    assert fresh.ack("q", "g", [two.receipt])[0].result == "ok"


def test_state_survives_a_new_process_and_a_torn_last_line(data_dir, queues, groups, lease_clock):
    put(data_dir, queues, "q", b"1", b"2", b"3")
    (one, two), _ = take(groups, count=2)
    groups.ack("q", "g", [one.receipt])
    log = data_dir.group_log_path("q", "g")
    with open(log, "ab") as file:
        file.write(b"A 20991231 half a li")  # a crash mid-append
    fresh = ConsumerGroups(data_dir, QueueStore(data_dir), clock=lease_clock)
    assert fresh.ack("q", "g", [two.receipt])[0].result == "ok"
    assert take(fresh)[1] == [b"3"]
    assert fresh.stats("q", "g").acked == 2


def test_a_long_log_is_compacted_to_its_state(data_dir, queues, lease_clock, monkeypatch) -> None:
    monkeypatch.setattr(group_log, "COMPACT_AFTER_LINES", 50)
    monkeypatch.setattr(group_log, "RECENT_ACKS", 10)
    groups = ConsumerGroups(data_dir, queues, clock=lease_clock)
    put(data_dir, queues, "q", *[b"%d" % i for i in range(120)])
    kept = None
    for _ in range(12):
        got, _ = take(groups, count=10)
        groups.ack("q", "g", [d.receipt for d in got[:-1]])
        kept = got[-1]
    lines = data_dir.group_log_path("q", "g").read_text().splitlines()
    assert len(lines) < 50, "the log was never compacted"
    fresh = ConsumerGroups(data_dir, QueueStore(data_dir), clock=lease_clock)
    stats = fresh.stats("q", "g")
    assert (stats.acked, stats.leased) == (108, 12)
    assert fresh.ack("q", "g", [kept.receipt])[0].result == "ok"


@pytest.mark.slow  # kill -9 of a consumer process, its leases run out, the others idle 3 s
def test_competing_processes_ack_every_message_once_even_when_one_is_killed(tmp_path) -> None:
    """A consumer process is killed -9 holding a leased batch; 3 consumer processes then
    share the group: the dead one's messages come back after their lease and all 600 are
    acked exactly once."""
    layout = DataDir(tmp_path / "data")
    layout.ensure()
    queues = QueueStore(layout)
    names = put(layout, queues, "q", *[b"m%d" % i for i in range(600)])
    command = [sys.executable, "-m", "tests.core.group_consumer", str(layout.root)]
    victim = subprocess.Popen([*command, "victim", "20"], cwd=REPO, stdout=subprocess.PIPE)
    assert victim.stdout is not None
    acked: list[str] = []
    for line in victim.stdout:  # it acks 20, leases 10 more and holds them
        if line.strip() == b"HOLDING":
            break
        acked.append(line.decode().strip())
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    assert len(acked) == 20
    workers = [
        subprocess.Popen([*command, f"c{i}"], cwd=REPO, stdout=subprocess.PIPE) for i in range(3)
    ]
    for worker in workers:
        out, _ = worker.communicate(timeout=120)
        assert worker.returncode == 0
        acked += out.decode().split()
    assert sorted(acked) == names, "a message was acked twice or never"
    groups = ConsumerGroups(layout, queues)
    assert groups.stats("q", "g").acked == 600
