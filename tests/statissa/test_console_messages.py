"""The console's message pages and the queue page's latest names: read through the core
(``zosciimq.core.browse``), names from the URL checked by it, contents shown only to
callers the api would let fetch them."""

from __future__ import annotations

import hashlib
import os
import re
from functools import partial
from pathlib import Path

import pytest
from werkzeug.test import Client

from tests.statissa.datadir import NOW, Clock
from tests.support.queues import publish_body
from zoscii_statissa.compute import compute_snapshot
from zoscii_statissa.message_page import hex_dump, show_bytes
from zoscii_statissa.scan import scan_locally
from zoscii_statissa.snapshots import SnapshotKeeper
from zoscii_statissa.web import create_app
from zosciimq.access import AccessControl
from zosciimq.access import Client as AccessClient
from zosciimq.core import DataDir, QueueStore

READER = "reader-token-" + "r" * 24
VIEWER = "viewer-token-" + "v" * 24
BINARY = bytes(range(256)) * 3
TEXT = "Bestellung Nr. 4711: 3 Stück Äpfel\n"


class Console:
    def __init__(self, root: Path, access: AccessControl | None = None) -> None:
        self.data_dir = DataDir(root)
        self.data_dir.ensure()
        queues = QueueStore(self.data_dir, Clock(NOW))
        self.text = publish_body(queues, "orders", TEXT.encode(), 30)
        self.binary = publish_body(queues, "orders", BINARY, 7)
        queues.close()
        keeper = SnapshotKeeper(partial(compute_snapshot, scan_locally, self.data_dir), Clock(NOW))
        self.client = Client(create_app(keeper, self.data_dir, access))

    def page(self, name: str, **headers: str) -> tuple[int, str]:
        reply = self.client.get(f"/queues/orders/messages/{name}", headers=headers)
        return reply.status_code, reply.text


@pytest.fixture
def console(tmp_path: Path) -> Console:
    return Console(tmp_path / "data")


def _head(page: str) -> str:
    found = re.search(r'<pre id="head" class="(\w+)">(.*?)</pre>', page, re.S)
    assert found, "no bytes shown"
    return found[1] + ":" + found[2]


def test_the_latest_names_link_to_their_pages(console: Console) -> None:
    page = console.client.get("/queues/orders").text
    for result in (console.text, console.binary):
        assert f'href="orders/messages/{result.name}"' in page
    assert 'id="names-note"' not in page  # read from the index


def test_a_text_message_shows_its_metadata_and_text(console: Console) -> None:
    status, page = console.page(console.text.name)
    assert status == 200
    assert _head(page) == "text:" + TEXT
    assert 'id="published">2026-03-10 12:00:00' in page
    assert "30 d" in page and "2026-04-09 12:00:00" in page  # retention, expiry
    assert "All 37 of 37 bytes, as UTF-8 text" in page


def test_a_binary_message_shows_its_first_bytes_in_hex(console: Console) -> None:
    status, page = console.page(console.binary.name)
    assert status == 200
    assert "The first 256 of 768 bytes, in hex" in page
    kind, _, dump = _head(page).partition(":")
    assert kind == "hex"
    lines = dump.splitlines()
    assert len(lines) == 16 and lines[0].startswith("00000000  00 01 02 03 04 05 06 07  08 09")
    assert lines[-1].startswith("000000f0  f0 f1")
    assert bytes.fromhex(" ".join(line[10:58] for line in lines)) == BINARY[:256]


@pytest.mark.parametrize(
    "path",
    [
        "/queues/orders/messages/..%2F..%2Fetc%2Fpasswd",
        "/queues/orders/messages/not-a-name",
        "/queues/orders/messages/..",
        "/queues/Orders/messages/{name}",  # queue names are exact here
        "/queues/temp/messages/{name}",
        "/queues/nope/messages/{name}",
        "/queues/orders/messages/{other}",
    ],
)
def test_names_from_the_url_are_checked_by_the_core(console: Console, path: str) -> None:
    other = console.text.name.replace(console.text.name[-12:], "0" * 12)
    url = path.format(name=console.text.name, other=other)
    reply = console.client.get(url)
    assert reply.status_code == 404, url
    assert "Bestellung" not in reply.text


def test_a_link_in_the_queue_is_not_followed(console: Console, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("top secret")
    name = console.text.name.replace(console.text.name[-12:], "1" * 12)
    os.symlink(secret, console.data_dir.queue_dir("orders") / name)
    status, page = console.page(name)
    assert status == 404 and "top secret" not in page


def test_contents_need_the_queues_read_right(tmp_path: Path) -> None:
    def client(name: str, token: str, read: tuple[str, ...]) -> AccessClient:
        digest = hashlib.sha256(token.encode()).digest()
        return AccessClient(name, digest, read=read, actions=frozenset({"statistics"}))

    access = AccessControl([client("reader", READER, ("ord*",)), client("viewer", VIEWER, ())])
    console = Console(tmp_path / "data", access)
    name = console.text.name
    assert console.page(name)[0] == 401
    status, page = console.page(name, Authorization=f"Bearer {VIEWER}")
    assert status == 403 and "read right" in page and "Bestellung" not in page
    status, page = console.page(name, Authorization=f"Bearer {READER}")
    assert status == 200 and "Bestellung" in page


def test_the_queue_page_says_when_names_come_from_a_listing(console: Console) -> None:
    os.unlink(console.data_dir.index_path("orders"))
    page = console.client.get("/queues/orders").text
    assert 'id="names-note"' in page and "Listed from the directory" in page
    assert page.index(console.binary.name) < page.index(console.text.name)  # newest first


def test_how_bytes_are_shown() -> None:
    assert show_bytes(b"plain\ttext\r\n", complete=True) == ("text", "plain\ttext\r\n")
    cut = "Äpfel Ä".encode()[:-1]  # a read that ended inside a character
    assert show_bytes(cut, complete=False) == ("text", "Äpfel ")
    assert show_bytes(cut, complete=True).kind == "hex"  # the whole message: not text
    assert show_bytes(b"bell\x07", complete=True).kind == "hex"
    assert show_bytes(b"\xff\xfe", complete=True).kind == "hex"
    assert hex_dump(b"AB\x00") == "00000000  41 42 00" + " " * 15 + "  " + " " * 23 + "  |AB.|"
