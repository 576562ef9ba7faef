"""The client's work-queue actions against a real api: lease, ack, requeue, dead_letter,
extend_lease, and what a receipt that lost its message gets (Fenced / an outcome)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import requests

from tests.support.queues import queue_name, read_queue
from zosciimq.client import (
    Fenced,
    LeasedMessage,
    Outcome,
    QueueNotFound,
    ZosciiClient,
    dead_letter_queue,
)


def publish(client: ZosciiClient, queue: str, *messages: bytes) -> None:
    for message in messages:
        client.publish(queue, message)


def test_lease_one_then_a_batch_with_receipts_and_delivery_counts(client: ZosciiClient) -> None:
    queue = queue_name()
    publish(client, queue, b"one", b"\x00\xff two", b"three")
    before = time.time()
    (first,) = client.lease(queue, "g", lease=60)
    assert isinstance(first, LeasedMessage)
    assert (first.data, first.size, first.deliveries, first.ttl) == (b"one", 3, 1, None)
    assert first.receipt.startswith(first.name + ":")
    assert first.queue == queue and first.group == "g"
    assert before + 50 < first.lease_until < time.time() + 61
    rest = client.lease(queue, "g", count=10)
    assert [m.data for m in rest] == [b"\x00\xff two", b"three"]
    assert all(m.deliveries == 1 for m in rest)
    assert client.lease(queue, "g") == []
    # another group sees every message again; the pointer readers are untouched
    assert [m.data for m in client.lease(queue, "other", count=5)] == [
        b"one",
        b"\x00\xff two",
        b"three",
    ]
    assert client.fetch(queue).data == b"one"


def test_lease_reports_the_ttl_left(api: tuple[str, Path], client: ZosciiClient) -> None:
    queue = queue_name()
    reply = requests.post(api[0], data={"action": "publish", "q": queue, "msg": "t", "ttl": "60"})
    assert reply.json()["error"] == ""
    (message,) = client.lease(queue, "g")
    assert message.ttl is not None and 50 <= message.ttl <= 60


def test_ack_finishes_for_the_group_and_a_repeat_is_fine(client: ZosciiClient) -> None:
    queue = queue_name()
    publish(client, queue, b"a", b"b")
    a, b = client.lease(queue, "g", count=2)
    client.ack(queue, "g", a)
    client.ack(queue, "g", a.receipt)  # a retry after a lost reply: ok again
    assert client.ack_many(queue, "g", [b, a]) == [
        Outcome(b.receipt, "ok"),
        Outcome(a.receipt, "ok"),
    ]
    assert client.lease(queue, "g", wait=0) == []


def test_requeue_redelivers_and_fences_the_old_receipt(client: ZosciiClient) -> None:
    queue = queue_name()
    publish(client, queue, b"a")
    (first,) = client.lease(queue, "g")
    client.requeue(queue, "g", first)
    (again,) = client.lease(queue, "g")
    assert (again.name, again.deliveries, again.data) == (first.name, 2, b"a")
    with pytest.raises(Fenced) as refused:
        client.ack(queue, "g", first)
    assert refused.value.status == 409
    with pytest.raises(Fenced):
        client.extend_lease(queue, "g", first, 30)
    outcomes = client.ack_many(queue, "g", [first, again])
    assert [o.result for o in outcomes] == ["fenced", "ok"]
    assert [o.ok for o in outcomes] == [False, True]
    # acked: a requeue of it is "unknown" (the message is done for the group)
    assert client.requeue_many(queue, "g", [again]) == [Outcome(again.receipt, "unknown")]


def test_requeue_with_a_delay_holds_the_message_back(client: ZosciiClient) -> None:
    queue = queue_name()
    publish(client, queue, b"later")
    (message,) = client.lease(queue, "g")
    client.requeue(queue, "g", message, delay=3600)
    assert client.lease(queue, "g") == []


def test_dead_letter_moves_the_message_to_the_dead_letter_queue(client: ZosciiClient) -> None:
    queue = queue_name()
    publish(client, queue, b"poison", b"fine")
    poison, fine = client.lease(queue, "g", count=2)
    client.dead_letter(queue, "g", poison)
    # a retry of a dead letter that happened (its reply lost) answers ok, buries nothing
    assert client.dead_letter_many(queue, "g", [poison, fine]) == [
        Outcome(poison.receipt, "ok"),
        Outcome(fine.receipt, "ok"),
    ]
    dead = read_queue(client, dead_letter_queue(queue, "g"))
    assert [data for _, data in dead] == [b"poison", b"fine"]
    assert client.lease(queue, "g") == []


def test_extend_lease_moves_the_end_of_the_lease(client: ZosciiClient) -> None:
    queue = queue_name()
    publish(client, queue, b"slow")
    (message,) = client.lease(queue, "g", lease=5)
    until = client.extend_lease(queue, "g", message, 600)
    assert until > message.lease_until + 500
    client.ack(queue, "g", message)


def test_lease_of_a_missing_queue_is_queue_not_found(client: ZosciiClient) -> None:
    with pytest.raises(QueueNotFound):
        client.lease(queue_name(), "g")
    with pytest.raises(ValueError):
        client.lease("q", "g", count=0)
    assert dead_letter_queue("orders", "ship") == "orders--ship--dead"
