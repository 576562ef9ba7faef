"""Exit codes scripts can test: auth (5), too large (6), unreachable (7), in text and JSON."""

from __future__ import annotations

import hashlib
import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.api_server import running_api
from tests.support.cli_run import Run, cli_env, run_process
from tests.support.http_servers import QuietHandler, QuietHTTPServer
from tests.support.queues import queue_name

TOKEN = "ops-token-0123456789abcdef0123456789abcdef"
CLIENTS = f"""
[[clients]]
name = "ops"
token_sha256 = "{hashlib.sha256(TOKEN.encode()).hexdigest()}"
read = ["*"]
write = ["open_*"]
actions = ["store", "retrieve", "scan", "identify"]
"""


@pytest.fixture(scope="module")
def restricted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An api with access control, a 4 KB message limit and identify switched off."""
    env = {
        "ZOSCII_AUTH_CLIENTS": CLIENTS,
        "ZOSCII_MAX_MESSAGE_BYTES": "4096",
        "ZOSCII_ACTIONS": "publish,fetch,store,retrieve,scan",
    }
    with running_api(tmp_path_factory.mktemp("restricted"), workers=1, env=env) as url:
        yield url


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/"  # nothing listens there any more


def test_no_or_wrong_token_exits_5(cli: Callable[..., Run], restricted: str) -> None:
    missing = cli("--url", restricted, "publish", "open_a", "x")
    assert missing.code == 5
    assert "Authentication required." in missing.err and "--token" in missing.err
    wrong = cli("--url", restricted, "--json", "--token", "not-the-token", "scan")
    assert wrong.code == 5
    assert json.loads(wrong.out)["exit_code"] == 5


def test_token_from_option_or_environment(
    cli: Callable[..., Run], restricted: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = "open_" + queue_name()
    assert cli("--url", restricted, "--token", TOKEN, "publish", queue, "x").code == 0
    monkeypatch.setenv("ZOSCII_TOKEN", TOKEN)
    monkeypatch.setenv("ZOSCII_URL", restricted)
    fetched = cli("fetch", queue)
    assert (fetched.code, fetched.out) == (0, b"x")


def test_not_allowed_queue_or_action_exits_5(
    cli: Callable[..., Run], restricted: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZOSCII_TOKEN", TOKEN)
    denied = cli("--url", restricted, "publish", "closed", "x")
    assert denied.code == 5
    assert "Not allowed" in denied.err
    name = "202001011200000000-0000-5b0c1a6e-0000-4000-8000-000000000000-u.bin"
    assert cli("--url", restricted, "identify", name).code == 5  # switched off


def test_too_large_exits_6(cli: Callable[..., Run], restricted: str, tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    big.write_bytes(b"x" * 10_000)
    argv = ["--url", restricted, "--token", TOKEN]
    result = cli(*argv, "publish", "open_big", "--file", str(big))
    assert result.code == 6
    assert cli(*argv, "--json", "store", "-", stdin=b"y" * 10_000).code == 6
    assert cli(*argv, "store", "-", stdin=b"y" * 4096).code == 0  # at the limit: fine


def test_unreachable_server_exits_7(cli: Callable[..., Run]) -> None:
    url = closed_port_url()
    result = cli("--url", url, "--retries", "0", "fetch", "q")
    assert result.code == 7
    assert result.err == f"zoscii: error: {url}: cannot connect (Connection refused)\n"
    as_json = cli("--url", url, "--retries", "0", "--json", "publish", "q", "x")
    assert as_json.code == 7
    assert json.loads(as_json.out) == {
        "error": f"{url}: cannot connect (Connection refused)",
        "reason": "unreachable",
        "exit_code": 7,
    }


def test_unreachable_server_exits_7_from_the_environment_url() -> None:
    env = cli_env(ZOSCII_URL=closed_port_url())
    assert run_process("--retries", "0", "scan", env=env).code == 7


def test_not_a_zoscii_server_exits_1(cli: Callable[..., Run], url: str) -> None:
    result = cli("--url", url + "healthz", "scan")  # answers, but not with an envelope
    assert result.code == 1
    assert result.err.startswith("zoscii: error: ")


def test_local_output_error_exits_1(cli: Callable[..., Run], url: str, tmp_path: Path) -> None:
    queue = queue_name()
    cli("--url", url, "publish", queue, "x")
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    result = cli("--url", url, "fetch", queue, "-o", str(blocker / "out.bin"))
    assert result.code == 1
    assert "Not a directory" in result.err


def envelope(error: str) -> bytes:
    body = {"system": "ZOSCII MQ", "version": "1.0", "error": error, "message": "", "result": []}
    return json.dumps(body).encode()


@pytest.fixture
def canned() -> Iterator[tuple[str, dict]]:
    """A server that answers every request with the reply in ``reply`` (status, type, body)."""
    reply: dict = {}

    class Handler(QuietHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(reply["status"])
            self.send_header("Content-Type", reply["type"])
            self.send_header("Content-Length", str(len(reply["body"])))
            self.end_headers()
            self.wfile.write(reply["body"])

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            self.do_GET()

    server = QuietHTTPServer(Handler).start()
    try:
        yield f"http://127.0.0.1:{server.port}/", reply
    finally:
        server.close()


@pytest.mark.parametrize(
    ("status", "content_type", "body", "code"),
    [
        (502, "text/html", b"<html>Bad Gateway</html>", 7),  # a proxy in front, api down
        (503, "application/json", envelope("Too many messages this second, try again."), 7),
        (500, "application/json", envelope("Internal error."), 7),
        (507, "application/json", envelope("No space left on the data volume."), 7),
        # issue 29: a full queue said "server unavailable"
        (507, "application/json", envelope("Queue 'q' cannot take this: 10 messages."), 8),
        (200, "text/html", b"<html>a web site</html>", 1),  # the wrong URL
        (401, "application/json", envelope("Authentication required."), 5),
        (413, "application/json", envelope("Message too large."), 6),
        (404, "application/json", envelope("Message not found."), 3),
    ],
)
def test_exit_code_follows_the_reply(
    cli: Callable[..., Run],
    canned: tuple[str, dict],
    status: int,
    content_type: str,
    body: bytes,
    code: int,
) -> None:
    url, reply = canned
    reply.update(status=status, type=content_type, body=body)
    result = cli("--url", url, "--json", "retrieve", "x")
    assert result.code == code
    assert json.loads(result.out)["exit_code"] == code
