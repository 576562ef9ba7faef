"""Consumers that do not have to poll: fetch with wait= (long-poll) and count= (batch)."""

import email
import email.policy
import threading
import time
from pathlib import Path

import pytest
import requests

from tests.support.api_app import drain, make_client
from tests.support.api_server import ApiServer
from zosciimq.core import DataDir, QueueStore, Upload


def parse_batch(content_type: str, body: bytes) -> list[tuple[str, bytes]]:
    """Read parts by their Content-Length, as the format promises a client can."""
    boundary = content_type.split("boundary=", 1)[1].encode()
    parts, position = [], 0
    while True:
        delimiter = b"--" + boundary
        assert body[position : position + len(delimiter)] == delimiter
        position += len(delimiter)
        if body[position : position + 4] == b"--\r\n":
            assert position + 4 == len(body)
            return parts
        head_end = body.index(b"\r\n\r\n", position)
        headers = dict(
            line.split(": ", 1) for line in body[position + 2 : head_end].decode().split("\r\n")
        )
        size = int(headers["Content-Length"])
        start = head_end + 4
        parts.append((headers["Content-Disposition"].split('"')[1], body[start : start + size]))
        assert body[start + size : start + size + 2] == b"\r\n"
        position = start + size + 2


@pytest.fixture
def filled(tmp_path: Path):
    client = make_client(tmp_path / "data", max_batch_bytes=1000)
    for number in range(25):
        payload = bytes([number % 256]) * (number * 37 % 300) + b"\r\n--\x00\xff"
        client.post("/?action=publish&q=q", data=payload, content_type="application/x-raw")
    return client


@pytest.mark.parametrize(("count", "max_bytes"), [(1, 0), (7, 0), (7, 250), (100, 0), (3, 1)])
def test_batches_equal_the_sequence_of_single_fetches(filled, count: int, max_bytes: int) -> None:
    expected = drain(filled, "q")
    got, after = [], ""
    while True:
        query = {"action": "fetch", "q": "q", "after": after, "count": count}
        if max_bytes:
            query["max_bytes"] = max_bytes
        reply = filled.get("/", query_string=query)
        if reply.mimetype != "multipart/mixed":
            assert reply.get_json()["error"] == "" and reply.status_code == 200
            break
        parts = parse_batch(reply.headers["Content-Type"], reply.data)
        assert 1 <= len(parts) <= count
        assert reply.headers["X-ZOSCII-Count"] == str(len(parts))
        assert reply.headers["X-ZOSCII-Last"] == parts[-1][0]
        assert int(reply.headers["Content-Length"]) == len(reply.data)
        budget = min(max_bytes or 1000, 1000)
        assert len(parts) == 1 or sum(len(b) for _, b in parts) <= budget
        got.extend(parts)
        after = parts[-1][0]
    assert got == expected and len(got) == 25


def test_a_batch_is_standard_mime(filled) -> None:
    reply = filled.get("/?action=fetch&q=q&count=5")
    head = f"Content-Type: {reply.headers['Content-Type']}\r\n\r\n".encode()
    message = email.message_from_bytes(head + reply.data, policy=email.policy.HTTP)
    parts = list(message.iter_parts())
    assert len(parts) == 5
    assert [p.get_filename() for p in parts] == [n for n, _ in drain(filled, "q")[:5]]


def test_batch_replies_when_there_is_nothing(tmp_path: Path) -> None:
    client = make_client(tmp_path / "data")
    (tmp_path / "data" / "queues" / "e").mkdir(parents=True)
    assert client.get("/?action=fetch&q=e&count=5").get_json()["message"] == "Queue is empty."
    assert client.get("/?action=fetch&q=nope&count=5").status_code == 404
    bad = client.get("/?action=fetch&q=e&count=5&offset=3")
    assert bad.status_code == 400 and bad.get_json()["error"]
    assert client.get("/?action=fetch&q=e&count=100000").status_code == 400


def test_a_waiting_fetch_gets_a_message_published_meanwhile(
    tmp_path: Path, parked: threading.Event
) -> None:
    client = make_client(tmp_path / "data")
    client.get("/?action=publish&q=w&msg=first")
    first = client.get("/?action=fetch&q=w").headers["Content-Disposition"].split('"')[1]
    replies = []
    waiter = threading.Thread(
        target=lambda: replies.append(
            client.get("/", query_string={"action": "fetch", "q": "w", "after": first, "wait": 20})
        )
    )
    waiter.start()
    assert parked.wait(20), "the fetch never waited"
    assert not replies, "the fetch answered instead of waiting"
    client.get("/?action=publish&q=w&msg=second")
    waiter.join(timeout=20)
    assert replies and replies[0].data == b"second"


def test_wait_is_capped_by_configuration(tmp_path: Path) -> None:
    client = make_client(tmp_path / "data", max_wait_seconds=0)
    client.get("/?action=publish&q=w&msg=x")
    name = client.get("/?action=fetch&q=w").headers["Content-Disposition"].split('"')[1]
    reply = client.get("/", query_string={"action": "fetch", "q": "w", "after": name, "wait": 600})
    assert reply.get_json()["message"] == "No new messages."


def test_long_poll_wakes_on_a_publish_from_another_process(tmp_path: Path) -> None:
    """The publish comes through the core in this test process; the waiter sits in a
    gunicorn worker: only the index poll can wake it."""
    data_dir = tmp_path / "data"
    server = ApiServer(data_dir, workers=1).start()
    try:
        requests.get(server.url, params={"action": "publish", "q": "x", "msg": "a"})
        first = requests.get(server.url, params={"action": "fetch", "q": "x"})
        pointer = first.headers["Content-Disposition"].split('"')[1]
        result: list[requests.Response] = []
        waiter = threading.Thread(
            target=lambda: result.append(
                requests.get(
                    server.url,
                    params={"action": "fetch", "q": "x", "after": pointer, "wait": 25},
                    timeout=60,
                )
            )
        )
        waiter.start()
        time.sleep(0.5)  # time to park: nothing outside the worker shows a waiting request
        layout = DataDir(data_dir)
        with Upload(layout) as upload:
            upload.write(b"from elsewhere")
            QueueStore(layout).publish("x", upload, retention_days=0)
        waiter.join(timeout=30)
        assert result and result[0].content == b"from elsewhere"
    finally:
        server.stop()


@pytest.mark.slow
def test_hundreds_of_idle_waiters_leave_publishing_alone(tmp_path: Path) -> None:
    """300 consumers park on long-polls while another client publishes 200 messages;
    then each waiter receives the one message published to its own queue."""
    server = ApiServer(tmp_path / "data", workers=2, threads=160).start()
    try:
        for number in range(300):
            requests.get(server.url, params={"action": "publish", "q": f"w{number}", "msg": "0"})
        received: dict[int, bytes] = {}
        lock = threading.Lock()

        def consumer(number: int) -> None:
            session = requests.Session()
            queue = f"w{number}"
            after = session.get(server.url, params={"action": "fetch", "q": queue})
            pointer = after.headers["Content-Disposition"].split('"')[1]
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                reply = session.get(
                    server.url,
                    params={"action": "fetch", "q": queue, "after": pointer, "wait": 30},
                    timeout=60,
                )
                if "Content-Disposition" in reply.headers:
                    with lock:
                        received[number] = reply.content
                    return

        consumers = [threading.Thread(target=consumer, args=(n,)) for n in range(300)]
        for thread in consumers:
            thread.start()
        time.sleep(2)
        session = requests.Session()
        for number in range(200):
            reply = session.post(
                server.url,
                params={"action": "publish", "q": "busy"},
                data=b"%d" % number,
                headers={"Content-Type": "x/raw"},
            )
            assert reply.status_code == 200 and reply.json()["error"] == ""
        assert not received, "a waiter woke for a queue nobody published to"
        for number in range(300):
            session.get(
                server.url, params={"action": "publish", "q": f"w{number}", "msg": f"for {number}"}
            )
        for thread in consumers:
            thread.join(timeout=120)
        assert received == {n: f"for {n}".encode() for n in range(300)}
    finally:
        server.stop()
