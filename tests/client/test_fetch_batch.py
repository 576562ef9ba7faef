"""Batch fetch and long-poll in the client: against the real api, the original, a hostile source."""

from __future__ import annotations

import hashlib
import json
import os
import random
import threading
import tracemalloc
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import requests

from tests.replikate.fake_original import FakeOriginalServer
from tests.replikate.hostile import BOUNDARY, LATER, LATEST, POINTER, HostileServer
from tests.support.publisher import publish_from_another_process
from tests.support.queues import queue_name, read_queue
from zosciimq.client import (
    BadHeaders,
    BadMessageName,
    MemoryPointerStore,
    NotZosciiReply,
    OutOfOrder,
    ProtocolError,
    QueueNotFound,
    ReplyTooLarge,
    TransportOptions,
    TruncatedReply,
    ZosciiClient,
)
from zosciimq.client.replies import READ_CHUNK, ReplyInfo


def payloads() -> list[bytes]:
    """Sizes on both sides of every budget below; bytes that look like MIME framing."""
    rng = random.Random(11)
    out = [
        b"",
        bytes(range(256)),
        b"\r\n--zoscii-0123456789abcdef0123456789abcdef--\r\n",
        b'--zoscii-x\r\nContent-Disposition: attachment; filename="x.bin"\r\n\r\n',
        json.dumps({"system": "ZOSCII MQ", "error": "", "result": []}).encode(),
        b"\r\n",
        b"-",
    ]
    while len(out) < 45:
        out.append(rng.randbytes(rng.choice((0, 1, 2, 100, 999, 1000, 1001, 4000, 20_000))))
    out[30] = rng.randbytes(300_000)  # over the smaller memory limits: spooled to a file
    return out


def request_log(client: ZosciiClient) -> list[requests.PreparedRequest]:
    """Every request the client sends from now on (a response hook of its session)."""
    sent: list[requests.PreparedRequest] = []
    client.session.hooks["response"].append(lambda response, **_: sent.append(response.request))
    return sent


def fetch_params(request: requests.PreparedRequest) -> dict[str, str]:
    body = request.body if isinstance(request.body, str) else ""
    query = urlsplit(request.url or "").query
    return {k: v[0] for k, v in parse_qs(query + "&" + body).items()}


@pytest.fixture(scope="module")
def filled(api: tuple[str, Path]) -> tuple[str, list[tuple[str, bytes]]]:
    """A queue on the real api and its messages as single fetches read them."""
    queue = queue_name()
    with ZosciiClient(api[0]) as client:
        for payload in payloads():
            client.publish(queue, payload, retention_days=2)
        return queue, read_queue(client, queue)


@pytest.mark.parametrize(
    ("count", "max_bytes", "memory_limit"),
    [
        (2, None, 8 << 20),
        (7, None, 8 << 20),
        (7, 1000, 8 << 20),  # the budget cuts most batches short
        (7, 1, 8 << 20),  # one message per batch, whatever its size
        (100, None, 0),  # every non-empty part to a temporary file
        (100, 25_000, 2000),
        (1000, None, 50_000),
    ],
)
def test_batches_equal_the_sequence_of_single_fetches(
    api: tuple[str, Path],
    filled: tuple[str, list[tuple[str, bytes]]],
    count: int,
    max_bytes: int | None,
    memory_limit: int,
) -> None:
    queue, expected = filled
    got, pointer, sizes = [], "", []
    with ZosciiClient(api[0]) as client:
        assert client.capabilities.batch_fetch is None
        while batch := client.fetch_batch(
            queue, pointer, count, max_bytes, memory_limit=memory_limit
        ):
            assert client.capabilities.batch_fetch is True
            assert 1 <= len(batch) <= count
            if max_bytes is not None and len(batch) > 1:
                assert sum(m.size for m in batch) <= max_bytes
            in_memory = 0
            for message in batch:
                with message:
                    data = message.data
                    assert message.size == len(data)
                    if not message.spooled:
                        in_memory += message.size
                    got.append((message.name, data))
            assert in_memory <= memory_limit
            sizes.append(len(batch))
            pointer = batch[-1].name
    assert got == expected  # names and bytes, in order
    if max_bytes is None and count >= len(expected):
        assert sizes == [len(expected)]


def test_a_spooled_part_is_a_file_and_small_ones_stay_in_memory(
    api: tuple[str, Path], filled: tuple[str, list[tuple[str, bytes]]], tmp_path: Path
) -> None:
    queue, expected = filled
    # room for every other part; what is left when the 300 KB one comes is less than that
    small = sum(len(data) for number, (_, data) in enumerate(expected) if number != 30)
    with ZosciiClient(api[0]) as client:
        batch = client.fetch_batch(queue, "", 100, memory_limit=small, spool_dir=tmp_path)
    spooled = [m for m in batch if m.spooled]
    assert [m.name for m in spooled] == [expected[30][0]]  # only the 300 KB one
    with spooled[0].open() as file:
        assert file.read() == expected[30][1]
    for message in batch:
        message.close()


def test_parts_are_streamed_chunk_by_chunk_one_after_the_other(api: tuple[str, Path]) -> None:
    queue = queue_name()
    big = [os.urandom(3 << 20), os.urandom(2 << 20)]
    opened: list[str] = []
    writes: list[tuple[str, int]] = []

    class Recorder:
        def __init__(self, name: str) -> None:
            self.name, self.digest = name, hashlib.sha256()

        def write(self, data: bytes) -> None:
            assert opened[-1] == self.name  # the previous part is finished before the next
            writes.append((self.name, len(data)))
            self.digest.update(data)

    sinks: list[Recorder] = []

    def open_sink(info: ReplyInfo) -> Recorder:
        assert info.content_length == info.total_length
        opened.append(info.name)
        sinks.append(Recorder(info.name))
        return sinks[-1]

    with ZosciiClient(api[0]) as client:
        for payload in big:
            client.publish(queue, payload)
        received = client.fetch_batch_into(queue, "", open_sink, count=10)
    assert [r.size for r in received] == [len(p) for p in big]
    assert [s.digest.hexdigest() for s in sinks] == [hashlib.sha256(p).hexdigest() for p in big]
    assert max(size for _, size in writes) <= READ_CHUNK
    assert len(writes) >= sum(len(p) for p in big) // READ_CHUNK


def test_a_batch_of_large_messages_is_not_held_in_memory(api: tuple[str, Path]) -> None:
    """Four 8 MiB messages in one 32 MiB reply: Python's peak stays a few chunks."""
    queue = queue_name()
    with ZosciiClient(api[0]) as client:
        digests = []
        for number in range(4):
            payload = random.Random(number).randbytes(8 << 20)
            digests.append(hashlib.sha256(payload).hexdigest())
            client.publish(queue, payload)
        del payload
        tracemalloc.start()
        try:
            batch = client.fetch_batch(queue, "", 4, memory_limit=1 << 20)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert len(batch) == 4 and all(m.spooled for m in batch)
    assert peak < 4 << 20, f"peak {peak} bytes while receiving 32 MiB"
    for message, digest in zip(batch, digests, strict=True):
        with message, message.open() as file:
            sha = hashlib.sha256()
            while chunk := file.read(1 << 20):
                sha.update(chunk)
            assert sha.hexdigest() == digest


def test_nothing_new_is_an_empty_batch_and_errors_are_typed(api: tuple[str, Path]) -> None:
    queue = queue_name()
    with ZosciiClient(api[0]) as client:
        client.publish(queue, b"x")
        name = client.fetch(queue).name
        assert client.fetch_batch(queue, name, 10) == []
        assert client.capabilities.batch_fetch is None  # an envelope says nothing about batches
        with pytest.raises(QueueNotFound):
            client.fetch_batch(queue_name(), "", 10)
        with pytest.raises(ValueError):
            client.fetch_batch(queue, "", 0)


def test_the_client_size_limit_applies_to_every_part(api: tuple[str, Path]) -> None:
    queue = queue_name()
    with ZosciiClient(api[0]) as client:
        client.publish(queue, b"small")
        client.publish(queue, b"x" * 5000)
    with ZosciiClient(api[0], max_message_bytes=1000) as limited:
        with pytest.raises(ReplyTooLarge):
            limited.fetch_batch(queue, "", 10)
        assert [m.data for m in limited.fetch_batch(queue, "", 1)] == [b"small"]


# --- the original implementation ---------------------------------------------------------------
@pytest.fixture
def original() -> Iterator[FakeOriginalServer]:
    server = FakeOriginalServer()
    yield server
    server.close()


def test_against_the_original_a_batch_falls_back_to_single_fetches(
    original: FakeOriginalServer,
) -> None:
    data = payloads()[:12]
    for payload in data:
        original.add("orders", payload)
    expected = [original.queues["orders"][n] for n in sorted(original.queues["orders"])]
    with ZosciiClient(original.url) as client:  # the default mode: it tries batches
        got, pointer = [], ""
        while batch := client.fetch_batch("orders", pointer, 50):
            assert len(batch) == 1 and client.capabilities.batch_fetch is False
            got.append(batch[0].data)
            pointer = batch[0].name
    assert got == expected
    fetches = [params for _, _, params in original.requests]
    assert fetches[0][b"count"] == b"50"  # asked once ...
    assert all(b"count" not in params for params in fetches[1:])  # ... then remembered


def test_the_original_mode_never_sends_count_or_wait(original: FakeOriginalServer) -> None:
    for payload in payloads()[:5]:
        original.add("orders", payload)
    with ZosciiClient(original.url, mode="original") as client:
        consumed = [m.data for m in client.consume("orders", batch_count=10)]
        assert len(consumed) == 5
        assert client.fetch_batch("orders", "", 10, wait=5)[0].data == consumed[0]
        assert client.fetch("orders", "", wait=5).data == consumed[0]
    for method, content_type, params in original.requests:
        assert method == "POST" and content_type == "application/x-www-form-urlencoded"
        assert set(params) <= {b"action", b"q", b"after"}


def test_a_following_consumer_does_not_spin_on_a_server_without_long_poll(
    original: FakeOriginalServer,
) -> None:
    """The original answers a wait= fetch at once: the consumer keeps poll_interval."""
    original.add("orders", b"first", when=datetime.now() - timedelta(hours=1))
    stop = threading.Event()
    got = []
    with ZosciiClient(original.url) as client:
        consumer = client.consume("orders", follow=True, poll_interval=0.2, stop=stop)
        threading.Timer(0.6, lambda: original.add("orders", b"second")).start()
        for message in consumer:
            got.append(message.data)
            if message.data == b"second":
                stop.set()
    assert got == [b"first", b"second"]
    assert len(original.requests) <= 20  # about one per 0.2 s; a spinning loop: thousands


# --- a hostile source ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def hostile() -> Iterator[HostileServer]:
    server = HostileServer()
    yield server
    server.close()


@pytest.mark.parametrize(
    ("scenario", "error"),
    [
        ("batch_out_of_order", OutOfOrder),
        ("batch_not_after_pointer", OutOfOrder),
        ("batch_same_name_twice", OutOfOrder),
        ("batch_bad_part_name", BadMessageName),
        ("batch_part_without_name", BadMessageName),
        ("batch_part_without_length", NotZosciiReply),
        ("batch_length_mismatch", NotZosciiReply),
        ("batch_truncated", TruncatedReply),
        ("batch_too_many_parts", NotZosciiReply),
        ("batch_count_mismatch", NotZosciiReply),
        ("batch_last_mismatch", NotZosciiReply),
        ("batch_no_boundary", NotZosciiReply),
        ("batch_other_boundary", NotZosciiReply),
        ("batch_empty", NotZosciiReply),
        ("batch_epilogue", NotZosciiReply),
        ("batch_too_large_part", ReplyTooLarge),
        ("batch_many_part_headers", BadHeaders),
        ("batch_long_line", NotZosciiReply),
    ],
)
def test_a_bad_batch_is_refused_with_a_typed_error(
    hostile: HostileServer, scenario: str, error: type[ProtocolError]
) -> None:
    hostile.scenario = scenario
    options = TransportOptions(retries=0, read_timeout=5, deadline=10)
    with ZosciiClient(hostile.url, options=options, max_message_bytes=1 << 20) as client:
        with pytest.raises(error):
            client.fetch_batch("orders", POINTER, 5)


def test_a_message_containing_the_delimiter_is_taken_by_its_length(hostile: HostileServer) -> None:
    hostile.scenario = "batch_boundary_in_body"
    with ZosciiClient(hostile.url) as client:
        batch = client.fetch_batch("orders", POINTER, 5)
    assert [m.name for m in batch] == [LATER, LATEST]
    assert batch[0].data.startswith(f"\r\n--{BOUNDARY}\r\n".encode())
    assert batch[0].data.endswith(f"--{BOUNDARY}--\r\n".encode())
    assert batch[1].data == b"second"


def test_a_multipart_reply_to_a_single_fetch_is_not_trusted(hostile: HostileServer) -> None:
    hostile.scenario = "batch_boundary_in_body"
    with ZosciiClient(hostile.url) as client:
        with pytest.raises(NotZosciiReply):
            client.fetch("orders", POINTER)
        with pytest.raises(NotZosciiReply):
            client.fetch_batch("orders", POINTER, 1)  # one message: a single fetch


# --- long-poll -----------------------------------------------------------------------------------


def test_a_waiting_consumer_receives_a_message_published_by_another_process(
    api: tuple[str, Path],
) -> None:
    """Without long-poll the consumer would sleep poll_interval (60 s) and miss the join."""
    url, data_dir = api
    queue = queue_name()
    with ZosciiClient(url) as client:
        client.publish(queue, b"first")
        sent = request_log(client)
        stop = threading.Event()
        consumer = client.consume(
            queue, MemoryPointerStore(), follow=True, poll_interval=60, wait_seconds=25, stop=stop
        )
        got: list[tuple[str, bytes]] = []
        ready = threading.Event()

        def consume() -> None:
            for message in consumer:
                got.append((message.name, message.data))
                ready.set()
                if len(got) == 2:
                    stop.set()

        thread = threading.Thread(target=consume, daemon=True)
        thread.start()
        assert ready.wait(30)
        name = publish_from_another_process(data_dir, queue, "elsewhere")
        thread.join(timeout=25)
        assert not thread.is_alive(), "the waiting consumer did not get the message"
    assert [n for n, _ in got][1] == name and got[0][1] == b"first"
    assert got[1][1].startswith(b"elsewhere:0")
    assert len(sent) == 2  # a batch with the first message, then one long-poll
    assert fetch_params(sent[1])["wait"] == "25" and "count" in fetch_params(sent[1])


@pytest.mark.parametrize("kind", ["single", pytest.param("batch", marks=pytest.mark.slow)])
def test_a_waiting_fetch_returns_as_soon_as_a_message_arrives(
    api: tuple[str, Path], kind: str
) -> None:
    url, data_dir = api
    queue = queue_name()
    with ZosciiClient(url, options=TransportOptions(read_timeout=0.4)) as client:
        client.publish(queue, b"first")
        pointer = client.fetch(queue).name
        result: list[object] = []

        def wait() -> None:
            if kind == "single":
                result.append(client.fetch(queue, pointer, wait=25))
            else:
                result.append(client.fetch_batch(queue, pointer, 10, wait=25))

        # a read timeout of 0.4 s does not cut the 25 s wait: the client allows for it
        thread = threading.Thread(target=wait, daemon=True)
        thread.start()
        thread.join(timeout=1.0)  # two and a half read timeouts
        assert thread.is_alive(), "the fetch answered instead of waiting"
        name = publish_from_another_process(data_dir, queue, kind)
        thread.join(timeout=25)
    assert result, "the waiting fetch did not return with the message"
    message = result[0] if kind == "single" else result[0][0]  # type: ignore[index]
    assert message.name == name  # type: ignore[union-attr]


def test_batch_and_long_poll_can_be_switched_off(api: tuple[str, Path]) -> None:
    queue = queue_name()
    with ZosciiClient(api[0]) as client:
        for number in range(5):
            client.publish(queue, b"%d" % number)
        sent = request_log(client)
        stop = threading.Event()
        consumer = client.consume(
            queue, batch=False, long_poll=False, follow=True, poll_interval=0.05, stop=stop
        )
        got = []
        for message in consumer:
            got.append(message.data)
            if len(got) == 5:
                threading.Timer(0.2, stop.set).start()
        assert got == [b"0", b"1", b"2", b"3", b"4"]
        assert len(sent) >= 6
        assert all("count" not in fetch_params(r) and "wait" not in fetch_params(r) for r in sent)


def test_a_batched_consumer_resumes_exactly_where_it_stopped(
    api: tuple[str, Path], tmp_path: Path
) -> None:
    from zosciimq.client import FilePointerStore

    queue = queue_name()
    store = FilePointerStore(tmp_path / "pointer")
    with ZosciiClient(api[0]) as client:
        for number in range(10):
            client.publish(queue, b"m%d" % number)
        seen = []
        for stop_after in (4, 7):  # inside the second and third batch of 3
            with client.consume(queue, store, batch_count=3) as consumer:
                for message in consumer:
                    seen.append(message.data)
                    if len(seen) == stop_after:
                        break
            assert store.load() == consumer.pointer
        with pytest.raises(RuntimeError):
            with client.consume(queue, store, batch_count=3) as consumer:
                for message in consumer:
                    if message.data == b"m8":
                        raise RuntimeError("handler failed")  # m8 is not done
                    seen.append(message.data)
        with client.consume(queue, store, batch_count=3) as consumer:
            seen += [message.data for message in consumer]
    assert seen == [b"m%d" % n for n in range(10)]
