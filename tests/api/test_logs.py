"""The api's log lines: the shared text or JSON format, no message bytes, a request id."""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
import requests
from gunicorn.config import Config

from tests.support.api_server import OPERATOR_TOKEN, ApiServer
from zoscii_api import logs

SECRET = "message-bytes-must-not-be-logged"


def _lines(server: ApiServer) -> list[str]:
    return server.log_path.read_text(errors="replace").splitlines()


def test_json_lines_with_request_fields_and_no_query_string(tmp_path: Path) -> None:
    server = ApiServer(tmp_path / "data", workers=1, env={"ZOSCII_LOG_FORMAT": "json"}).start()
    try:
        reply = requests.get(
            server.url,
            params={"action": "publish", "q": "orders", "msg": SECRET, "n": "nonce-1"},
            headers={"X-Request-ID": "req-42"},
            timeout=10,
        )
        assert reply.status_code == 200 and reply.headers["X-Request-ID"] == "req-42"
        bad = requests.get(server.url, params={"action": "fetch", "q": "a b"}, timeout=10)
        assert bad.status_code == 400 and len(bad.headers["X-Request-ID"]) == 16
    finally:
        server.shut_down()  # its goodbye lines are log lines too
    records = [json.loads(line) for line in _lines(server) if line.startswith("{")]
    assert records, "no JSON log lines"
    assert all({"time", "level", "service", "message"} <= set(r) for r in records)
    assert all(r["time"].endswith("Z") and r["service"] == "api" for r in records)
    publish = next(r for r in records if r.get("request_id") == "req-42")
    assert (publish["action"], publish["queue"], publish["status"]) == ("publish", "orders", 200)
    assert publish["method"] == "GET" and publish["path"] == "/" and publish["duration_ms"] >= 0
    assert any(r.get("status") == 400 and r.get("action") == "fetch" for r in records)
    text = server.log_path.read_text(errors="replace")
    assert SECRET not in text and "nonce-1" not in text


def test_an_admin_action_names_its_queue_and_leaves_an_audit_line(tmp_path: Path) -> None:
    """Issue 29: the access line's queue was always "-" for admin actions, and nothing
    said who purged what."""
    server = ApiServer(tmp_path / "data", workers=1, env={"ZOSCII_LOG_FORMAT": "json"}).start()
    operator = {"Authorization": f"Bearer {OPERATOR_TOKEN}", "X-Request-ID": "purge-7"}
    try:
        for _ in range(2):
            requests.post(server.url, data={"action": "publish", "q": "orders", "msg": "x"})
        reply = requests.post(
            server.url, data={"action": "purge", "q": "orders"}, headers=operator, timeout=10
        )
        assert reply.json()["result"]["purged"] == 2
    finally:
        server.shut_down()
    records = [json.loads(line) for line in _lines(server) if line.startswith("{")]
    access = next(r for r in records if r.get("request_id") == "purge-7" and "status" in r)
    assert (access["action"], access["queue"], access["status"]) == ("purge", "orders", 200)
    (audit,) = [r for r in records if r.get("event") == "admin"]
    assert audit["logger"] == "zoscii_api.audit" and audit["level"] == "INFO"
    assert (audit["action"], audit["queue"], audit["outcome"]) == ("purge", "orders", "done")
    assert (audit["client"], audit["address"]) == ("admin-token", "127.0.0.1")
    assert audit["result"] == {"purged": 2, "bytes": 2, "before": None}
    assert audit["request_id"] == "purge-7"
    assert OPERATOR_TOKEN not in server.log_path.read_text(errors="replace")


def test_text_lines_by_default(tmp_path: Path) -> None:
    server = ApiServer(tmp_path / "data", workers=1).start()
    try:
        requests.get(server.url, params={"action": "publish", "q": "q", "msg": SECRET}, timeout=10)
    finally:
        server.shut_down()  # its goodbye lines are log lines too
    access = [line for line in _lines(server) if '"GET /"' in line]
    assert access and " publish q 200 " in access[0]
    assert SECRET not in server.log_path.read_text(errors="replace")


@pytest.mark.parametrize(
    ("peer", "forwarded", "logged"),
    [
        ("10.1.2.3", "198.51.100.7", "198.51.100.7"),  # the trusted proxy's client
        ("::ffff:10.1.2.3", "198.51.100.7", "198.51.100.7"),  # on a dual-stack socket
        ("10.1.2.3", "198.51.100.7, ::ffff:10.9.9.9", "198.51.100.7"),  # two proxies
        ("203.0.113.9", "198.51.100.7", "203.0.113.9"),  # not trusted: its header is not
        ("10.1.2.3", "", "10.1.2.3"),
    ],
)
def test_the_access_line_names_the_client_behind_a_trusted_proxy(
    monkeypatch: pytest.MonkeyPatch, peer: str, forwarded: str, logged: str
) -> None:
    monkeypatch.setenv("ZOSCII_TRUSTED_PROXIES", "10.0.0.0/8")
    monkeypatch.setattr(logs, "setup_logging", lambda *a, **k: None)  # keep pytest's root
    config = Config()
    config.set("accesslog", "-")
    logger = logs.ApiLogger(config)
    lines: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = lines.append  # type: ignore[method-assign]
    logger.access_log.addHandler(handler)
    environ = {"REMOTE_ADDR": peer, "REQUEST_METHOD": "GET", "PATH_INFO": "/"}
    if forwarded:
        environ["HTTP_X_FORWARDED_FOR"] = forwarded
    logger.access(SimpleNamespace(status="200 OK", sent=3), None, environ, timedelta(0))
    assert [line.client for line in lines] == [logged]  # type: ignore[attr-defined]
    assert lines[0].getMessage().startswith(f'{logged} "GET /"')
