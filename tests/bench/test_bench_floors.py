"""The floors answer what the api answers to a publish, having read the whole body."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
import requests
from werkzeug.test import Client

from bench import floor_app
from bench.contenders import (
    ASGI_WORKER,
    CORE_LOOP_APP,
    FLOOR_APPS,
    RAW_ASGI_FLOOR,
    FloorServer,
)
from bench.floor_app import ENVELOPE, app, raw_app
from bench.report import RAW_FLOOR
from tests.support.queues import queue_contents
from zosciimq.core import DataDir
from zosciimq.core.wal import WriteAheadLog

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


async def _post(body: bytes) -> tuple[int, bytes]:
    """One request through ``publish_loop_app``, as an ASGI server makes it."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(event: dict[str, Any]) -> None:
        sent.append(event)

    await floor_app.publish_loop_app({"type": "http", "method": "POST"}, receive, send)
    return sent[0]["status"], sent[1]["body"]


def test_the_event_loop_commit_gathers_what_arrived_into_one_commit(
    tmp_path: Path, monkeypatch
) -> None:
    """Ten requests ready on the loop at once: one commit (one log flush) for all of
    them, each answered, each message on disk byte-exact and in arrival order."""
    monkeypatch.setenv("ZOSCII_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("ZOSCII_DURABILITY", "sync")
    flushes = []
    real_sync = WriteAheadLog.sync
    monkeypatch.setattr(WriteAheadLog, "sync", lambda wal: (flushes.append(1), real_sync(wal)))
    floor_app._core.cache_clear()
    floor_app._gathered.cache_clear()

    async def ten() -> list[tuple[int, bytes]]:
        return await asyncio.gather(
            *(_post(b"action=publish&q=x&msg=%d-" % n + b"%00%FF" * 512) for n in range(10))
        )

    try:
        replies = asyncio.run(ten())
        again = asyncio.run(_post(b"action=publish&q=x&msg=last"))  # a loop of its own
    finally:
        floor_app._core.cache_clear()
        floor_app._gathered.cache_clear()
    assert replies == [(200, floor_app.PUBLISHED)] * 10 and again == (200, floor_app.PUBLISHED)
    assert len(flushes) == 2
    bodies = [body for _, body in queue_contents(DataDir(tmp_path / "data"), "x")]
    assert bodies == [b"%d-" % n + b"\x00\xff" * 512 for n in range(10)] + [b"last"]


@pytest.mark.slow  # a gunicorn of its own
def test_the_event_loop_commit_under_gunicorns_asgi_worker(tmp_path: Path) -> None:
    """Eight clients at once, two workers: every answered message is on disk once,
    byte-exact, each client's in its order."""
    env = {"ZOSCII_DATA_DIR": str(tmp_path / "data"), "ZOSCII_DURABILITY": "sync"}
    floor = FloorServer(
        tmp_path, workers=2, threads=1, app=CORE_LOOP_APP, env=env, worker_class=ASGI_WORKER
    ).start()
    failures: list[str] = []

    def client(number: int) -> None:
        with requests.Session() as session:
            for sent in range(25):
                body = b"action=publish&q=x&msg=" + b"c%d-%02d-" % (number, sent) + b"%00" * 100
                reply = session.post(floor.url, data=body, timeout=30)
                if reply.content != floor_app.PUBLISHED:
                    failures.append(reply.text)

    try:
        clients = [threading.Thread(target=client, args=(n,)) for n in range(8)]
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join(60)
    finally:
        floor.stop()
    assert failures == []
    bodies = [body for _, body in queue_contents(DataDir(tmp_path / "data"), "x")]
    assert len(bodies) == len(set(bodies)) == 200
    assert all(body.endswith(b"\x00" * 100) for body in bodies)
    for number in range(8):
        mine = [b for b in bodies if b.startswith(b"c%d-" % number)]
        assert mine == sorted(mine) and len(mine) == 25


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


@pytest.mark.slow  # a gunicorn of its own
def test_the_raw_asgi_floor_reads_the_whole_body(tmp_path: Path) -> None:
    """The loop server's floor, under gunicorn's asgi worker: it too must read each
    body to its end for the next request on the connection to be answered."""
    floor = FloorServer(
        tmp_path, workers=1, threads=1, app=FLOOR_APPS[RAW_ASGI_FLOOR], worker_class=ASGI_WORKER
    ).start()
    try:
        with requests.Session() as session:
            for _ in range(3):
                reply = session.post(floor.url, data=BODY, timeout=10)
                assert reply.status_code == 200 and reply.content == ENVELOPE
                assert reply.headers["Content-Type"] == "application/json"
    finally:
        floor.stop()
