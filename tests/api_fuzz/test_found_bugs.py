"""Bugs the fuzzing work found in the api, each pinned as a strict xfail.

Each test states the behaviour PROTOCOL.md (or HTTP) asks for. While the bug is
there the test xfails; once it is fixed the test passes, and ``strict`` turns that
into a failure so the marker gets removed and the test guards the fix from then on.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.api_fuzz.helpers import make_app
from zoscii_api.params import CHUNK

STORE_NAME = "202601020304050000-0007-0b1e6a52-9c1f-4c43-a1f4-3d1e52b7c001.bin"


def test_full_volume_leaves_no_partial_upload(full_volume: Path) -> None:
    data_dir = full_volume / "data"
    client = make_app(data_dir, max_message_bytes=1 << 20).test_client()
    response = client.post("/?action=publish&q=orders&r=1", data=b"x" * (512 << 10))
    assert response.status_code == 507
    assert list((data_dir / "queues" / "temp").iterdir()) == []


def test_multipart_message_of_an_unlucky_size_is_byte_exact(tmp_path: Path) -> None:
    boundary = "----WebKitFormBoundary7MA4YWxkTrZu0gW"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="action"\r\n\r\nstore\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="msg"; filename="m.bin"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    # The size that makes the parser's first 64 KiB read end right after "\r\n--<boundary>-".
    msg = bytes(range(256)) * 256
    msg = msg[: CHUNK - len(head) - len(f"\r\n--{boundary}-")]
    client = make_app(tmp_path / "data", max_message_bytes=1 << 20).test_client()
    stored = client.post(
        "/?r=1",
        data=head + msg + tail,
        content_type=f"multipart/form-data; boundary={boundary}",
    )
    assert stored.status_code == 200, stored.json
    fetched = client.get(f"/?action=retrieve&name={stored.json['result']}")
    assert fetched.get_data() == msg


def test_non_latin1_multipart_boundary_is_a_bad_request(tmp_path: Path) -> None:
    client = make_app(tmp_path / "data").test_client()
    content_type = "multipart/form-data; boundary*=UTF-8''%E2%82%AC"
    response = client.post("/?action=store", data=b"--x\r\n", content_type=content_type)
    assert response.status_code == 400


def test_deeply_nested_names_is_a_bad_request(tmp_path: Path) -> None:
    client = make_app(tmp_path / "data", max_field_bytes=1 << 20).test_client()
    response = client.post("/", data={"action": "identify", "names": "[" * 100_000})
    assert response.status_code == 400


def test_405_allow_lists_the_methods_of_that_path(tmp_path: Path) -> None:
    client = make_app(tmp_path / "data").test_client()
    response = client.post("/healthz")
    assert response.status_code == 405
    assert "POST" not in response.headers["Allow"]


@pytest.mark.parametrize("header", ["items=0-1", "bytes=0-1,3-4"])
def test_unhandled_range_is_ignored(header: str, tmp_path: Path) -> None:
    client = make_app(tmp_path / "data").test_client()
    client.post("/", data={"action": "publish", "q": "orders", "msg": b"hello", "r": "1"})
    response = client.get("/?action=fetch&q=orders", headers={"Range": header})
    assert response.status_code == 200
    assert response.get_data() == b"hello"


def test_healthz_reason_is_valid_json(tmp_path: Path) -> None:
    data_dir = tmp_path / 'da"ta'
    app = make_app(data_dir)
    shutil.rmtree(data_dir)
    response = app.test_client().get("/healthz")
    assert response.status_code == 503
    assert str(data_dir) in json.loads(response.get_data())["reason"]
