"""The api under the asgi worker (ZOSCII_API_SERVER=loop, zoscii_api.asgi) answers every
request as under gthread: the same requests to both, the same answers, and the messages
byte-exact; plus what only the loop does (its own access lines)."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gunicorn_h1c
import pytest
import requests
from gunicorn.asgi.protocol import ASGIProtocol
from gunicorn.config import Config

from tests.support.api_server import ApiServer
from tests.support.queues import queue_contents, read_queue
from zoscii_api.asgi import FAST_BODY_BYTES
from zoscii_api.gunicorn_worker import HeadDeadline
from zosciimq.protocol import FRAME_END, FRAMED_BATCH, frame_head

RAW = {"Content-Type": "application/octet-stream"}
FORM = {"Content-Type": "application/x-www-form-urlencoded"}
BINARY = bytes(range(256)) * 4
LARGE = os.urandom(FAST_BODY_BYTES + 12345)  # read by a thread, as it arrives


def chunked(data: bytes) -> Iterator[bytes]:
    for start in range(0, len(data), 7000):
        yield data[start : start + 7000]


def framed(*messages: tuple[bytes, dict[str, str]]) -> bytes:
    return b"".join(frame_head(len(m), o) + m for m, o in messages) + FRAME_END


# (method, path, params, body or None, headers): publishes of every kind, refusals, reads.
REQUESTS: list[tuple[str, str, dict[str, str], Any, dict[str, str]]] = [
    ("GET", "", {"action": "publish", "q": "a", "msg": "by GET"}, None, {}),
    ("POST", "", {}, {"action": "publish", "q": "a", "msg": "form \x00\xff"}, {}),
    ("POST", "index.php", {"action": "publish", "q": "a"}, BINARY, RAW),
    ("POST", "", {"action": "publish", "q": "a"}, LARGE, RAW),
    ("POST", "", {"action": "publish", "q": "a"}, chunked, RAW),
    ("POST", "", {"action": "publish", "q": "a", "n": "nonce-1"}, b"once", RAW),
    ("POST", "", {"action": "publish", "q": "a", "n": "nonce-1"}, b"twice", RAW),
    (
        "POST",
        "",
        {"action": "publish", "q": "b"},
        framed((b"one", {}), (b"two", {"X-ZOSCII-Nonce": "nonce-2"}), (BINARY, {})),
        {"Content-Type": FRAMED_BATCH},
    ),
    ("POST", "", {"action": "publish", "q": "../etc"}, b"x", RAW),
    ("POST", "", {}, {"action": "publish", "q": "a"}, {}),
    ("POST", "", {"action": "publish", "q": "a", "r": "forever"}, b"x", RAW),
    ("GET", "", {"action": "no-such-action"}, None, {}),
    ("GET", "", {}, None, {}),
    ("HEAD", "", {"action": "publish", "q": "a", "msg": "x"}, None, {}),
    ("PUT", "", {"action": "publish", "q": "a"}, b"x", RAW),
    ("GET", "", {"action": "scan"}, None, {}),
    ("GET", "healthz", {}, None, {}),
    # Forms, parsed whole on the loop: a form's field overrides the URL's, as PHP's
    # $_REQUEST; the limits are the streaming parser's (ZOSCII_MAX_FIELD_BYTES=1024 here).
    ("POST", "", {"q": "a"}, {"action": "publish", "q": "c", "msg": "form's queue"}, {}),
    ("POST", "", {"action": "publish", "q": "c", "msg": "url's"}, {"msg": "form's msg"}, {}),
    ("POST", "", {}, {"action": "publish", "q": "c", "msg": "", "r": "7", "ttl": "3600"}, {}),
    ("POST", "", {}, {"action": "publish", "q": "c", "msg": "n3", "n": "nonce-3"}, {}),
    ("POST", "", {}, {"action": "publish", "q": "c", "msg": "n3 again", "n": "nonce-3"}, {}),
    ("POST", "", {}, {"action": "publish", "q": "c", "batch": "1", "msg": "a batch"}, {}),
    ("POST", "", {}, {"action": "publish", "q": "c", "msg": "x", "ttl": "soon"}, {}),
    ("POST", "", {}, {"action": "publish", "q": "c", "msg": "x", "pad": "p" * 1025}, {}),
    (
        "POST",
        "",
        {},
        {
            "action": "publish",
            "q": "c",
            "msg": "x",
            "a": "p" * 1000,
            "b": "p" * 1000,
            "d": "p" * 1000,
        },
        {},
    ),
    ("POST", "", {}, b"action=publish&q=c&m%FFx=1&msg=x", FORM),
    ("POST", "", {}, b"action=publish&q=c&msg=%zz%4", FORM),
    ("POST", "", {}, b"action=%70ublish&q=c&msg=escaped", FORM),  # the loop lets it go
    ("POST", "", {}, {"action": "publish", "q": "c"}, {"X-Request-ID": "mine-1"}),
    ("POST", "", {}, {"action": "fetch", "q": "c"}, {}),
]


def answer(url: str, request: tuple[str, str, dict[str, str], Any, dict[str, str]]) -> tuple:
    method, path, params, body, headers = request
    data = body(LARGE if params.get("q") == "a" else b"") if callable(body) else body
    reply = requests.request(method, url + path, params=params, data=data, headers=headers)
    kind = reply.headers.get("Content-Type", "")
    if method == "HEAD":  # the headers a GET would have, no body
        return reply.status_code, kind, reply.headers.get("Content-Length"), reply.content
    if kind.startswith("application/json") and path != "healthz":
        envelope = reply.json()
        mine = reply.headers["X-Request-ID"] if "X-Request-ID" in headers else None
        return reply.status_code, envelope["error"], envelope["message"], _shape(envelope), mine
    return reply.status_code, kind, reply.content


def _shape(envelope: dict[str, Any]) -> object:
    """A batch's result with its names replaced by whether there is one."""
    result = envelope["result"]
    return [name is not None for name in result] if isinstance(result, list) else result


def read_back(url: str, queue: str) -> list[bytes]:
    return [body for _, body in read_queue(url, queue)]


@pytest.fixture
def both(tmp_path: Path) -> Iterator[dict[str, ApiServer]]:
    servers = {
        kind: ApiServer(
            tmp_path / kind, env={"ZOSCII_API_SERVER": kind, "ZOSCII_MAX_FIELD_BYTES": "1024"}
        ).start()
        for kind in ("threads", "loop")
    }
    try:
        yield servers
    finally:
        for server in servers.values():
            server.stop()


def test_the_loop_answers_every_request_as_gthread_does(both: dict[str, ApiServer]) -> None:
    answers = {
        kind: [answer(server.url, request) for request in REQUESTS] for kind, server in both.items()
    }
    for request, threads, loop in zip(REQUESTS, answers["threads"], answers["loop"], strict=True):
        assert loop == threads, f"{request[:3]}: threads {threads[:3]}, loop {loop[:3]}"
    published = [b"by GET", "form \x00\xff".encode(), BINARY, LARGE, LARGE, b"once"]
    for server in both.values():
        assert read_back(server.url, "a") == published
        assert read_back(server.url, "b") == [b"one", b"two", BINARY]
        assert read_back(server.url, "c") == [
            b"form's queue",
            b"form's msg",
            b"",
            b"n3",
            b"a batch",
            b"%zz%4",
            b"escaped",
        ]
    for data_dir in (server.data_dir for server in both.values()):
        assert list((data_dir / "queues" / "temp").iterdir()) == []


def test_the_loop_writes_the_access_line_of_each_request(tmp_path: Path) -> None:
    server = ApiServer(tmp_path / "data", env={"ZOSCII_API_SERVER": "loop"}).start()
    try:
        published = requests.post(
            server.url,
            params={"action": "publish", "q": "logged"},
            data=b"secret message",
            headers={**RAW, "X-Request-ID": "publish-1"},
        )
        fetched = requests.get(
            server.url,
            params={"action": "fetch", "q": "logged"},
            headers={"X-Request-ID": "fetch-1"},
        )
        assert published.status_code == fetched.status_code == 200
        # A line is written once its answer has left: wait for it, as a log reader would.
        deadline = time.monotonic() + 10
        while not all(i in server.log_path.read_text() for i in ("publish-1", "fetch-1")):
            assert time.monotonic() < deadline, server.log_path.read_text()[-3000:]
            time.sleep(0.05)
    finally:
        server.stop()
    lines = server.log_path.read_text().splitlines()
    publish_line = next(line for line in lines if "publish-1" in line)
    fetch_line = next(line for line in lines if "fetch-1" in line)
    assert '"POST /" publish logged 200 ' in publish_line
    assert '"GET /" fetch logged 200 14 ' in fetch_line  # the bytes of the message sent
    assert "secret" not in server.log_path.read_text()  # no query strings, no bodies


@pytest.mark.parametrize("kind", ["threads", "loop"])
@pytest.mark.parametrize(
    "head, sent",
    [
        (  # a raw message that declares 2,000 bytes; read on the loop (it is small)
            b"POST /?action=publish&q=cut HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/octet-stream\r\nContent-Length: 2000\r\n\r\n",
            b"m" * 1000,
        ),
        (  # a form whose message would end where the connection did
            b"POST / HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 2000\r\n\r\n",
            b"action=publish&q=cut&msg=" + b"m" * 1000,
        ),
        (  # a chunked message, read by a thread, cut between two chunks
            b"POST /?action=publish&q=cut HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"3e8\r\n" + b"m" * 1000 + b"\r\n",
        ),
    ],
    ids=["raw", "form", "chunked"],
)
def test_a_body_cut_short_by_the_client_publishes_nothing(
    tmp_path: Path, kind: str, head: bytes, sent: bytes
) -> None:
    """A client that goes away before the end of its body: no message, however much of
    it arrived (gunicorn ends the body at the connection's end: params.WholeBody)."""
    data_dir = tmp_path / "data"
    server = ApiServer(data_dir, workers=1, env={"ZOSCII_API_SERVER": kind}).start()
    try:
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            sock.sendall(head + sent)
            time.sleep(0.3)  # it arrived; then the client goes away mid-body
        time.sleep(0.5)
        reply = requests.get(server.url, params={"action": "fetch", "q": "cut"})
        assert "Content-Disposition" not in reply.headers, reply.content[:100]
        assert queue_contents(data_dir, "cut") == []
        assert list((data_dir / "queues" / "temp").iterdir()) == []
        after = requests.get(server.url, params={"action": "publish", "q": "cut", "msg": "ok"})
        assert after.json()["message"] == "Message published."  # the worker goes on
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("params", "data", "headers"),
    [
        ({"action": "publish", "q": "quick", "msg": "m"}, None, {}),
        ({}, {"action": "publish", "q": "quick", "msg": "m"}, {}),
        ({"action": "publish", "q": "quick"}, b"m", RAW),
    ],
    ids=["url", "form", "raw-body"],
)
def test_a_publish_needs_no_thread_on_the_loop(
    tmp_path: Path, params: dict[str, str], data: Any, headers: dict[str, str]
) -> None:
    """One request thread, held by an upload that has not finished arriving (a chunked
    body is read by a thread): a publish of any of the three kinds is still answered,
    from the loop."""
    server = ApiServer(
        tmp_path / "data", workers=1, threads=1, env={"ZOSCII_API_SERVER": "loop"}
    ).start()
    try:
        with socket.create_connection(("127.0.0.1", server.port)) as held:
            held.sendall(
                b"POST /?action=publish&q=slow HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                b"5\r\nfirst\r\n"
            )
            time.sleep(0.3)  # its thread now waits for the rest of the body
            reply = requests.post(server.url, params=params, data=data, headers=headers, timeout=5)
            assert reply.json()["message"] == "Message published."
            held.sendall(b"7\r\n second\r\n0\r\n\r\n")  # the held upload ends: answered too
            assert held.recv(65536).startswith(b"HTTP/1.1 200")
        assert queue_contents(server.data_dir, "quick")[0][1] == b"m"
        assert queue_contents(server.data_dir, "slow")[0][1] == b"first second"
    finally:
        server.stop()


def test_the_loop_server_parses_with_gunicorns_c_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    """``http_parser = "auto"`` (services/api/gunicorn.conf.py) with gunicorn_h1c installed:
    the loop server's protocol, a subclass of gunicorn's, gets the C parser as gunicorn's
    own does. gunicorn keeps its check's answer on the class it was asked through and reads
    it from the base class: asked through the subclass, it took the Python parser."""
    for name, value in [("_h1c_available", None), ("_h1c_has_limits", False)]:
        monkeypatch.setattr(ASGIProtocol, name, value)  # as in a new worker: not yet checked
    monkeypatch.setattr(ASGIProtocol, "_h1c_protocol_class", None)
    protocol = HeadDeadline.__new__(HeadDeadline)  # the choice reads only the configuration
    protocol.cfg = Config()
    protocol.cfg.set("http_parser", "auto")
    protocol._setup_callback_parser()
    assert isinstance(protocol._callback_parser, gunicorn_h1c.H1CProtocol)


@pytest.mark.parametrize("server", ["loop", "threads"])
def test_a_request_line_too_long_is_refused_after_an_empty_line_too(
    tmp_path: Path, server: str
) -> None:
    """RFC 9112 lets a client send an empty line before its request line. It does not
    lift the request line's limit (8190 bytes, gunicorn.conf.py): gunicorn_h1c 0.6.9,
    gunicorn's C parser, did not measure a request line after one, so the loop server
    read a request line of any size into memory and answered it."""
    api = ApiServer(tmp_path / "data", workers=1, env={"ZOSCII_API_SERVER": server}).start()
    try:
        for lead, size in [(b"", 9_000), (b"\r\n", 9_000), (b"\r\n", 1 << 20)]:
            with socket.create_connection(("127.0.0.1", api.port), timeout=10) as sock:
                line = b"GET /?action=scan&pad=" + b"a" * size + b" HTTP/1.1\r\n"
                try:
                    sock.sendall(lead + line + b"Host: x\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass  # refused before the rest was read: its answer is waiting
                status = sock.recv(4096).split(b"\r\n", 1)[0]
            # 414; a head of a megabyte is also over the head's limit: 431 (threads)
            assert status.split(b" ")[1] in (b"414", b"431"), (lead, size, status)
        with socket.create_connection(("127.0.0.1", api.port), timeout=10) as sock:
            sock.sendall(b"\r\nGET /?action=scan HTTP/1.1\r\nHost: x\r\n\r\n")  # allowed
            assert sock.recv(4096).startswith(b"HTTP/1.1 200 OK")
    finally:
        api.stop()
