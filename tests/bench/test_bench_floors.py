"""The floors answer what the api answers to a publish, having read the whole body."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests
from werkzeug.test import Client

from bench import floor_app
from bench.contenders import FLOOR_APPS, FloorServer
from bench.floor_app import ENVELOPE, app, raw_app
from bench.report import RAW_FLOOR
from tests.support.queues import queue_contents
from zosciimq.core import DataDir

BODY = b"action=publish&q=x&msg=" + b"%00%FF" * 512


def test_both_apps_answer_the_77_byte_envelope() -> None:
    assert len(ENVELOPE) == 77
    for wsgi in (raw_app, app):
        reply = Client(wsgi).post("/", data=BODY, content_type="application/x-www-form-urlencoded")
        assert reply.status_code == 200
        assert reply.data == ENVELOPE
        assert reply.headers["Content-Type"] == "application/json"
        assert reply.headers["Content-Length"] == "77"


def test_the_core_commit_publishes_the_message_byte_exact(tmp_path: Path, monkeypatch) -> None:
    """``publish_app`` is the api's commit without the api: what it answered is on disk."""
    monkeypatch.setenv("ZOSCII_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("ZOSCII_DURABILITY", "sync")
    floor_app._core.cache_clear()
    try:
        client = Client(floor_app.publish_app)
        assert client.get("/healthz").data == ENVELOPE  # what the bench's probe asks
        for _ in range(2):
            reply = client.post("/", data=BODY, content_type="application/x-www-form-urlencoded")
            assert reply.status_code == 200
            assert reply.get_json()["message"] == "Message published."
    finally:
        floor_app._core.cache_clear()
    bodies = [body for _, body in queue_contents(DataDir(tmp_path / "data"), "x")]
    assert bodies == [b"\x00\xff" * 512] * 2


@pytest.mark.slow  # a gunicorn of its own
def test_the_raw_floor_reads_the_whole_body(tmp_path: Path) -> None:
    """Under gunicorn with the api's worker class: a keep-alive connection's next request
    is parsed where the last body ended, so a body left unread would break it."""
    floor = FloorServer(tmp_path, workers=1, threads=2, app=FLOOR_APPS[RAW_FLOOR]).start()
    try:
        assert floor.settings["worker_class"] == "zoscii_api.gunicorn_worker.ThreadWorker"
        with requests.Session() as session:
            for _ in range(3):
                reply = session.post(floor.url, data=BODY, timeout=10)
                assert reply.status_code == 200 and reply.content == ENVELOPE
    finally:
        floor.stop()
