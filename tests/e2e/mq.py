"""The ZOSCII MQ wire protocol as the e2e tests speak it: plain HTTP with requests, every
way a message can be sent, so that the tests check the bytes on the wire rather than a
client library's idea of them."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from urllib.parse import quote_from_bytes, urlencode

import requests

ALL_BYTES = bytes(range(256))
TIMEOUT = 30


def envelope(reply: requests.Response) -> dict:
    """The JSON envelope of a reply, checked for shape."""
    assert reply.headers.get("Content-Type", "").startswith("application/json"), (
        f"HTTP {reply.status_code}, {reply.headers.get('Content-Type')}: {reply.content[:300]!r}"
    )
    document = reply.json()
    assert document["system"] == "ZOSCII MQ", document
    return document


def _published(reply: requests.Response) -> None:
    document = envelope(reply)
    assert reply.status_code == 200 and document["error"] == "", document
    assert document["message"] == "Message published.", document


def _query(queue: str, retention: int | None, **extra: str) -> dict[str, str]:
    params = {"action": "publish", "q": queue, **extra}
    if retention is not None:
        params["r"] = str(retention)
    return params


def publish_get(http: requests.Session, base: str, queue: str, msg: bytes, r: int | None) -> None:
    """GET with the message percent-encoded in the query string."""
    query = urlencode(_query(queue, r)) + "&msg=" + quote_from_bytes(msg, safe="")
    _published(http.get(f"{base}/index.php?{query}", timeout=TIMEOUT))


def publish_form(http: requests.Session, base: str, queue: str, msg: bytes, r: int | None) -> None:
    """urlencoded POST, as PHP's http_build_query writes it (spaces as '+')."""
    body = urlencode({**_query(queue, r), "msg": msg})
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    _published(http.post(f"{base}/index.php", data=body, headers=headers, timeout=TIMEOUT))


def publish_multipart_field(
    http: requests.Session, base: str, queue: str, msg: bytes, r: int | None
) -> None:
    """multipart/form-data with msg as a plain field (no filename), raw bytes."""
    fields = {k: (None, v) for k, v in _query(queue, r).items()}
    _published(http.post(f"{base}/", files={**fields, "msg": (None, msg)}, timeout=TIMEOUT))


def publish_multipart_file(
    http: requests.Session, base: str, queue: str, msg: bytes, r: int | None
) -> None:
    """multipart/form-data with msg as a file upload."""
    files = {"msg": ("message.bin", msg, "application/octet-stream")}
    _published(http.post(f"{base}/", data=_query(queue, r), files=files, timeout=TIMEOUT))


def publish_raw(http: requests.Session, base: str, queue: str, msg: bytes, r: int | None) -> None:
    """The message as the raw request body, the parameters in the query string."""
    headers = {"Content-Type": "application/octet-stream"}
    reply = http.post(
        f"{base}/", params=_query(queue, r), data=msg, headers=headers, timeout=TIMEOUT
    )
    _published(reply)


Publisher = Callable[[requests.Session, str, str, bytes, "int | None"], None]
PUBLISHERS: dict[str, Publisher] = {
    "get": publish_get,
    "form": publish_form,
    "multipart-field": publish_multipart_field,
    "multipart-file": publish_multipart_file,
    "raw": publish_raw,
}


def fetch(http: requests.Session, base: str, queue: str, after: str = "") -> requests.Response:
    return http.get(
        f"{base}/", params={"action": "fetch", "q": queue, "after": after}, timeout=TIMEOUT
    )


def message_name(reply: requests.Response) -> str | None:
    """The name of a binary reply (from Content-Disposition), None for an envelope."""
    disposition = reply.headers.get("Content-Disposition")
    if disposition is None:
        return None
    assert disposition.startswith('attachment; filename="'), disposition
    assert reply.headers["Content-Type"] == "application/octet-stream", reply.headers
    return disposition.split('"')[1]


def drain(http: requests.Session, base: str, queue: str) -> list[tuple[str, bytes]]:
    """Every message of a queue, by pointer from the start, as a consumer reads them."""
    seen: list[tuple[str, bytes]] = []
    after = ""
    while True:
        reply = fetch(http, base, queue, after)
        name = message_name(reply)
        if name is None:
            document = envelope(reply)
            if reply.status_code == 404 and not seen:
                return seen  # the queue does not exist (yet)
            assert reply.status_code == 200 and document["error"] == "", document
            return seen
        assert reply.status_code == 200, reply.status_code
        assert name > after, f"fetch after {after!r} answered {name!r}"
        seen.append((name, reply.content))
        after = name


def bodies(messages: list[tuple[str, bytes]]) -> list[bytes]:
    return [body for _name, body in messages]


def wait_for(
    condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.5
) -> float:
    """Poll ``condition`` until true; seconds it took. Fails naming ``what``."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)
    return time.monotonic() - start


def payload(tag: str, number: int, size: int = 0) -> bytes:
    """A distinct binary message (non-UTF-8, NUL and 0xff bytes) of about ``size`` bytes."""
    seed = f"{tag}:{number}:".encode()
    block = hashlib.sha256(seed).digest() + b"\x00\xff\xfe\x80"
    return seed + block * max(1, size // len(block))
