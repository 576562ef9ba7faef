"""Every client call against a real api on loopback, in both modes, byte-exact."""

from __future__ import annotations

import io
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.api_server import running_api
from tests.support.queues import queue_name, read_queue
from zosciimq.client import (
    Forbidden,
    InvalidInput,
    MessageNotFound,
    QueueNotFound,
    RangeNotSatisfiable,
    TooLarge,
    ZosciiClient,
)
from zosciimq.core import parse_name

ALL_BYTES = bytes(range(256))
PAYLOADS = [
    b"",
    b"plain text",
    ALL_BYTES,
    b"\xff\xfe\x00\x80 not utf-8 \xc3\x28",
    "grüße, 東京 & a=b+c%20".encode(),
    b" leading and trailing spaces + plus ",
    b"x" * 70_000,
]


@pytest.mark.parametrize("mode", ["default", "original"])
def test_publish_and_fetch_are_byte_exact_in_order(api: tuple[str, Path], mode: str) -> None:
    queue = queue_name()
    with ZosciiClient(api[0], mode=mode) as client:
        for payload in PAYLOADS:
            client.publish(queue, payload, retention_days=7)
        got = read_queue(client, queue)
    assert [data for _, data in got] == PAYLOADS
    names = [name for name, _ in got]
    assert names == sorted(names)
    assert all(parse_name(name).retention_days == 7 for name in names)


def test_publish_accepts_str_files_and_streams(client: ZosciiClient, tmp_path: Path) -> None:
    queue = queue_name()
    big = os.urandom(3 * (1 << 20))  # over the stream threshold: a raw-body POST from disk
    path = tmp_path / "big.bin"
    path.write_bytes(big)
    client.publish(queue, "text é")
    with open(path, "rb") as file:
        client.publish(queue, file)
    client.publish(queue, io.BytesIO(b"0123456789"))
    client.publish(queue, iter([b"chunk-1 ", b"\x00\xff", b" chunk-3"]))  # spooled
    with open(path, "rb") as file:
        file.seek(1000)  # from the current position on
        client.publish(queue, file)
    data = [d for _, d in read_queue(client, queue)]
    assert data == ["text é".encode(), big, b"0123456789", b"chunk-1 \x00\xff chunk-3", big[1000:]]


def test_large_message_in_original_mode_goes_as_a_form(original: ZosciiClient) -> None:
    queue = queue_name()
    payload = os.urandom(2 * (1 << 20))
    original.publish(queue, payload)
    assert original.fetch(queue).data == payload


def test_nothing_new_and_empty_queue_are_none(client: ZosciiClient, original: ZosciiClient) -> None:
    queue = queue_name()
    client.publish(queue, b"only")
    first = client.fetch(queue)
    assert first is not None
    assert client.fetch(queue, first.name) is None
    assert original.fetch(queue, first.name) is None


def test_fetch_after_a_deleted_pointer_finds_the_next(
    client: ZosciiClient, api: tuple[str, Path]
) -> None:
    queue = queue_name()
    for payload in (b"a", b"b", b"c"):
        client.publish(queue, payload)
    a, b, c = (name for name, _ in read_queue(client, queue))
    (api[1] / "queues" / queue / b).unlink()
    assert client.fetch(queue, a).name == c


def test_explicit_nonce_stores_once(client: ZosciiClient) -> None:
    queue = queue_name()
    first = client.publish(queue, b"once", nonce="fixed-" + uuid.uuid4().hex)
    again = client.publish(queue, b"once", nonce=first.nonce)
    assert again.nonce == first.nonce
    assert [d for _, d in read_queue(client, queue)] == [b"once"]
    # a fresh nonce each call when none is given
    assert client.publish(queue, b"x").nonce != client.publish(queue, b"x").nonce


@pytest.mark.parametrize("mode", ["default", "original"])
def test_partial_fetch_with_offset_and_length(api: tuple[str, Path], mode: str) -> None:
    queue = queue_name()
    payload = os.urandom(10_000)
    with ZosciiClient(api[0], mode=mode) as client:
        client.publish(queue, payload)
        part = client.fetch(queue, offset=1000, length=500)
        assert part.data == payload[1000:1500]
        assert (part.offset, part.total_length) == (1000, 10_000)
        tail = client.fetch(queue, offset=9000)
        assert tail.data == payload[9000:]
        with pytest.raises(RangeNotSatisfiable):
            client.fetch(queue, offset=10_000)


@pytest.mark.parametrize("mode", ["default", "original"])
def test_store_retrieve_scan_identify(api: tuple[str, Path], mode: str) -> None:
    with ZosciiClient(api[0], mode=mode) as client:
        stored = client.store(ALL_BYTES, retention_days=30)
        name = stored.name
        assert name is not None and parse_name(name).retention_days == 30
        assert not name.endswith("-u.bin")
        assert client.retrieve(name).data == ALL_BYTES
        assert client.retrieve(name, offset=250).data == ALL_BYTES[250:]

        hidden = client.store(b"\x00unidentified", unidentified=True).name
        assert hidden is not None and hidden.endswith("-u.bin")
        assert hidden in client.scan()
        absent = [f"202501010000000000-0001-{uuid.uuid4()}-u.bin" for _ in range(500)]
        # 500 names do not fit in a URL: identify goes as a form in every mode
        renamed = client.identify([*absent, hidden, hidden.replace("-u.bin", ".bin")])
        assert renamed == [hidden.replace("-u.bin", ".bin")]
        assert hidden not in client.scan()
        assert client.retrieve(renamed[0]).data == b"\x00unidentified"

        again = client.store(b"dup", nonce=stored.nonce)  # a used nonce: nothing stored
        assert again.name is None


def test_a_stored_message_that_looks_like_an_envelope_is_still_data(client: ZosciiClient) -> None:
    """Binary or JSON is decided by Content-Disposition, never by the body."""
    fake = json.dumps(
        {"system": "ZOSCII MQ", "version": "1.0", "error": "Queue 'x' not found.", "result": []}
    ).encode()
    queue = queue_name()
    client.publish(queue, fake)
    assert client.fetch(queue).data == fake
    name = client.store(fake).name
    assert client.retrieve(name).data == fake


def test_welcome(client: ZosciiClient) -> None:
    assert "ZOSCII MQ" in client.welcome()


@pytest.mark.parametrize("mode", ["default", "original"])
def test_typed_errors(api: tuple[str, Path], mode: str) -> None:
    with ZosciiClient(api[0], mode=mode) as client:
        with pytest.raises(QueueNotFound) as not_found:
            client.fetch("no_such_queue_" + uuid.uuid4().hex[:8])
        assert not_found.value.status == 404
        assert not_found.value.envelope["system"] == "ZOSCII MQ"
        with pytest.raises(InvalidInput):
            client.publish("bad queue name!", b"x")
        with pytest.raises(InvalidInput):
            client.fetch("q", "not-a-pointer")
        with pytest.raises(InvalidInput):
            client.retrieve("x202511021826110000-0030-9cc1980a-1719-440a-9650-6991c9cba11d.bin")
        with pytest.raises(MessageNotFound):
            client.retrieve("202511021826110000-0030-9cc1980a-1719-440a-9650-6991c9cba11d.bin")


@pytest.fixture(scope="module")
def restricted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    env = {
        "ZOSCII_ACTIONS": "publish,fetch,store,retrieve",
        "ZOSCII_BLOCKED_QUEUES": "blocked",
        "ZOSCII_MAX_MESSAGE_BYTES": "1000",
    }
    with running_api(tmp_path_factory.mktemp("restricted"), workers=1, env=env) as url:
        yield url


@pytest.mark.parametrize("mode", ["default", "original"])
def test_typed_errors_of_a_restricted_server(restricted: str, mode: str) -> None:
    with ZosciiClient(restricted, mode=mode) as client:
        with pytest.raises(Forbidden):
            client.scan()
        with pytest.raises(Forbidden):
            client.publish("blocked", b"x")
        with pytest.raises(TooLarge):
            client.publish("open", b"x" * 1001)
        client.publish("open", b"x" * 1000)


def test_too_large_streamed_body_is_refused_with_a_typed_error(restricted: str) -> None:
    with ZosciiClient(restricted, stream_threshold=100) as client:
        with pytest.raises(TooLarge):
            client.publish("open", os.urandom(5 << 20))
