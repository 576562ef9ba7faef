"""Batch publish over HTTP: ``batch=1`` and one ``msg`` part per message (PROTOCOL.md 3)."""

from __future__ import annotations

import os
import uuid

import pytest

from tests.support.api_app import body, drain, make_client
from zosciimq.protocol import FRAME_END, FRAMED_BATCH

BINARY = bytes(range(256)) * 3 + b"\r\n--not-a-boundary\r\n"


def multipart(parts: list[tuple[bytes, dict[str, str]]], fields=()) -> tuple[bytes, str]:
    """A multipart body: form fields first, then one ``msg`` file part per message."""
    boundary = f"b-{uuid.uuid4().hex}"
    out = b""
    for name, value in fields:
        out += (
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
        ).encode()
    for number, (data, headers) in enumerate(parts):
        head = (
            f"--{boundary}\r\n"
            f'Content-Disposition: form-data; name="msg"; filename="m{number}"\r\n'
            "Content-Type: application/octet-stream\r\n"
        )
        head += "".join(f"{key}: {value}\r\n" for key, value in headers.items())
        out += head.encode() + b"\r\n" + data + b"\r\n"
    return out + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def post_batch(client, queue: str, parts, *, query: str = "batch=1", fields=()):
    data, content_type = multipart(parts, fields)
    return client.post(f"/?action=publish&q={queue}&{query}", data=data, content_type=content_type)


def test_a_batch_publishes_every_part_in_order_byte_exact(client) -> None:
    messages = [BINARY, b"", b"second", os.urandom(5000)]
    reply = post_batch(client, "orders", [(m, {}) for m in messages])
    document = body(reply)
    assert reply.status_code == 200 and document["error"] == ""
    names = document["result"]
    assert len(names) == 4 and names == sorted(names)
    assert drain(client, "orders") == list(zip(names, messages, strict=True))


def test_batch_may_be_a_form_field_before_the_messages(client) -> None:
    data, content_type = multipart([(b"a", {}), (b"b", {})], [("batch", "1"), ("q", "orders")])
    reply = client.post("/?action=publish", data=data, content_type=content_type)
    assert len(body(reply)["result"]) == 2
    assert [m for _, m in drain(client, "orders")] == [b"a", b"b"]


def test_each_part_has_its_own_nonce_and_retention(client) -> None:
    parts = [
        (b"a", {"X-ZOSCII-Nonce": "order-1", "X-ZOSCII-Retention": "7"}),
        (b"b", {}),
        (b"c", {"X-ZOSCII-Nonce": "order-3"}),
    ]
    first = body(post_batch(client, "orders", parts, query="batch=1&r=30"))["result"]
    assert [name[19:23] for name in first] == ["0007", "0030", "0030"]
    again = body(post_batch(client, "orders", parts))
    assert again["result"][0] is None and again["result"][2] is None  # nonces already used
    assert again["result"][1] is not None  # no nonce: a new message
    assert [m for _, m in drain(client, "orders")] == [b"a", b"b", b"c", b"b"]


def test_part_header_names_are_case_insensitive_and_the_first_one_counts(client) -> None:
    parts = [
        (b"a", {"x-zoscii-nonce": "lower-1", "x-Zoscii-RETENTION": "9"}),
        (b"b", {"X-ZOSCII-Retention": "11", "X-Other": "ignored"}),
    ]
    data, content_type = multipart(parts)
    # a second Retention header in the first part: the first one is the part's
    data = data.replace(
        b"x-Zoscii-RETENTION: 9\r\n", b"x-Zoscii-RETENTION: 9\r\nX-ZOSCII-Retention: 5\r\n"
    )
    reply = client.post("/?action=publish&q=cases&batch=1", data=data, content_type=content_type)
    names = body(reply)["result"]
    assert [name[19:23] for name in names] == ["0009", "0011"]
    again = body(post_batch(client, "cases", [(b"a", {"X-ZOSCII-NONCE": "lower-1"})]))
    assert again["result"] == [None]  # the nonce was the first part's


@pytest.mark.parametrize(
    ("parts", "query", "status"),
    [
        ([(b"a", {}), (b"b", {"X-ZOSCII-Nonce": "no spaces allowed"})], "batch=1", 400),
        ([(b"a", {}), (b"b", {"X-ZOSCII-Retention": "10000"})], "batch=1", 400),
        ([(b"a", {}), (b"b", {})], "batch=1&n=one-for-all", 400),  # n: a batch of one only
        ([], "batch=1", 400),
        ([(b"x" * 600, {}), (b"y", {})], "batch=1", 413),  # one part over max_message_bytes
        ([(b"x" * 400, {})] * 4, "batch=1", 413),  # together over max_batch_bytes
        ([(b"m", {})] * 6, "batch=1", 400),  # more parts than max_batch_count
    ],
)
def test_a_bad_batch_is_an_error_and_writes_nothing(data_dir, parts, query, status) -> None:
    client = make_client(data_dir, max_message_bytes=500, max_batch_bytes=1000, max_batch_count=5)
    reply = post_batch(client, "orders", parts, query=query)
    assert reply.status_code == status and body(reply)["error"]
    assert not (data_dir / "queues" / "orders").exists() or not os.listdir(
        data_dir / "queues" / "orders"
    )
    assert os.listdir(data_dir / "queues" / "temp") == []


def test_n_is_the_nonce_of_a_batch_of_one(client) -> None:
    """A client probing a server with one message sends ``n``, which the original
    honours too, so a lost reply to the probe cannot store it twice anywhere."""
    first = body(post_batch(client, "orders", [(b"probe", {})], query="batch=1&n=probe-1"))
    assert first["result"][0] is not None
    again = body(post_batch(client, "orders", [(b"probe", {})], query="batch=1&n=probe-1"))
    assert again["result"] == [None]
    assert [m for _, m in drain(client, "orders")] == [b"probe"]


def test_a_batch_over_its_byte_limit_is_refused_while_it_arrives(data_dir, written) -> None:
    """Not after spooling it all: the upload stops at the limit."""
    client = make_client(data_dir, max_batch_bytes=1000, max_message_bytes=10**9)
    reply = post_batch(client, "orders", [(b"x" * 900, {}), (b"y" * 10**6, {})])
    assert reply.status_code == 413
    assert written.total <= 1000, "the oversized batch was written to disk before the refusal"
    assert written.total >= 900  # the first part was: the count is of real writes
    assert os.listdir(data_dir / "queues" / "temp") == []


def test_a_batch_needs_a_form_body(client, data_dir) -> None:
    raw = client.post(
        "/?action=publish&q=orders&batch=1", data=b"raw", content_type="application/octet-stream"
    )
    assert raw.status_code == 400
    in_url = client.get("/?action=publish&q=orders&batch=1&msg=x")
    assert in_url.status_code == 400
    assert not (data_dir / "queues" / "orders").exists()
    assert os.listdir(data_dir / "queues" / "temp") == []


def test_urlencoded_repeated_msg_is_a_batch_too(client) -> None:
    reply = client.post(
        "/?action=publish&q=orders",
        data="batch=1&msg=one&msg=%00%FF",
        content_type="application/x-www-form-urlencoded",
    )
    assert len(body(reply)["result"]) == 2
    assert [m for _, m in drain(client, "orders")] == [b"one", b"\x00\xff"]


def test_without_batch_a_repeated_msg_is_one_message_as_in_the_original(client) -> None:
    """PHP keeps the last of repeated fields: the original's clients see no change."""
    data, content_type = multipart([(b"first", {}), (b"last", {})])
    reply = client.post("/?action=publish&q=orders", data=data, content_type=content_type)
    assert body(reply)["message"] == "Message published." and body(reply)["result"] == []
    assert [m for _, m in drain(client, "orders")] == [b"last"]


# --- the framed body (application/vnd.zoscii.batch) ------------------------------------



def framed(parts: list[tuple[bytes, str]]) -> bytes:
    """``<length>[ <options>]\\n<bytes>`` per message, then ``end\\n``."""
    out = b""
    for data, options in parts:
        out += f"{len(data)}{' ' + options if options else ''}\n".encode() + data
    return out + FRAME_END


def post_framed(client, queue: str, data: bytes, query: str = ""):
    return client.post(f"/?action=publish&q={queue}&{query}", data=data, content_type=FRAMED_BATCH)


def test_a_framed_batch_publishes_every_message_in_order_byte_exact(client) -> None:
    messages = [BINARY, b"", b"end\n", b"3 n=x\n", os.urandom(70_000)]
    reply = post_framed(client, "orders", framed([(m, "") for m in messages]))
    document = body(reply)
    assert reply.status_code == 200 and document["error"] == ""
    names = document["result"]
    assert len(names) == 5 and names == sorted(names)
    assert drain(client, "orders") == list(zip(names, messages, strict=True))


def test_a_batch_reply_announces_the_framed_body(client) -> None:
    """How a client learns it may send frames: an earlier api reads multipart only."""
    reply = post_batch(client, "orders", [(b"a", {})])
    assert reply.headers["Accept-Post"] == f"multipart/form-data, {FRAMED_BATCH}"
    single = client.post("/?action=publish&q=orders", data={"msg": "b"})
    assert "Accept-Post" not in single.headers


def test_framed_options_are_each_messages_nonce_retention_and_ttl(client) -> None:
    parts = [(b"a", "n=order-1&r=7"), (b"b", ""), (b"c", "n=order%2D3&ttl=3600")]
    first = body(post_framed(client, "orders", framed(parts), "r=30"))["result"]
    assert [name[19:23] for name in first] == ["0007", "0030", "0030"]
    again = body(post_framed(client, "orders", framed(parts)))["result"]
    assert again[0] is None and again[2] is None and again[1] is not None  # nonces used
    assert [m for _, m in drain(client, "orders")] == [b"a", b"b", b"c", b"b"]
    consumed = client.get("/?action=consume&q=orders&group=g&count=10")
    assert consumed.status_code == 200  # the third message, and only it, carries a ttl
    with_ttl = [part for part in consumed.data.split(b"\r\n--") if b"X-ZOSCII-TTL" in part]
    assert len(with_ttl) == 1 and with_ttl[0].endswith(b"\r\n\r\nc")


@pytest.mark.parametrize(
    ("data", "query", "status", "why"),
    [
        (framed([(b"a", ""), (b"b", "n=no%20spaces")]), "", 400, "nonce"),
        (framed([(b"a", ""), (b"b", "r=10000")]), "", 400, "retention"),
        (framed([(b"a", ""), (b"b", "colour=red")]), "", 400, "unknown frame option"),
        (framed([(b"a", ""), (b"b", "")]), "n=one-for-all", 400, "one nonce per message"),
        (framed([(b"a", "")])[:-4], "", 400, "ends before its 'end' line"),
        (framed([(b"abc", "")]).replace(b"3\n", b"9\n"), "", 400, "ends inside a message"),
        (framed([(b"a", "")]) + b"x", "", 400, "after its 'end' line"),
        (b"end\n", "", 400, "at least one"),
        (framed([(b"x" * 600, ""), (b"y", "")]), "", 413, "maximum"),
        (framed([(b"x" * 400, "")] * 4), "", 413, "Batch larger"),
        (framed([(b"m", "")] * 6), "", 400, "at most 5 messages"),
        (framed([(b"m", "")]), "msg=also", 400, "not in 'msg'"),
    ],
)
def test_a_bad_framed_batch_is_an_error_and_writes_nothing(
    data_dir, data: bytes, query: str, status: int, why: str
) -> None:
    client = make_client(data_dir, max_message_bytes=500, max_batch_bytes=1000, max_batch_count=5)
    reply = post_framed(client, "orders", data, query)
    assert reply.status_code == status and why in body(reply)["error"]
    assert not (data_dir / "queues" / "orders").exists() or not os.listdir(
        data_dir / "queues" / "orders"
    )
    assert os.listdir(data_dir / "queues" / "temp") == []


def test_a_framed_body_is_for_publish_only(client, data_dir) -> None:
    reply = client.post("/?action=store", data=framed([(b"a", "")]), content_type=FRAMED_BATCH)
    assert reply.status_code == 400 and "action=publish" in body(reply)["error"]
    assert os.listdir(data_dir / "queues" / "temp") == []
