"""Long-poll fetch and consume answered by the live service: the api's answers, woken by a
publish (through the index, as the api's publishes are), nothing before its commit."""

from __future__ import annotations

import os
import threading
import time

import pytest
import requests

from tests.support.live_process import LiveProcess
from tests.support.queues import queue_name
from zosciimq.core import DataDir, QueueStore
from zosciimq.core.groups import ConsumerGroups


def fetch(live: LiveProcess, queue: str, **params: object) -> requests.Response:
    return requests.get(live.url, params={"action": "fetch", "q": queue, **params}, timeout=40)


def later(seconds: float, action: object) -> threading.Timer:
    timer = threading.Timer(seconds, action)  # type: ignore[arg-type]
    timer.start()
    return timer


def name_of(response: requests.Response) -> str:
    return response.headers["Content-Disposition"].split('"')[1]


def test_a_waiting_fetch_is_answered_by_the_next_publish(live: LiveProcess) -> None:
    queue = queue_name()
    (first,) = live.publish(queue, b"one")
    started = time.monotonic()
    later(0.5, lambda: live.publish(queue, b"two"))
    response = fetch(live, queue, after=first, wait=20)
    waited = time.monotonic() - started
    assert response.status_code == 200
    assert response.content == b"two"
    assert response.headers["Content-Type"] == "application/octet-stream"
    assert name_of(response) > first
    assert 0.4 < waited < 10, waited  # it waited for the publish, and no longer
    assert response.headers["X-Request-ID"]


def test_what_is_there_is_answered_at_once_byte_for_byte(live: LiveProcess) -> None:
    queue = queue_name()
    message = bytes(range(256)) * 3 + b"\r\n\x00\xff"
    (name,) = live.publish(queue, message)
    started = time.monotonic()
    response = fetch(live, queue, wait=20)
    assert time.monotonic() - started < 5
    assert (response.content, name_of(response)) == (message, name)
    part = fetch(live, queue, wait=20, offset=10, length=5)
    assert part.content == message[10:15]
    assert part.headers["X-ZOSCII-Offset"] == "10"
    assert part.headers["X-ZOSCII-Total-Length"] == str(len(message))
    beyond = fetch(live, queue, wait=20, offset=len(message))
    assert beyond.status_code == 416 and beyond.json()["error"]


def test_nothing_new_after_the_wait_and_an_empty_queue(live: LiveProcess) -> None:
    queue = queue_name()
    (name,) = live.publish(queue, b"only")
    response = fetch(live, queue, after=name, wait=1)
    assert response.status_code == 200
    assert response.json()["message"] == "No new messages."
    assert fetch(live, queue_name("missing"), wait=1).status_code == 404


def test_a_batch_wakes_with_everything_that_came(live: LiveProcess) -> None:
    queue = queue_name()
    (first,) = live.publish(queue, b"0")
    later(0.3, lambda: live.publish(queue, b"a", b"b", b"c"))
    response = fetch(live, queue, after=first, wait=20, count=10)
    assert response.headers["Content-Type"].startswith("multipart/mixed; boundary=")
    count = int(response.headers["X-ZOSCII-Count"])
    assert 1 <= count <= 3
    got = [b"a", b"b", b"c"][:count]
    for data in got:
        assert b"\r\n\r\n" + data + b"\r\n--" in response.content
    # the rest (if the wake-up came between publishes) by the next fetch, in order
    pointer = response.headers["X-ZOSCII-Last"]
    while count < 3:
        more = fetch(live, queue, after=pointer, wait=5, count=10)
        count += int(more.headers["X-ZOSCII-Count"])
        pointer = more.headers["X-ZOSCII-Last"]
    assert count == 3


def test_a_message_over_the_inline_limit_is_served_from_the_disk(
    tmp_path: os.PathLike[str],
) -> None:
    DataDir(tmp_path).ensure()
    live = LiveProcess(tmp_path, ZOSCII_LIVE_MAX_INLINE_BYTES="1024").start()
    try:
        queue = queue_name()
        (first,) = live.publish(queue, b"small")
        big = os.urandom(300_000)
        later(0.3, lambda: live.publish(queue, big))
        woken = fetch(live, queue, after=first, wait=20)
        assert woken.content == big
        batch = fetch(live, queue, after=first, wait=20, count=5)
        assert int(batch.headers["X-ZOSCII-Count"]) == 1 and big in batch.content
    finally:
        live.kill()


def test_waiting_costs_no_read_and_the_waiters_are_counted(live: LiveProcess) -> None:
    queue = queue_name()
    (first,) = live.publish(queue, b"x")
    results: list[requests.Response] = []
    threads = [
        threading.Thread(target=lambda: results.append(fetch(live, queue, after=first, wait=30)))
        for _ in range(20)
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 10
    while live.metric("zoscii_live_connections", kind="longpoll") < 20:
        assert time.monotonic() < deadline, live.get("/metrics")[1]
        time.sleep(0.05)
    (second,) = live.publish(queue, b"y")
    for thread in threads:
        thread.join(20)
    assert [r.content for r in results] == [b"y"] * 20
    assert {name_of(r) for r in results} == {second}
    assert live.metric("zoscii_live_messages_fetched_total", queue=queue) >= 20


# --- consumer groups ---------------------------------------------------------------------


def consume(live: LiveProcess, queue: str, **params: object) -> requests.Response:
    return requests.get(
        live.url,
        params={"action": "consume", "q": queue, "group": "g", "lease": 30, **params},
        timeout=40,
    )


@pytest.mark.slow  # seconds of lease and wait
def test_a_waiting_consume_leases_the_next_message_once(live: LiveProcess) -> None:
    queue = queue_name()
    live.publish(queue, b"first")
    assert consume(live, queue, wait=5).content == b"first"
    results: list[requests.Response] = []
    threads = [
        threading.Thread(target=lambda: results.append(consume(live, queue, wait=4)))
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    live.publish(queue, b"second")
    for thread in threads:
        thread.join(20)
    leased = [r for r in results if r.headers.get("X-ZOSCII-Receipt")]
    assert [r.content for r in leased] == [b"second"]  # one consumer, not both
    assert leased[0].headers["X-ZOSCII-Deliveries"] == "1"
    others = [r for r in results if r not in leased]
    assert others[0].json()["message"] == "No messages for this group."
    data = DataDir(live.data_dir)
    groups = ConsumerGroups(data, QueueStore(data))
    (outcome,) = groups.ack(queue, "g", [leased[0].headers["X-ZOSCII-Receipt"]])
    assert outcome.result == "ok"


@pytest.mark.parametrize("action", ["publish", "store", "queues"])
def test_other_actions_are_the_apis(live: LiveProcess, action: str) -> None:
    response = requests.get(live.url, params={"action": action, "q": "x"}, timeout=10)
    assert response.status_code == 400
    assert "live service" in response.json()["error"]
    posted = requests.post(live.url, data={"action": "fetch", "q": "x"}, timeout=10)
    assert posted.status_code == 405


def test_statissa_adds_what_the_live_service_served_to_the_apis(live: LiveProcess) -> None:
    """The console's fetch rates read this service's counter beside the api's."""
    from zoscii_statissa.fetch_counts import FetchCounts

    queue = queue_name()
    (first,) = live.publish(queue, b"one")
    live.publish(queue, b"two")
    assert fetch(live, queue, after=first, wait=5).content == b"two"
    counts = FetchCounts([live.url + "metrics"]).read()
    assert counts is not None and counts[queue] == 1.0


def test_past_the_connection_limit_a_connection_is_told_and_closed(
    tmp_path: os.PathLike[str],
) -> None:
    import socket

    DataDir(tmp_path).ensure()
    live = LiveProcess(tmp_path, ZOSCII_LIVE_MAX_CONNECTIONS="2").start()
    held = [socket.create_connection(("127.0.0.1", live.port)) for _ in range(2)]
    try:
        time.sleep(0.5)  # both accepted (asking /healthz would be a third connection)
        extra = socket.create_connection(("127.0.0.1", live.port), timeout=10)
        answer = b""
        while chunk := extra.recv(4096):
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 503") and b"Too many connections" in answer
        for sock in held:
            sock.close()
        live.wait_health("connections", 1)  # the health check's own
        assert live.metric("zoscii_live_refused_connections_total") == 1
    finally:
        live.kill()
