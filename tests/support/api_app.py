"""The api in-process: a Flask test client on a data directory, and reading its replies.

Every test of the api that needs no real server builds it here, with settings given as
``ApiSettings`` fields (``make_client(data_dir, max_message_bytes=100)``).
"""

from __future__ import annotations

from pathlib import Path

from flask import Flask
from flask.testing import FlaskClient

from zoscii_api.app import create_app
from zoscii_api.settings import ApiSettings
from zosciimq.settings import CoreSettings


def make_app(data_dir: Path, default_retention_days: int = 0, **overrides: object) -> Flask:
    """The api as gunicorn builds it, on ``data_dir``, with ``overrides`` of its settings."""
    core = CoreSettings(data_dir=data_dir, default_retention_days=default_retention_days)
    return create_app(ApiSettings(core=core, **overrides))  # type: ignore[arg-type]


def make_client(
    data_dir: Path, default_retention_days: int = 0, **overrides: object
) -> FlaskClient:
    return make_app(data_dir, default_retention_days, **overrides).test_client()


def body(reply) -> dict:
    """The JSON envelope of a reply, checked to be one."""
    assert reply.mimetype == "application/json"
    document = reply.get_json()
    assert document["system"] == "ZOSCII MQ" and document["version"] == "1.0"
    assert list(document) == ["system", "version", "error", "message", "result"]
    return document


def fetch(client: FlaskClient, queue: str, after: str = "", **extra):
    return client.get("/", query_string={"action": "fetch", "q": queue, "after": after, **extra})


def filename(reply) -> str:
    """The message name of a fetch or retrieve reply (its Content-Disposition)."""
    disposition = reply.headers["Content-Disposition"]
    assert disposition.startswith('attachment; filename="') and disposition.endswith('"')
    return disposition.split('"')[1]


def drain(client: FlaskClient, queue: str, after: str = "") -> list[tuple[str, bytes]]:
    """Every message after ``after`` by single fetches: (name, bytes) in order."""
    seen = []
    while True:
        reply = fetch(client, queue, after)
        if "Content-Disposition" not in reply.headers:
            assert body(reply)["error"] == ""
            return seen
        assert reply.mimetype == "application/octet-stream"
        after = filename(reply)
        seen.append((after, reply.data))
