"""The HTTP contract of PROTOCOL.md section 3, through the Flask test client."""

import io
import json
import os
from pathlib import Path
from urllib.parse import quote_from_bytes, urlencode

import pytest

from tests.support.api_app import body, drain, fetch, filename, make_client
from zosciimq.core import parse_name

ALL_BYTES = bytes(range(256)) + b"\x00\xff" * 10 + "é€".encode()


# --- every way of sending a message is byte-exact --------------------------------------


def test_get_with_percent_encoded_binary(client) -> None:
    reply = client.get("/?action=publish&q=orders&msg=" + quote_from_bytes(ALL_BYTES))
    assert body(reply)["message"] == "Message published." and reply.status_code == 200
    assert drain(client, "orders")[0][1] == ALL_BYTES


def test_urlencoded_post_as_php_http_build_query_sends_it(client) -> None:
    form = urlencode({"action": "publish", "q": "orders", "msg": ALL_BYTES + b" + x"})
    assert "+" in form  # spaces as '+', the way PHP's urlencode writes them
    reply = client.post("/index.php", data=form, content_type="application/x-www-form-urlencoded")
    assert body(reply)["error"] == ""
    assert drain(client, "orders")[0][1] == ALL_BYTES + b" + x"


@pytest.mark.parametrize("as_file", [False, True])
def test_multipart_field_or_file(client, as_file: bool) -> None:
    msg = (io.BytesIO(ALL_BYTES), "m.bin") if as_file else ALL_BYTES.decode("latin-1")
    reply = client.post("/", data={"action": "publish", "q": "orders", "msg": msg})
    assert body(reply)["error"] == ""
    expected = ALL_BYTES if as_file else ALL_BYTES.decode("latin-1").encode("utf-8")
    assert drain(client, "orders")[0][1] == expected


def test_raw_body_post(client) -> None:
    reply = client.post(
        "/?action=publish&q=orders", data=ALL_BYTES, content_type="application/octet-stream"
    )
    assert body(reply)["error"] == ""
    assert drain(client, "orders")[0][1] == ALL_BYTES


def test_raw_json_body_is_a_message_not_parameters(client) -> None:
    payload = b'{"system":"ZOSCII MQ","error":"looks like an envelope"}'
    client.post("/?action=publish&q=orders", data=payload, content_type="application/json")
    reply = fetch(client, "orders")
    assert reply.mimetype == "application/octet-stream" and reply.data == payload


def test_empty_message_is_a_message(client) -> None:
    assert body(client.get("/?action=publish&q=orders&msg="))["error"] == ""
    assert drain(client, "orders")[0][1] == b""


def _multipart_body(message: bytes) -> tuple[bytes, str]:
    head = b'--xyz\r\nContent-Disposition: form-data; name="msg"; filename="m"\r\n\r\n'
    return head + message + b"\r\n--xyz--\r\n", "multipart/form-data; boundary=xyz"


BIG = ALL_BYTES * 1500  # about 400 KB, over 1 MiB once urlencoded


@pytest.mark.parametrize("path", ["/", "/index.php"])
@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize("way", ["urlencoded", "multipart", "raw"])
def test_a_large_message_is_byte_exact_by_every_way(client, way, chunked, path) -> None:
    """The streaming paths: an urlencoded body over WHOLE_FORM_BYTES (the original
    replicator's POST of a large binary message), and bodies without a Content-Length
    (chunked; gunicorn marks their end with ``wsgi.input_terminated``)."""
    url = path + ("?action=publish&q=orders" if way == "raw" else "")
    if way == "urlencoded":
        data = urlencode({"action": "publish", "q": "orders", "msg": BIG}).encode()
        content_type = "application/x-www-form-urlencoded"
        assert len(data) > 1 << 20  # zoscii_api.params.WHOLE_FORM_BYTES: the stream decoder
    elif way == "multipart":
        data, content_type = _multipart_body(BIG)
        url += "?action=publish&q=orders"
    else:
        data, content_type = BIG, "application/octet-stream"
    if chunked:
        reply = client.post(
            url,
            input_stream=io.BytesIO(data),
            content_type=content_type,
            environ_overrides={
                "CONTENT_LENGTH": "",  # as gunicorn has it: no length, the stream ends
                "HTTP_TRANSFER_ENCODING": "chunked",
                "wsgi.input_terminated": True,
            },
        )
        assert reply.request.content_length is None
    else:
        reply = client.post(url, data=data, content_type=content_type)
    assert body(reply)["message"] == "Message published.", reply.get_json()
    assert [m for _, m in drain(client, "orders")] == [BIG]


def test_form_values_override_the_query(client) -> None:
    client.post("/?action=publish&q=wrong", data={"q": "right", "msg": "x"})
    assert drain(client, "right")[0][1] == b"x"


# --- the replies ---------------------------------------------------------------------


def test_welcome_text_without_action(client) -> None:
    reply = client.get("/")
    assert reply.status_code == 200 and reply.mimetype == "text/plain"
    assert b"ZOSCII MQ" in reply.data


def test_fetch_replies(client) -> None:
    assert fetch(client, "nowhere").status_code == 404
    client.get("/?action=publish&q=orders&msg=a&r=7")
    first = fetch(client, "orders")
    name = filename(first)
    assert parse_name(name).retention_days == 7
    assert first.headers["Content-Type"] == "application/octet-stream"
    caught_up = fetch(client, "orders", name)
    assert caught_up.status_code == 200 and body(caught_up)["error"] == ""
    assert body(caught_up)["message"] == "No new messages."


def test_empty_queue(client, data_dir) -> None:
    (data_dir / "queues" / "quiet").mkdir(parents=True)
    reply = fetch(client, "quiet")
    assert reply.status_code == 200 and body(reply)["message"] == "Queue is empty."


def test_default_retention_is_configurable(data_dir) -> None:
    client = make_client(data_dir)
    client.get("/?action=publish&q=a&msg=x")
    assert parse_name(drain(client, "a")[0][0]).retention_days == 0
    client = make_client(data_dir.parent / "other", default_retention_days=14)
    client.get("/?action=publish&q=a&msg=x")
    assert parse_name(drain(client, "a")[0][0]).retention_days == 14


def test_nonce_makes_retries_idempotent(client) -> None:
    for expected in ("Message published.", "Nonce already used.", "Nonce already used."):
        reply = client.get("/?action=publish&q=orders&msg=x&n=a1b2c3d4-e5f6-4000-8000-0123")
        assert body(reply)["message"] == expected and body(reply)["error"] == ""
    assert len(drain(client, "orders")) == 1


def test_partial_fetch_with_offset_and_length(client) -> None:
    client.post("/?action=publish&q=big", data=ALL_BYTES, content_type="application/octet-stream")
    total = len(ALL_BYTES)
    part = fetch(client, "big", offset="10", length="20")
    assert part.status_code == 200 and part.data == ALL_BYTES[10:30]
    assert part.headers["X-ZOSCII-Offset"] == "10"
    assert part.headers["X-ZOSCII-Total-Length"] == str(total)
    assert part.headers["Content-Length"] == "20"
    assert fetch(client, "big", offset="10", length="0").data == ALL_BYTES[10:]
    assert fetch(client, "big", offset="10", length=str(10**9)).data == ALL_BYTES[10:]
    assert fetch(client, "big", length="5").data == ALL_BYTES[:5]
    past = fetch(client, "big", offset=str(total))
    assert past.status_code == 416 and body(past)["error"]
    assert past.headers["Content-Range"] == f"bytes */{total}"  # what there is to ask for


def test_http_range(client) -> None:
    client.post("/?action=publish&q=big", data=ALL_BYTES, content_type="application/octet-stream")
    total = len(ALL_BYTES)
    reply = client.get("/?action=fetch&q=big", headers={"Range": "bytes=100-199"})
    assert reply.status_code == 206 and reply.data == ALL_BYTES[100:200]
    assert reply.headers["Content-Range"] == f"bytes 100-199/{total}"
    assert filename(reply)
    tail = client.get("/?action=fetch&q=big", headers={"Range": "bytes=-10"})
    assert tail.data == ALL_BYTES[-10:]
    outside = client.get("/?action=fetch&q=big", headers={"Range": f"bytes={total}-"})
    assert outside.status_code == 416 and outside.headers["Content-Range"] == f"bytes */{total}"
    assert body(outside)["error"] == "Requested range not satisfiable."


def test_head_request_sends_headers_only(client) -> None:
    client.get("/?action=publish&q=orders&msg=hello")
    reply = client.head("/?action=fetch&q=orders")
    assert reply.status_code == 200 and reply.data == b""
    assert reply.headers["Content-Length"] == "5"


def test_store_retrieve_scan_identify(client, data_dir) -> None:
    stored = body(client.get("/?action=store&msg=" + quote_from_bytes(ALL_BYTES) + "&r=30"))
    name = stored["result"]
    assert stored["message"] == "Message stored." and isinstance(name, str)
    parsed = parse_name(name)
    assert parsed.counter == 0 and parsed.retention_days == 30
    assert (data_dir / "store").joinpath(*parsed.store_dirs, name).exists()
    reply = client.get("/", query_string={"action": "retrieve", "name": name})
    assert reply.data == ALL_BYTES and filename(reply) == name

    hidden = body(client.post("/?action=store&u=1", data=b"x", content_type="text/plain"))
    assert hidden["result"].endswith("-u.bin")
    assert body(client.get("/?action=scan"))["result"] == [hidden["result"]]
    names = json.dumps(
        [
            hidden["result"],
            name,
            "202511021826110000-0030-9cc1980a-1719-440a-9650-6991c9cba11d-u.bin",
        ]
    )
    identified = body(client.get("/", query_string={"action": "identify", "names": names}))
    assert identified["result"] == [hidden["result"].replace("-u.bin", ".bin")]
    assert body(client.get("/?action=scan"))["result"] == []


def test_retrieve_errors_as_the_original(client) -> None:
    bad = "x202511021826110000-0030-9cc1980a-1719-440a-9650-6991c9cba11d.bin"
    reply = client.get("/", query_string={"action": "retrieve", "name": bad})
    assert reply.status_code == 400 and body(reply)["error"] == f"Invalid name '{bad}'."
    missing = bad[1:]
    reply = client.get("/", query_string={"action": "retrieve", "name": missing})
    assert reply.status_code == 404 and body(reply)["error"] == "Message not found."


def test_both_endpoints_answer(client) -> None:
    for path in ("/", "/index.php"):
        assert body(client.get(path + "?action=scan"))["error"] == ""


# --- configuration switches ------------------------------------------------------------


def test_disabled_action_is_refused_by_name(data_dir) -> None:
    client = make_client(data_dir, enabled_actions=frozenset({"fetch"}))
    reply = client.post("/?action=publish&q=a", data=b"x" * 1000, content_type="text/plain")
    assert reply.status_code == 403 and "publish" in body(reply)["error"]
    assert list((data_dir / "queues" / "temp").iterdir()) == []


def test_blocked_queue(data_dir) -> None:
    client = make_client(data_dir, blocked_queues=frozenset({"secret"}))
    reply = client.get("/?action=publish&q=Secret&msg=x")
    assert reply.status_code == 403 and body(reply)["error"]
    reply = client.post("/", data={"action": "publish", "q": "secret", "msg": "x"})
    assert reply.status_code == 403
    assert not (data_dir / "queues" / "secret").exists()


def test_maximum_message_size(data_dir) -> None:
    client = make_client(data_dir, max_message_bytes=100)
    assert (
        body(client.post("/?action=publish&q=a", data=b"x" * 100, content_type="a/b"))["error"]
        == ""
    )
    for reply in (
        client.post("/?action=publish&q=a", data=b"x" * 101, content_type="a/b"),
        client.post("/", data={"action": "publish", "q": "a", "msg": "y" * 101}),
        client.get("/?action=publish&q=a&msg=" + "z" * 101),
    ):
        assert reply.status_code == 413 and body(reply)["error"]
    assert len(drain(client, "a")) == 1
    assert list((data_dir / "queues" / "temp").iterdir()) == []


def test_a_read_only_copy_serves_reads_and_writes_nothing(data_dir) -> None:
    """ZOSCII_READ_ONLY on a copy without its indexes: fetch, retrieve and scan answer
    from a listing, every write is a 503, and no file changes (on a volume really
    mounted read-only, under gunicorn: tests/security/test_volume_faults.py)."""
    writer = make_client(data_dir)
    for message in ("one", "two", "three"):
        assert body(writer.get(f"/?action=publish&q=q&msg={message}"))["error"] == ""
    stored = body(writer.post("/", data={"action": "store", "msg": "doc", "u": "1"}))["result"]
    for index in (data_dir / ".zoscii" / "index").glob("q.*"):
        index.unlink()  # what a copy taken without .zoscii looks like
    before = snapshot(data_dir.parent)
    reader = make_client(data_dir, read_only=True)
    assert reader.get("/healthz").status_code == 200
    assert [message for _, message in drain(reader, "q")] == [b"one", b"two", b"three"]
    retrieved = reader.get("/", query_string={"action": "retrieve", "name": stored})
    assert retrieved.status_code == 200 and retrieved.data == b"doc"
    assert body(reader.get("/?action=scan"))["result"] == [stored]
    for refused in (
        reader.get("/?action=publish&q=q&msg=four"),
        reader.post("/", data={"action": "store", "msg": "x"}),
        reader.post("/", data={"action": "identify", "names": f'["{stored}"]'}),
    ):
        assert refused.status_code == 503 and "read-only copy" in body(refused)["error"]
    assert snapshot(data_dir.parent) == before


# --- bad input: a clear error, nothing written, nothing outside the data directory ---

BAD_REQUESTS = [
    ("/?action=publish&q=&msg=x", 400),
    ("/?action=publish&msg=x", 400),
    ("/?action=publish&q=a/../../x&msg=x", 400),
    ("/?action=publish&q=temp&msg=x", 400),
    ("/?action=publish&q=a%00b&msg=x", 400),
    ("/?action=publish&q=a&msg=x&r=10000", 400),
    ("/?action=publish&q=a&msg=x&r=-1", 400),
    ("/?action=publish&q=a&msg=x&r=abc", 400),
    ("/?action=publish&q=a&msg=x&n=../../etc/passwd", 400),
    ("/?action=publish&q=a", 400),
    ("/?action=fetch&q=a&after=../../../etc/passwd", 400),
    ("/?action=fetch&q=a&after=notaname.bin", 400),
    ("/?action=fetch&q=a&offset=-5", 400),
    ("/?action=fetch&q=a&length=1e3", 400),
    ("/?action=retrieve&name=../../../../etc/passwd", 400),
    ("/?action=retrieve", 400),
    ("/?action=identify&names=notjson", 400),
    ('/?action=identify&names={"a":1}', 400),
    ("/?action=identify&names=[1,2]", 400),
    ('/?action=identify&names=["../x-u.bin"]', 400),
    ("/?action=store&msg=x&u=2", 400),
    ("/?action=explode", 400),
    ("/?action=publish&q=%E9t%E9&msg=x", 400),
]


@pytest.mark.parametrize(("url", "status"), BAD_REQUESTS)
def test_bad_input_is_a_clear_error_and_writes_nothing(
    client, data_dir, url: str, status: int
) -> None:
    client.get("/?action=publish&q=a&msg=seed")
    before = snapshot(data_dir.parent)
    reply = client.get(url)
    assert reply.status_code == status
    assert body(reply)["error"]
    assert snapshot(data_dir.parent) == before
    assert body(client.get("/?action=scan"))["error"] == ""  # still serving


def test_wrong_methods(client) -> None:
    for method in ("put", "delete", "patch"):
        reply = getattr(client, method)("/?action=fetch&q=a")
        assert reply.status_code == 405 and body(reply)["error"]
        assert "POST" in reply.headers["Allow"]
    assert body(client.get("/no/such/path"))["error"]


def test_malformed_multipart_is_refused(client, data_dir) -> None:
    reply = client.post(
        "/",
        data=b'--xyz\r\nContent-Disposition: form-data; name="msg"\r\n\r\nunterminated',
        content_type="multipart/form-data; boundary=xyz",
    )
    assert reply.status_code == 400 and body(reply)["error"]
    assert list((data_dir / "queues" / "temp").iterdir()) == []


def snapshot(root: Path) -> dict[str, int]:
    """Every file under root with its size (index and lock files of .zoscii excluded)."""
    found = {}
    for folder, _, files in os.walk(root):
        if "/.zoscii" in folder:
            continue
        for file in files:
            path = Path(folder) / file
            found[str(path.relative_to(root))] = path.stat().st_size
    return found


# --- operations ------------------------------------------------------------------------


def test_healthz(client) -> None:
    assert client.get("/healthz").status_code == 200


def test_healthz_reports_a_missing_volume(tmp_path) -> None:
    client = make_client(tmp_path / "data")
    (tmp_path / "data").rename(tmp_path / "gone")
    reply = client.get("/healthz")
    assert reply.status_code == 503 and b"does not exist" in reply.data
    assert reply.json["status"] == "unavailable" and reply.headers["Retry-After"] == "5"


def test_metrics_count_per_queue(client) -> None:
    client.get("/?action=publish&q=orders&msg=abc")
    client.get("/?action=publish&q=orders&msg=de")
    fetch(client, "orders")
    text = client.get("/metrics").data.decode()
    assert 'zoscii_api_messages_published_total{queue="orders"} 2.0' in text
    assert 'zoscii_api_messages_fetched_total{queue="orders"} 1.0' in text
    assert 'zoscii_api_received_bytes_total{action="publish"} 5.0' in text
    assert 'zoscii_api_requests_total{action="publish",status="200"} 2.0' in text


def test_openapi_document_is_served(client) -> None:
    reply = client.get("/openapi.yaml")
    assert reply.status_code == 200
    source = Path(__file__).resolve().parents[2] / "services/api/zoscii_api/openapi.yaml"
    assert reply.data == source.read_bytes()


def test_an_empty_raw_body_is_an_empty_message(client) -> None:
    reply = client.post("/?action=publish&q=e", data=b"", content_type="application/octet-stream")
    assert body(reply)["error"] == ""
    assert drain(client, "e") == [(drain(client, "e")[0][0], b"")]


def test_msg_in_the_url_with_an_empty_raw_body(client) -> None:
    reply = client.post("/?action=publish&q=u&msg=hello", data=b"", content_type="text/plain")
    assert body(reply)["error"] == ""
    assert drain(client, "u")[0][1] == b"hello"
    both = client.post("/?action=publish&q=u&msg=x", data=b"y", content_type="text/plain")
    assert both.status_code == 400 and body(both)["error"]
