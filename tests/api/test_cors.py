"""CORS (``ZOSCII_CORS_ORIGINS``): off by default; on, the listed origins' pages may read
the api's answers, a preflight is answered, other origins get nothing granted."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.api_app import make_client
from zosciimq.cors import parse_origins
from zosciimq.settings import SettingsError

CONSOLE = "https://console.example"


def test_off_by_default_nothing_is_granted(tmp_path: Path) -> None:
    client = make_client(tmp_path / "data")
    client.get("/", query_string={"action": "publish", "q": "cors", "msg": "x"})
    reply = client.get(
        "/", query_string={"action": "fetch", "q": "cors"}, headers={"Origin": CONSOLE}
    )
    assert reply.data == b"x"
    assert "Access-Control-Allow-Origin" not in reply.headers
    assert client.options("/", headers={"Origin": CONSOLE}).status_code == 405


def test_a_listed_origin_reads_answers_and_gets_its_preflight(tmp_path: Path) -> None:
    client = make_client(tmp_path / "data", cors_origins=(CONSOLE,))
    client.get("/", query_string={"action": "publish", "q": "cors", "msg": "x"})
    reply = client.get(
        "/", query_string={"action": "fetch", "q": "cors"}, headers={"Origin": CONSOLE}
    )
    assert reply.headers["Access-Control-Allow-Origin"] == CONSOLE
    assert "Content-Disposition" in reply.headers["Access-Control-Expose-Headers"]
    assert reply.headers["Vary"] == "Origin"
    preflight = client.options(
        "/",
        headers={
            "Origin": CONSOLE,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization",
        },
    )
    assert preflight.status_code == 204
    assert preflight.headers["Access-Control-Allow-Origin"] == CONSOLE
    assert "POST" in preflight.headers["Access-Control-Allow-Methods"]
    assert "Authorization" in preflight.headers["Access-Control-Allow-Headers"]
    other = client.get(
        "/",
        query_string={"action": "fetch", "q": "cors"},
        headers={"Origin": "https://elsewhere.example"},
    )
    assert "Access-Control-Allow-Origin" not in other.headers
    denied = client.options("/", headers={"Origin": "https://elsewhere.example"})
    assert "Access-Control-Allow-Origin" not in denied.headers


@pytest.mark.parametrize("raw", ["console.example", "ftp://x", "https://x/path", "https://"])
def test_an_origin_that_is_not_one_is_refused_at_start(raw: str) -> None:
    with pytest.raises(SettingsError, match="ZOSCII_CORS_ORIGINS"):
        parse_origins(raw)
    assert parse_origins(" https://a.example/ , * ") == ("https://a.example", "*")
