"""Interoperability both ways with the original PHP implementation's API."""

from __future__ import annotations

import json
import random
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.replikate.fake_original import FakeOriginalServer
from tests.support.queues import queue_contents
from tests.support.replikate_jobs import make_job, make_replicator
from zoscii_replikate.pointer import pointer_path
from zosciimq.client import ZosciiClient
from zosciimq.core import DataDir, DataStore, parse_name
from zosciimq.core.states import write_pointer

PAYLOADS = [
    b"",
    bytes(range(256)),
    b"spaces become + in PHP",
    b"a literal + plus, %20, & and =",
    b"\xff\xfe\xfd not UTF-8 \x80\x81",
    "unicode: grüße 東京".encode(),
    random.Random(3).randbytes(100_000),
]


@pytest.fixture
def original() -> Iterator[FakeOriginalServer]:
    server = FakeOriginalServer()
    yield server
    server.close()


@pytest.mark.parametrize("mode", ["original", "default"])
def test_replicating_from_an_original_server(
    original: FakeOriginalServer, tmp_path: Path, mode: str
) -> None:
    names = [original.add("orders", payload, retention=9) for payload in PAYLOADS]
    in_order = [original.queues["orders"][name] for name in sorted(names)]
    job = make_job(original.url, "orders", "mirror", mode=mode)
    result = make_replicator(job, tmp_path).run()
    assert (result.outcome, result.messages) == ("caught_up", len(PAYLOADS))
    local = queue_contents(tmp_path, "mirror")
    assert [data for _, data in local] == in_order
    assert all(parse_name(name).retention_days == 9 for name, _ in local)
    if mode == "original":  # only urlencoded POST fetches, as replikate.php sends them
        fetches = [r for r in original.requests if r[2].get(b"action") == b"fetch"]
        assert fetches and all(
            method == "POST" and ctype.startswith("application/x-www-form-urlencoded")
            for method, ctype, _ in fetches
        )


def test_original_server_to_the_store_keeps_names(
    original: FakeOriginalServer, tmp_path: Path
) -> None:
    names = [original.add("orders", payload) for payload in PAYLOADS[:3]]
    job = make_job(original.url, "orders", None, mode="original")
    assert make_replicator(job, tmp_path).run().messages == 3
    assert DataStore(DataDir(tmp_path)).scan() == sorted(n.replace(".bin", "-u.bin") for n in names)


def test_original_errors_with_status_200_are_errors(
    original: FakeOriginalServer, tmp_path: Path
) -> None:
    job = make_job(original.url, "no_such_queue", "mirror", mode="original")
    result = make_replicator(job, tmp_path).run()
    assert (result.outcome, result.reason) == ("error", "not_found")
    assert not (tmp_path / "queues" / "mirror").exists()


def test_deleted_pointer_at_an_original_server_moves_on(
    original: FakeOriginalServer, tmp_path: Path
) -> None:
    names = sorted(original.add("orders", bytes([i])) for i in range(3))
    job = make_job(original.url, "orders", "mirror", mode="original")
    write_pointer(pointer_path(DataDir(tmp_path), job), names[0])
    del original.queues["orders"][names[0]]
    assert make_replicator(job, tmp_path).run().messages == 2


# --- an original replikate.php pulling from this project's api --------------------------------
def php_urlencode(value: bytes) -> str:
    """PHP's urlencode, which http_build_query uses: spaces as '+', '~' encoded."""
    safe = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_."
    return "".join(chr(b) if b in safe else "+" if b == 0x20 else f"%{b:02X}" for b in value)


def http_build_query(params: dict[str, str | bytes]) -> bytes:
    return "&".join(
        f"{php_urlencode(k.encode())}={php_urlencode(v if isinstance(v, bytes) else v.encode())}"
        for k, v in params.items()
    ).encode("ascii")


def php_post(url: str, params: dict[str, str | bytes]) -> tuple[int, dict[str, str], bytes]:
    """curl_setopt(CURLOPT_POSTFIELDS, http_build_query(...)): a urlencoded POST."""
    request = urllib.request.Request(
        url,
        data=http_build_query(params),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        return reply.status, dict(reply.headers), reply.read()


def test_an_original_replicator_pulls_from_this_api_byte_exact(source: tuple[str, Path]) -> None:
    url = source[0] + "index.php"
    sq, tq = "o" + uuid.uuid4().hex[:10], "t" + uuid.uuid4().hex[:10]
    with ZosciiClient(source[0]) as client:
        for payload in PAYLOADS:
            client.publish(sq, payload, retention_days=5)
        expected, pointer = [], ""
        while (message := client.fetch(sq, pointer)) is not None:
            expected.append(message.data)
            pointer = message.name

    pointer, copied = "", 0
    while True:  # replikate.php's loop: fetch after the pointer until an envelope comes
        status, headers, body = php_post(url, {"action": "fetch", "q": sq, "after": pointer})
        assert status == 200
        disposition = headers.get("Content-Disposition", "")
        if "filename=" not in disposition:
            envelope = json.loads(body)
            assert envelope["system"] == "ZOSCII MQ" and envelope["error"] == ""
            break
        name = disposition.split('filename="')[1].rstrip('"')
        retention = name.split("-")[1]
        status, _, reply = php_post(
            url, {"action": "publish", "q": tq, "msg": body, "r": retention}
        )
        assert status == 200 and json.loads(reply)["error"] == ""
        pointer, copied = name, copied + 1
    assert copied == len(PAYLOADS)

    with ZosciiClient(source[0]) as client:
        got, pointer = [], ""
        while (message := client.fetch(tq, pointer)) is not None:
            got.append(message.data)
            assert parse_name(message.name).retention_days == 5
            pointer = message.name
    assert got == expected == PAYLOADS


def test_php_style_store_and_retrieve_are_byte_exact(source: tuple[str, Path]) -> None:
    url = source[0] + "index.php"
    payload = bytes(range(256)) + b" + %2B ~"
    status, _, reply = php_post(url, {"action": "store", "msg": payload, "r": "1"})
    assert status == 200
    name = json.loads(reply)["result"]
    status, headers, body = php_post(url, {"action": "retrieve", "name": name})
    assert status == 200 and body == payload
    assert headers["Content-Disposition"] == f'attachment; filename="{name}"'
