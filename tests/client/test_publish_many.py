"""publish_many: batch publish against the real api, a server with small limits, the original.

Every test reads back what was stored (names, bytes, retention digits) rather than
trusting the replies.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import threading
import tracemalloc
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import requests

from tests.client.original_forms import FormsOriginal
from tests.client.proxy import TcpProxy
from tests.support.api_server import running_api
from tests.support.queues import queue_name, read_queue
from zosciimq.client import (
    BatchItem,
    InvalidInput,
    NotZosciiReply,
    QueueFull,
    StorageFull,
    TooLarge,
    TransportOptions,
    ZosciiClient,
)
from zosciimq.client.payload import Payload
from zosciimq.client.publish_batch import BatchBody, FramedBody, MultipartBody
from zosciimq.core import parse_name


def days(name: str) -> int:
    return parse_name(name).retention_days


def request_log(client: ZosciiClient) -> list[requests.PreparedRequest]:
    sent: list[requests.PreparedRequest] = []
    client.session.hooks["response"].append(lambda response, **_: sent.append(response.request))
    return sent


def shape(request: requests.PreparedRequest) -> tuple[str, int]:
    """("batch", parts) for a batch publish, ("single", 1) for any other publish."""
    query = parse_qs(urlsplit(request.url or "").query)
    if isinstance(request.body, BatchBody):
        assert query.get("batch") == ["1"]
        return "batch", request.body.count
    assert "batch" not in query and "batch=" not in str(request.body)
    return "single", 1


FRAMING = [
    b"",
    bytes(range(256)),
    b"\r\n--zoscii-0123456789abcdef0123456789abcdef--\r\n",
    b'--x\r\nContent-Disposition: form-data; name="msg"; filename="m9"\r\n\r\nhi\r\n--x--\r\n',
    b"\r\n",
    b"\xff\xfe\x00\x80 not utf-8 \xc3\x28 + & = %",
]


@pytest.fixture(scope="module")
def small_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An api whose batches hold at most 5 messages and 4096 bytes."""
    env = {"ZOSCII_MAX_BATCH_COUNT": "5", "ZOSCII_MAX_BATCH_BYTES": "4096"}
    with running_api(tmp_path_factory.mktemp("small-api"), env=env) as url:
        yield url


@pytest.fixture
def forms_original() -> Iterator[FormsOriginal]:
    server = FormsOriginal()
    yield server
    server.close()


# --- what is stored ---------------------------------------------------------------------
def test_every_kind_of_message_is_stored_byte_exact_in_order(
    client: ZosciiClient, tmp_path: Path
) -> None:
    queue = queue_name()
    big = os.urandom(3 << 20)
    (tmp_path / "big.bin").write_bytes(big)
    (tmp_path / "small.bin").write_bytes(b"\x00from a path\xff")
    positioned = open(tmp_path / "big.bin", "rb")  # noqa: SIM115
    positioned.seek(1000)
    messages = [
        *FRAMING,
        "text é 東京",
        tmp_path / "small.bin",
        tmp_path / "big.bin",
        positioned,
        io.BytesIO(b"0123456789"),
        iter([b"chunk-1 ", b"\x00\xff", b" chunk-3"]),
    ]
    expected = [
        *FRAMING,
        "text é 東京".encode(),
        b"\x00from a path\xff",
        big,
        big[1000:],
        b"0123456789",
        b"chunk-1 \x00\xff chunk-3",
    ]
    try:
        results = client.publish_many(queue, messages, retention_days=7)
    finally:
        positioned.close()
    got = read_queue(client, queue)
    assert [data for _, data in got] == expected
    assert [r.name for r in results] == [name for name, _ in got]
    assert all(days(name) == 7 for name, _ in got)
    assert all(r.duplicate is False for r in results)
    nonces = [r.nonce for r in results]
    assert len(set(nonces)) == len(nonces)
    assert all(uuid.UUID(n).version == 4 for n in nonces if n)
    assert client.capabilities.batch_publish is True


def test_names_of_each_batch_are_contiguous_while_others_publish(
    api: tuple[str, Path], client: ZosciiClient
) -> None:
    queue = queue_name()
    stop, started = threading.Event(), threading.Event()

    def interleave() -> None:
        with ZosciiClient(api[0]) as other:
            while not stop.is_set():
                other.publish(queue, b"other")
                started.set()

    sent = request_log(client)
    thread = threading.Thread(target=interleave)
    thread.start()
    try:
        assert started.wait(30)
        payloads = [f"batch {i}".encode() for i in range(61)]
        results = client.publish_many(queue, payloads, batch_size=20)
    finally:
        stop.set()
        thread.join()
    sizes = [parts for kind, parts in map(shape, sent)]
    assert sizes == [1, 20, 20, 20]  # the probe, then full batches
    listing = read_queue(client, queue)
    position = {name: index for index, (name, _) in enumerate(listing)}
    assert [listing[position[r.name]][1] for r in results] == payloads
    start = 0
    for size in sizes:
        indexes = [position[r.name] for r in results[start : start + size]]
        assert indexes == list(range(indexes[0], indexes[0] + size))  # nothing in between
        start += size
    assert sum(data == b"other" for _, data in listing) >= 1


def test_own_nonce_and_retention_per_message(client: ZosciiClient) -> None:
    queue = queue_name()
    mine = f"mine-{uuid.uuid4().hex}"
    items = [
        BatchItem(b"a", retention_days=1),
        b"b",
        BatchItem(b"c", nonce=mine, retention_days=9999),
        BatchItem(b"d", retention_days=0),
    ]
    client.publish_many(queue, [b"probe"])  # batches known: the four go in one request
    results = client.publish_many(queue, items, retention_days=30)
    got = read_queue(client, queue)[1:]
    assert [(days(name), data) for name, data in got] == [
        (1, b"a"),
        (30, b"b"),
        (9999, b"c"),
        (0, b"d"),
    ]
    assert results[2].nonce == mine
    again = client.publish_many(queue, [BatchItem(b"not stored", nonce=mine), b"e"])
    assert (again[0].name, again[0].duplicate, again[0].nonce) == (None, True, mine)
    assert again[1].duplicate is False
    assert [data for _, data in read_queue(client, queue)[5:]] == [b"e"]


def test_a_single_message_batch_carries_its_retention_on_the_request(
    client: ZosciiClient,
) -> None:
    queue = queue_name()
    client.publish_many(queue, [BatchItem(b"alone", retention_days=12)], retention_days=3)
    client.publish_many(queue, [b"default"], retention_days=3)
    assert [(days(n), d) for n, d in read_queue(client, queue)] == [(12, b"alone"), (3, b"default")]


# --- retries ----------------------------------------------------------------------------
def test_repeating_the_same_items_stores_nothing_twice(client: ZosciiClient) -> None:
    queue = queue_name()
    items = [BatchItem(os.urandom(100), nonce=f"r-{uuid.uuid4().hex}") for _ in range(12)]
    first = client.publish_many(queue, items, batch_size=5)
    assert all(r.duplicate is False for r in first)
    again = client.publish_many(queue, [*items[:6], BatchItem(b"new")], batch_size=5)
    assert [r.duplicate for r in again] == [True] * 6 + [False]
    assert [r.name for r in again[:6]] == [None] * 6
    got = read_queue(client, queue)
    assert [data for _, data in got] == [item.data for item in items] + [b"new"]
    assert [name for name, _ in got[:12]] == [r.name for r in first]


def test_a_lost_reply_is_sent_again_whole_and_stores_nothing_twice(
    api: tuple[str, Path], tmp_path: Path
) -> None:
    url = urlsplit(api[0])
    proxy = TcpProxy(url.hostname or "127.0.0.1", url.port or 80).start()
    queue = queue_name()
    path = tmp_path / "file.bin"
    path.write_bytes(os.urandom(200_000))
    payloads = [os.urandom(5000) for _ in range(8)]
    try:
        options = TransportOptions(retries=3, backoff_factor=0)
        with ZosciiClient(proxy.url, options=options) as client:
            client.capabilities.batch_publish = True  # learnt before: all ten in one request
            proxy.drop_replies = 1  # the server stores the batch, the client sees no reply
            results = client.publish_many(queue, [*payloads, path, iter([b"spooled"])])
            assert proxy.connections == 2
    finally:
        proxy.stop()
    # the retry sent the same bytes and nonces: every message answered as already there
    assert [r.duplicate for r in results] == [True] * 10
    with ZosciiClient(api[0]) as reader:
        got = [data for _, data in read_queue(reader, queue)]
    assert got == [*payloads, path.read_bytes(), b"spooled"]


# --- splitting --------------------------------------------------------------------------
def test_batch_size_and_batch_bytes_split_the_requests(client: ZosciiClient) -> None:
    queue = queue_name()
    sent = request_log(client)
    first = [os.urandom(100) for _ in range(25)]
    client.publish_many(queue, first, batch_size=10)
    assert [shape(r) for r in sent] == [("batch", 1), ("batch", 10), ("batch", 10), ("batch", 4)]
    # the probe is multipart (every server reads it), its reply announced the framed body
    assert [type(r.body) for r in sent] == [MultipartBody] + [FramedBody] * 3
    sent.clear()
    alone = os.urandom(1000)  # over batch_bytes: a single publish of its own
    second = [os.urandom(100) for _ in range(5)] + [alone] + [os.urandom(100) for _ in range(5)]
    results = client.publish_many(queue, second, batch_size=10, batch_bytes=450)
    assert [shape(r) for r in sent] == [
        ("batch", 4),
        ("batch", 1),
        ("single", 1),
        ("batch", 4),
        ("batch", 1),
    ]
    assert results[5].name is None and results[5].duplicate is None and results[5].nonce
    got = read_queue(client, queue)
    assert [data for _, data in got] == first + second
    assert [r.name for r in results if r.name] == [n for n, _ in got[25:] if n != got[30][0]]


def test_publish_iter_takes_the_input_lazily_and_yields_per_request(
    client: ZosciiClient,
) -> None:
    queue = queue_name()
    client.publish_many(queue, [b"probe"])
    taken: list[int] = []

    def source() -> Iterator[bytes]:
        for number in range(7):
            taken.append(number)
            yield f"m{number}".encode()

    results = client.publish_iter(queue, source(), batch_size=3)
    assert taken == []  # nothing before the first result is asked for
    first = next(results)
    assert len(taken) == 3  # one request's worth
    assert [data for _, data in read_queue(client, queue)] == [b"probe", b"m0", b"m1", b"m2"]
    rest = list(results)
    assert len(taken) == 7
    assert [first.name, *(r.name for r in rest)] == [n for n, _ in read_queue(client, queue)[1:]]


def test_progress_reports_messages_and_bytes(client: ZosciiClient) -> None:
    seen: list[tuple[int, int]] = []
    payloads = [os.urandom(70_000) for _ in range(7)]
    client.publish_many(queue_name(), payloads, batch_size=3, on_progress=lambda *a: seen.append(a))
    acknowledged = [m for m, _ in seen]
    assert acknowledged == sorted(acknowledged) and acknowledged[-1] == 7
    assert seen[-1] == (7, sum(map(len, payloads)))
    assert any(m == 1 and 70_000 < b < 4 * 70_000 for m, b in seen)  # within request 2


def test_files_are_streamed_not_read_into_memory(client: ZosciiClient, tmp_path: Path) -> None:
    queue = queue_name()
    paths = []
    for number in range(2):
        path = tmp_path / f"f{number}.bin"
        path.write_bytes(os.urandom(8 << 20))
        paths.append(path)
    client.publish_many(queue, [b"probe"])
    tracemalloc.start()
    try:
        client.publish_many(queue, paths)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 << 20, f"publishing 16 MB of files took {peak} bytes of memory"
    digests = [hashlib.sha256(data).digest() for _, data in read_queue(client, queue)[1:]]
    assert digests == [hashlib.sha256(p.read_bytes()).digest() for p in paths]


# --- errors -----------------------------------------------------------------------------
def test_a_bad_item_fails_its_request_whole_and_the_rest_can_be_resumed(
    client: ZosciiClient,
) -> None:
    queue = queue_name()
    client.publish_many(queue, [b"before"])
    positioned = io.BytesIO(b"xx-file-data")
    positioned.seek(3)
    messages = [
        b"a",
        b"b",
        b"c",
        positioned,
        BatchItem(b"bad", nonce="bad nonce"),
        iter([b"from ", b"a stream"]),
        b"g",
    ]
    with pytest.raises(InvalidInput) as error:
        client.publish_many(queue, messages, batch_size=3)
    assert error.value.status == 400
    published, remaining = error.value.published, error.value.remaining
    assert [r.duplicate for r in published] == [False, False, False]
    assert [item.nonce for item in remaining][1] == "bad nonce"
    assert len(remaining) == 4
    # nothing of the failed request (file, bad, stream) was written
    assert [data for _, data in read_queue(client, queue)] == [b"before", b"a", b"b", b"c"]
    fixed = [
        dataclasses.replace(item, nonce=None) if item.nonce == "bad nonce" else item
        for item in remaining
    ]
    rest = client.publish_many(queue, fixed, batch_size=3)
    assert [r.duplicate for r in rest] == [False] * 4
    assert [data for _, data in read_queue(client, queue)] == [
        b"before",
        b"a",
        b"b",
        b"c",
        b"file-data",
        b"bad",
        b"from a stream",
        b"g",
    ]


def test_a_batch_over_the_servers_limits_is_refused_whole(small_api: str) -> None:
    queue = queue_name()
    with ZosciiClient(small_api) as client:
        payloads = [bytes([n]) * 2000 for n in range(4)]
        with pytest.raises(TooLarge) as error:
            client.publish_many(queue, payloads)  # the probe, then 6000 bytes > 4096
        assert error.value.status == 413
        assert len(error.value.published) == 1 and len(error.value.remaining) == 3
        assert [d for _, d in read_queue(client, queue)] == payloads[:1]
        client.publish_many(queue, error.value.remaining, batch_bytes=4096)
        assert [d for _, d in read_queue(client, queue)] == payloads
        with pytest.raises(InvalidInput):
            client.publish_many(queue, [b"x"] * 6, batch_size=6)  # over 5 messages
        assert len(read_queue(client, queue)) == 4


def test_a_full_queue_is_queue_full_a_kind_of_storage_full(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """507 under the queue policy (``when_full = "refuse"``): QueueFull, not the volume."""
    policy = tmp_path_factory.mktemp("policy") / "policy.toml"
    policy.write_text('[queues."capped_*"]\nmax_messages = 2\n')
    data = tmp_path_factory.mktemp("capped-api")
    with running_api(data, env={"ZOSCII_POLICY_FILE": str(policy)}) as url:
        with ZosciiClient(url) as client:
            client.publish_many("capped_a", [b"1", b"2"])
            with pytest.raises(QueueFull) as single:
                client.publish("capped_a", b"3")
            with pytest.raises(QueueFull) as batch:
                client.publish_many("capped_b", [b"x", b"y", b"z"])  # one batch: 3 > 2
            client.publish("other", b"fine")  # only those queues are full
            assert read_queue(client, "capped_b") == []  # all or nothing
            assert len(batch.value.remaining) == 3
    for error in (single.value, batch.value):
        assert isinstance(error, StorageFull)
        assert (error.status, error.reason) == (507, "queue_full")


def test_bad_arguments_are_refused_before_anything_is_sent(client: ZosciiClient) -> None:
    sent = request_log(client)
    with pytest.raises(ValueError):
        client.publish_many(queue_name(), [b"x"], batch_size=0)
    with pytest.raises(ValueError, match="nonce"):
        client.publish_many(queue_name(), [BatchItem(b"x", nonce="a\r\nX-Evil: 1")])
    with pytest.raises(TypeError):
        client.publish_many(queue_name(), [BatchItem(b"x", retention_days="7")])  # type: ignore[arg-type]
    assert sent == []
    assert client.publish_many(queue_name(), []) == []


# --- servers without batches ------------------------------------------------------------
def test_against_the_original_one_probe_then_single_publishes_and_nothing_lost(
    forms_original: FormsOriginal,
) -> None:
    queue = queue_name()
    items = [
        BatchItem(b"\x00first\xff", retention_days=4),
        b"second",
        BatchItem(b"third", retention_days=9),
        BatchItem(b"fourth", nonce="own-nonce"),
        b"fifth",
    ]
    with ZosciiClient(forms_original.url) as client:
        results = client.publish_many(queue, items, retention_days=2, batch_size=3)
        assert client.capabilities.batch_publish is False
        more = client.publish_many(queue, [b"sixth", b"seventh"])
        repeat = client.publish_many(queue, [BatchItem(b"not again", nonce="own-nonce")])
    assert forms_original.parts == [1, 0, 0, 0, 0, 0, 0, 0]
    assert forms_original.queries[0].get(b"batch") == b"1"
    assert all(b"batch" not in query for query in forms_original.queries[1:])
    assert all(
        content_type.startswith("application/x-www-form-urlencoded") and b"n" in params
        for _, content_type, params in forms_original.requests[1:]
    )
    got = forms_original.stored(queue)
    assert [data for _, data in got] == [
        b"\x00first\xff",
        b"second",
        b"third",
        b"fourth",
        b"fifth",
        b"sixth",
        b"seventh",
    ]
    assert [days(name) for name, _ in got] == [4, 2, 9, 2, 2, 0, 0]
    # the probe carried its nonce as n=, which the original reads too; no names from it
    assert forms_original.queries[0].get(b"n") == results[0].nonce.encode()
    assert all(r.nonce and r.name is None and r.duplicate is None for r in results + more)
    assert results[3].nonce == "own-nonce" and repeat[0].nonce == "own-nonce"


def test_a_server_known_not_to_batch_fetch_gets_no_batch_publish(
    forms_original: FormsOriginal,
) -> None:
    forms_original.add("known", b"x")
    with ZosciiClient(forms_original.url) as client:
        assert len(client.fetch_batch("known")) == 1
        assert client.capabilities.batch_fetch is False
        client.publish_many("known", [b"a", b"b"])
    assert forms_original.parts == [0, 0]  # (the fetch was a GET, not counted)
    assert [d for _, d in forms_original.stored("known")] == [b"x", b"a", b"b"]


def test_a_batch_answered_as_a_single_publish_is_an_error_not_a_silent_loss(
    forms_original: FormsOriginal,
) -> None:
    """A client that believes in batches (the server behind the URL was replaced)."""
    with ZosciiClient(forms_original.url) as client:
        client.capabilities.batch_publish = True
        with pytest.raises(NotZosciiReply) as error:
            client.publish_many("swapped", [b"a", b"b", b"c"])
        assert client.capabilities.batch_publish is False
        assert [item.data for item in error.value.remaining] == [b"a", b"b", b"c"]
        assert error.value.published == []


def test_original_mode_never_sends_a_batch(api: tuple[str, Path], original: ZosciiClient) -> None:
    queue = queue_name()
    sent = request_log(original)
    items = [b"\x00\xff one", BatchItem(b"two", retention_days=5), b"three"]
    results = original.publish_many(queue, items, retention_days=1)
    assert [shape(r) for r in sent] == [("single", 1)] * 3
    assert all(r.body and "batch" not in str(r.body) and r.method == "POST" for r in sent)
    assert original.capabilities.batch_publish is None
    with ZosciiClient(api[0]) as reader:
        got = read_queue(reader, queue)
    assert [(days(n), d) for n, d in got] == [(1, b"\x00\xff one"), (5, b"two"), (1, b"three")]
    assert all(r.name is None and r.nonce for r in results)


def test_a_server_that_does_not_announce_frames_gets_multipart_batches(
    client: ZosciiClient,
) -> None:
    """A server of an earlier version reads multipart batches only: without its
    Accept-Post naming the framed body, the client never sends one."""
    queue = queue_name()
    sent = request_log(client)

    def earlier_version(response: requests.Response, **_: object) -> None:
        response.headers.pop("Accept-Post", None)

    client.session.hooks["response"].insert(0, earlier_version)
    messages = [os.urandom(50) for _ in range(12)]
    client.publish_many(queue, messages, batch_size=5)
    assert [type(r.body) for r in sent] == [MultipartBody] * 4
    assert client.capabilities.framed_publish is None
    assert [data for _, data in read_queue(client, queue)] == messages


class EarlierApiBehindTheSameAddress(requests.adapters.HTTPAdapter):
    """Mid rolling upgrade: the next framed batch reaches an api of the version before
    frames, which refuses it as that version does (400, its own message, before
    writing anything); everything else reaches the real, current api."""

    def __init__(self) -> None:
        super().__init__()
        self.refused = 0

    def send(self, request: requests.PreparedRequest, **kwargs: object) -> requests.Response:
        if request.headers.get("Content-Type") != "application/vnd.zoscii.batch":
            return super().send(request, **kwargs)  # type: ignore[arg-type]
        self.refused += 1
        document = {
            "system": "ZOSCII MQ",
            "version": "1.0",
            "error": "A batch is a multipart/form-data body of 'msg' parts.",
            "message": "",
            "result": [],
        }
        response = requests.Response()
        response.status_code, response.request, response.url = 400, request, request.url or ""
        response.headers["Content-Type"] = "application/json"
        response.raw = io.BytesIO(json.dumps(document).encode())
        return response


def test_a_framed_batch_refused_by_an_earlier_api_goes_again_as_multipart(
    client: ZosciiClient,
) -> None:
    queue = queue_name()
    client.publish_many(queue, [b"probe"])  # learns that the api reads frames
    assert client.capabilities.framed_publish is True
    earlier = EarlierApiBehindTheSameAddress()
    client.session.mount(client.url, earlier)
    sent = request_log(client)
    messages = [os.urandom(40) for _ in range(9)]
    results = client.publish_many(queue, messages, batch_size=3)
    assert earlier.refused == 1 and client.capabilities.framed_publish is False
    assert [type(r.body) for r in sent] == [FramedBody] + [MultipartBody] * 3
    got = read_queue(client, queue)
    assert [data for _, data in got] == [b"probe", *messages]  # each once, in order
    assert [r.name for r in results] == [name for name, _ in got[1:]]


# --- the body itself --------------------------------------------------------------------
def test_multipart_body_reads_seeks_and_counts_like_a_file(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(os.urandom(300_000))
    payloads = [Payload.from_source(b"abc"), Payload.from_source(path), Payload.from_source(b"")]
    reported: list[int] = []
    body = MultipartBody(
        [(p, {"nonce": f"n{i}", "retention": "3"}) for i, p in enumerate(payloads)],
        on_read=reported.append,
    )
    whole = body.read()
    assert len(whole) == len(body) and body.tell() == len(body)
    assert whole.count(body.boundary.encode()) == 4
    assert path.read_bytes() in whole
    assert b"X-ZOSCII-Nonce: n1\r\nX-ZOSCII-Retention: 3\r\n" in whole
    assert reported[-1] == 3 + 300_000
    body.seek(0)
    pieces = []
    while block := body.read(7919):
        pieces.append(block)
    assert b"".join(pieces) == whole
    body.seek(100)
    body.seek(0)
    assert b"".join(body) == whole
    payloads[1].close()


def test_framed_body_frames_each_message_with_its_length_and_options(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(os.urandom(100_000))
    payloads = [Payload.from_source(b"a\nb"), Payload.from_source(path), Payload.from_source(b"")]
    options = [{"nonce": "n 0", "retention": "3"}, {}, {"nonce": "n2"}]
    body = FramedBody(list(zip(payloads, options, strict=True)))
    whole = body.read()
    assert whole == (
        b"3 n=n+0&r=3\na\nb" + b"100000\n" + path.read_bytes() + b"0 n=n2\n" + b"end\n"
    )
    assert len(body) == len(whole) and body.content_type == "application/vnd.zoscii.batch"
    body.seek(5)
    assert body.read() == whole[5:]
    payloads[1].close()


def test_multipart_body_refuses_a_file_that_shrank(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 1000)
    payload = Payload.from_source(path)
    body = MultipartBody([(payload, {})])
    path.write_bytes(b"x" * 10)
    with pytest.raises(OSError, match="shrank"):
        body.read()
    payload.close()
