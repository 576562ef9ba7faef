"""The ØMQ patterns onto queues, with real pyzmq sockets: request-reply, PUSH in, workers
pulling a consumer group, PUB/SUB with resume; access control by token and by PLAIN."""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq

from tests.support.zmq_gateway import Gateway, connect


def queue_name() -> str:
    return "q" + uuid.uuid4().hex[:12]


def socket(context: zmq.Context, kind: int, endpoint: str, **options: object) -> zmq.Socket:
    sock = context.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    sock.rcvtimeo = 5000
    for name, value in options.items():
        setattr(sock, name, value)
    sock.connect(endpoint)
    return sock


def test_request_reply_publishes_durably_and_fetches(
    gateway: Gateway, context: zmq.Context
) -> None:
    queue = queue_name()
    req = socket(context, zmq.REQ, gateway.endpoint("request"))
    try:
        req.send_multipart([b"publish", queue.encode(), b"\x00binary\xff"])
        status, name = req.recv_multipart()
        assert status == b"ok"
        # durable once answered: the core (as the api) serves it byte-exact
        assert gateway.messages(queue) == [(name.decode(), b"\x00binary\xff")]
        req.send_multipart([b"publish", queue.encode(), b"two", b"three"])
        status, *names = req.recv_multipart()
        assert status == b"ok" and len(names) == 2
        req.send_multipart([b"fetch", queue.encode(), name])
        assert req.recv_multipart() == [b"ok", names[0], b"two"]
        req.send_multipart([b"fetch", queue.encode(), names[1]])
        assert req.recv_multipart() == [b"empty"]
        req.send_multipart([b"frobnicate", queue.encode()])
        assert req.recv_multipart()[:2] == [b"error", b"bad_action"]
        req.send_multipart([b"publish", b"bad name!", b"x"])
        assert req.recv_multipart()[:2] == [b"error", b"bad_queue"]
    finally:
        req.close()


def test_push_publishes_and_workers_settle_a_groups_messages(
    gateway: Gateway, context: zmq.Context
) -> None:
    queue = queue_name()
    push = socket(context, zmq.PUSH, gateway.endpoint("push"))
    worker = socket(context, zmq.REQ, gateway.endpoint("work"))
    try:
        for i in range(10):
            push.send_multipart([queue.encode(), b"task %d" % i])
        seen = []
        for _ in range(10):
            worker.send_multipart([b"pull", queue.encode(), b"3000"])
            reply = worker.recv_multipart()
            assert len(reply) == 5, (reply, gateway.log()[-3000:])
            kind, q, _name, receipt, payload = reply
            assert (kind, q) == (b"message", queue.encode())
            seen.append(payload)
            action = b"requeue" if payload == b"task 3" and seen.count(payload) == 1 else b"ack"
            worker.send_multipart([action, queue.encode(), receipt])
            assert worker.recv_multipart() == [b"ok"]
        worker.send_multipart([b"pull", queue.encode(), b"3000"])
        reply = worker.recv_multipart()
        assert reply[4] == b"task 3"  # the requeued one comes back
        worker.send_multipart([b"ack", queue.encode(), reply[3]])
        assert worker.recv_multipart() == [b"ok"]
        worker.send_multipart([b"ack", queue.encode(), reply[3]])
        assert worker.recv_multipart() == [b"ok"]  # a retried ack is answered as the first
        worker.send_multipart([b"pull", queue.encode(), b"200"])
        assert worker.recv_multipart() == [b"timeout"]
        assert sorted(seen[:10]) == sorted(b"task %d" % i for i in range(10))
        # every message pushed is an ordinary message of the queue
        assert [d for _, d in gateway.messages(queue)] == [b"task %d" % i for i in range(10)]
    finally:
        push.close()
        worker.close()


def test_pub_sends_new_messages_and_resumes_after_a_pointer(
    gateway: Gateway, context: zmq.Context
) -> None:
    queue = queue_name()
    req = socket(context, zmq.REQ, gateway.endpoint("request"))
    req.send_multipart([b"publish", queue.encode(), b"old-1", b"old-2"])
    _, first, _second = req.recv_multipart()
    live = socket(context, zmq.SUB, gateway.endpoint("pub"))
    live.subscribe(queue.encode())
    resume = socket(context, zmq.SUB, gateway.endpoint("pub"))
    resume.subscribe(queue.encode() + b"@" + first)
    try:
        gateway.wait_for_log(f"pub: following {queue} after")
        gateway.wait_for_log(f"pub: following {queue}@")
        time.sleep(0.2)
        req.send_multipart([b"publish", queue.encode(), b"new-1"])
        req.recv_multipart()
        topic, _name, payload = resume.recv_multipart()
        assert (topic, payload) == (queue.encode() + b"@" + first, b"old-2")
        assert resume.recv_multipart()[2] == b"new-1"
        got = []
        while len(got) < 1:
            topic, _name, payload = live.recv_multipart()
            if topic == queue.encode():  # ØMQ topics are prefixes: compare the frame
                got.append(payload)
        assert got == [b"new-1"]  # live: only what came after the subscription
    finally:
        for sock in (req, live, resume):
            sock.close()


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    clients = f"""
[[clients]]
name = "writer"
token_sha256 = "{token_hash("w-token")}"
write = ["inbox*", "zpipe-*"]
read = ["zpipe-*"]

[[clients]]
name = "reader"
token_sha256 = "{token_hash("r-token")}"
read = ["outbox"]
"""
    process = Gateway(
        tmp_path_factory.mktemp("zmq-guarded"),
        ZOSCII_AUTH_CLIENTS=clients,
        ZOSCII_ZPIPES_CLIENT="writer",
    ).start()
    yield process
    process.terminate()
    process.kill()


def test_access_control_by_token_frame(
    guarded: Gateway, context: zmq.Context, tmp_path: Path
) -> None:
    req = socket(context, zmq.REQ, guarded.endpoint("request"))
    push = socket(context, zmq.PUSH, guarded.endpoint("push"))
    try:
        req.send_multipart([b"publish", b"inbox", b"no token"])
        assert req.recv_multipart()[:2] == [b"error", b"unauthenticated"]
        req.send_multipart([b"Bearer wrong", b"publish", b"inbox", b"x"])
        assert req.recv_multipart()[:2] == [b"error", b"unauthenticated"]
        req.send_multipart([b"Bearer r-token", b"publish", b"inbox", b"x"])
        assert req.recv_multipart()[:2] == [b"error", b"forbidden"]
        req.send_multipart([b"Bearer w-token", b"publish", b"inbox", b"x"])
        assert req.recv_multipart()[0] == b"ok"
        push.send_multipart([b"inbox2", b"no token: dropped"])
        push.send_multipart([b"Bearer w-token", b"inbox2", b"kept"])
        deadline = time.monotonic() + 5
        while not guarded.messages("inbox2") and time.monotonic() < deadline:
            time.sleep(0.02)
        assert [d for _, d in guarded.messages("inbox2")] == [b"kept"]
        guarded.wait_for_log("push: message dropped: unauthenticated")
        assert [d for _, d in guarded.messages("inbox")] == [b"x"]  # nothing else written
    finally:
        req.close()
        push.close()


def test_pub_needs_plain_and_the_read_right(guarded: Gateway, context: zmq.Context) -> None:
    denied = socket(
        context,
        zmq.SUB,
        guarded.endpoint("pub"),
        plain_username=b"writer",
        plain_password=b"w-token",
    )
    denied.subscribe(b"outbox")
    allowed = socket(
        context,
        zmq.SUB,
        guarded.endpoint("pub"),
        plain_username=b"reader",
        plain_password=b"r-token",
    )
    allowed.subscribe(b"outbox")
    try:
        guarded.wait_for_log(r"subscription b'outbox' refused: forbidden")
        guarded.wait_for_log("pub: following outbox")
        time.sleep(0.2)
        req = socket(context, zmq.REQ, guarded.endpoint("request"))
        # published into outbox directly through the core (nobody here may write it)
        from zosciimq.core import DataDir, Outgoing, QueueStore, Upload

        store = QueueStore(DataDir(guarded.data_dir))
        upload = Upload(DataDir(guarded.data_dir))
        upload.write(b"for the reader")
        store.publish_many("outbox", [Outgoing(upload, 1)])
        store.close()
        assert allowed.recv_multipart()[2] == b"for the reader"
        denied.rcvtimeo = 500
        with pytest.raises(zmq.Again):
            denied.recv_multipart()
        req.close()
    finally:
        denied.close()
        allowed.close()


def test_zpipes_with_access_control_acts_as_its_client(
    guarded: Gateway, context: zmq.Context
) -> None:
    with connect(context, guarded.ipc) as writer, connect(context, guarded.ipc) as reader:
        reader.open_reader(b"allowed")
        writer.open_writer(b"allowed")
        assert writer.write(b"ok") == "WRITE_OK"
        assert reader.read(2, 1000) == ("READ_OK", b"ok")
        assert writer.call(b"\xaa\xa0\x04\x03Bad")[0] == "INVALID"  # already open
    with connect(context, guarded.ipc) as other:
        # "Bad" is queue zpipe_<hash>, outside the client's zpipe-* patterns
        name, reason = other.call(b"\xaa\xa0\x04\x03Bad")
        assert name == "OUTPUT_FAILED" and reason.startswith(b"Not allowed to publish"), reason
