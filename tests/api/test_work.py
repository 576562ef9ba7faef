"""Work queues over HTTP: consume with leases and receipts, ack, requeue, dead letters."""

from __future__ import annotations

import email
import json
import threading
import time

import pytest

from tests.support.api_app import body, drain


def publish(client, *messages: bytes, **extra) -> None:
    for message in messages:
        reply = client.post("/", data={"action": "publish", "q": "jobs", "msg": message, **extra})
        assert reply.status_code == 200, reply.get_json()


def consume(client, group: str = "workers", **extra):
    return client.get("/", query_string={"action": "consume", "q": "jobs", "group": group, **extra})


def work(client, action: str, receipt: str, **extra):
    data = {"action": action, "q": "jobs", "group": "workers", "receipt": receipt, **extra}
    return client.post("/", data=data)


def test_one_message_with_its_receipt_then_ack(client) -> None:
    publish(client, b"\x00job 1\xff")
    reply = consume(client, lease="10")
    assert reply.status_code == 200 and reply.data == b"\x00job 1\xff"
    receipt = reply.headers["X-ZOSCII-Receipt"]
    assert reply.headers["X-ZOSCII-Deliveries"] == "1"
    assert float(reply.headers["X-ZOSCII-Lease-Until"]) > time.time()
    nothing = consume(client)
    assert body(nothing)["message"] == "No messages for this group."
    assert body(work(client, "ack", receipt))["error"] == ""
    assert body(work(client, "ack", receipt))["error"] == ""  # a retried ack: the same answer
    assert drain(client, "jobs")[0][1] == b"\x00job 1\xff"  # pointer readers unaffected


def test_a_batch_carries_a_receipt_per_part_and_acks_together(client) -> None:
    publish(client, b"a", b"b", b"c")
    reply = consume(client, count="5")
    assert reply.mimetype == "multipart/mixed"
    parsed = email.message_from_bytes(
        f"Content-Type: {reply.headers['Content-Type']}\r\n\r\n".encode() + reply.data
    )
    parts = parsed.get_payload()
    assert [p.get_payload(decode=True) for p in parts] == [b"a", b"b", b"c"]
    receipts = [p["X-ZOSCII-Receipt"] for p in parts]
    acked = client.post(
        "/",
        data={
            "action": "ack",
            "q": "jobs",
            "group": "workers",
            "receipts": json.dumps([receipts[0], receipts[1], receipts[2] + "0", receipts[0]]),
        },
    ).get_json()
    # a forged token for a message leased to someone: fenced; a repeat of an ack: ok
    assert [r["result"] for r in acked["result"]] == ["ok", "ok", "fenced", "ok"]


def test_a_retried_requeue_answers_ok_and_a_list_of_one_gets_its_outcome(client) -> None:
    """A worker whose reply was lost retries its requeue: ok again, not 409 (it did
    happen). ``receipts`` always answers with outcomes, even a list of one."""
    publish(client, b"x")
    receipt = consume(client).headers["X-ZOSCII-Receipt"]
    assert work(client, "requeue", receipt).status_code == 200
    assert work(client, "requeue", receipt).status_code == 200
    as_list = client.post(
        "/",
        data={"action": "ack", "q": "jobs", "group": "workers", "receipts": json.dumps([receipt])},
    )
    assert as_list.status_code == 200
    assert [r["result"] for r in body(as_list)["result"]] == ["fenced"]  # requeued, not acked
    assert work(client, "ack", receipt).status_code == 409
    assert consume(client).headers["X-ZOSCII-Deliveries"] == "2"  # requeued once, not twice


def test_a_stale_receipt_is_refused_with_409(client) -> None:
    publish(client, b"x")
    receipt = consume(client, lease="1").headers["X-ZOSCII-Receipt"]
    time.sleep(1.1)  # the lease running out is the behaviour under test
    again = consume(client)
    assert again.headers["X-ZOSCII-Deliveries"] == "2"
    refused = work(client, "ack", receipt)
    assert refused.status_code == 409 and "does not hold" in body(refused)["error"]
    assert work(client, "ack", again.headers["X-ZOSCII-Receipt"]).status_code == 200


def test_requeue_deadletter_extend_and_ttl(client) -> None:
    publish(client, b"first", b"second")
    first = consume(client).headers["X-ZOSCII-Receipt"]
    assert work(client, "requeue", first).status_code == 200
    assert consume(client).data == b"second"  # the requeued one waits its turn
    again = consume(client)
    assert again.data == b"first" and again.headers["X-ZOSCII-Deliveries"] == "2"
    extended = work(client, "extend", again.headers["X-ZOSCII-Receipt"], lease="600")
    assert extended.get_json()["result"]["lease_until"] > time.time() + 500
    assert work(client, "deadletter", again.headers["X-ZOSCII-Receipt"]).status_code == 200
    assert drain(client, "jobs--workers--dead")[0][1] == b"first"
    publish(client, b"timed", ttl="3600")
    assert 3590 <= int(consume(client).headers["X-ZOSCII-TTL"]) <= 3600


def test_a_waiting_consumer_is_woken_by_a_publish(client, parked) -> None:
    publish(client, b"first")
    work(client, "ack", consume(client).headers["X-ZOSCII-Receipt"])
    replies = []
    waiting = threading.Thread(target=lambda: replies.append(consume(client, wait="10")))
    started = time.monotonic()
    waiting.start()
    assert parked.wait(10)  # it waits: the wake-up is what is measured
    publish(client, b"wake up")
    waiting.join(timeout=15)
    assert replies[0].data == b"wake up" and time.monotonic() - started < 5


@pytest.mark.parametrize(
    ("extra", "status"),
    [({"group": ""}, 400), ({"group": "bad group!"}, 400), ({"lease": "999999"}, 400)],
)
def test_bad_consume_parameters(client, extra, status) -> None:
    publish(client, b"x")
    assert consume(client, **extra).status_code == status
