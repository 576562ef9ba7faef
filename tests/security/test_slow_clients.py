"""Slow clients against real gunicorn: a trickled head or body must not hold a thread.

Plain gthread reads a request with a blocking socket and no timeout once its first byte
is in; these tests fail there (the healthz request never gets a thread). The api's
worker and body deadlines (zoscii_api.deadlines) cut such clients with a 408.

One worker with two threads, so two slow clients would hold every thread.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import requests

from tests.security.figures import TALLY
from tests.security.rawhttp import RawReply, connect, read_all

SLOW = {
    "ZOSCII_HEADER_TIMEOUT_SECONDS": "1",
    "ZOSCII_BODY_TIMEOUT_SECONDS": "1",
    "ZOSCII_BODY_MIN_RATE": "1000",
}
GIVE_UP = 60.0  # a slow client that is never cut stops here, so the test cannot hang


class Trickler(threading.Thread):
    """Sends ``head`` then one byte of ``drip`` every 0.3 s until the server cuts it."""

    def __init__(
        self, port: int, head: bytes, drip: Callable[[int], bytes], give_up: float = GIVE_UP
    ) -> None:
        super().__init__(daemon=True)
        self.port, self.head, self.drip, self.give_up = port, head, drip, give_up
        self.sent_drips = 0
        self.holding = threading.Event()  # a drip interval into its request (or cut before)
        self.cut = threading.Event()
        self.reply = RawReply(b"")

    def run(self) -> None:
        sock = connect(self.port, timeout=self.give_up)
        stop_at = time.monotonic() + self.give_up
        with sock:
            sock.sendall(self.head)
            try:
                while time.monotonic() < stop_at:
                    sock.sendall(self.drip(self.sent_drips))
                    self.sent_drips += 1
                    if self.sent_drips == 2:
                        self.holding.set()
                    if _readable(sock, 0.3):  # the server answered or closed
                        break
            except OSError:
                pass
            self.reply = RawReply(read_all(sock))
            self.cut.set()
            self.holding.set()


def _readable(sock: socket.socket, timeout: float) -> bool:
    import select

    ready, _, _ = select.select([sock], [], [], timeout)
    return bool(ready)


def test_a_trickled_request_head_is_cut_and_frees_the_thread(tmp_path: Path, servers) -> None:
    server = servers(tmp_path / "data", workers=1, threads=2, env=SLOW)
    head = b"GET /?action=scan HTTP/1.1\r\nHost: x\r\n"
    tricklers = [Trickler(server.port, head, lambda n: b"X-Slow: y\r\n"[n % 11 : n % 11 + 1])]
    tricklers.append(Trickler(server.port, head, lambda n: b"a"))
    for trickler in tricklers:
        trickler.start()
    for trickler in tricklers:  # both hold a thread now: the worker's two
        assert trickler.holding.wait(GIVE_UP)
    reply = requests.get(server.url + "healthz", timeout=GIVE_UP)
    assert reply.status_code == 200
    for trickler in tricklers:
        assert trickler.cut.wait(GIVE_UP)
        assert trickler.reply.status == 408, trickler.reply.raw[:200]
        assert "too slow" in trickler.reply.envelope()["error"]
        assert trickler.sent_drips >= 2  # it was still sending when it was cut
    assert requests.get(server.url, params={"action": "scan"}).status_code == 200
    TALLY["slow clients: cut"] += len(tricklers)


def test_under_the_loop_a_trickled_head_is_cut_and_holds_no_thread(
    tmp_path: Path, servers
) -> None:
    """ZOSCII_API_SERVER=loop: more trickling heads than the worker has threads; a
    publish, a fetch (in a thread) and /healthz are all answered meanwhile, and each
    trickler is cut with a 408 at the head deadline (``gunicorn_worker.HeadDeadline``;
    gunicorn alone never cut a connection's first head)."""
    env = {**SLOW, "ZOSCII_API_SERVER": "loop"}
    server = servers(tmp_path / "data", workers=1, threads=2, env=env)
    head = b"GET /?action=scan HTTP/1.1\r\nHost: x\r\n"
    tricklers = [Trickler(server.port, head, lambda n: b"a") for _ in range(6)]
    for trickler in tricklers:
        trickler.start()
    for trickler in tricklers:
        assert trickler.holding.wait(GIVE_UP)
    published = requests.get(server.url, params={"action": "publish", "q": "l", "msg": "m"})
    fetched = requests.get(server.url, params={"action": "fetch", "q": "l"})
    assert published.json()["message"] == "Message published." and fetched.content == b"m"
    assert requests.get(server.url + "healthz", timeout=GIVE_UP).status_code == 200
    for trickler in tricklers:
        assert trickler.cut.wait(GIVE_UP)
        assert trickler.reply.status == 408, trickler.reply.raw[:200]
        assert "too slow" in trickler.reply.envelope()["error"]
        assert 2 <= trickler.sent_drips < 20  # still sending at the cut, cut near 1 s
    TALLY["slow clients: cut"] += len(tricklers)


def test_under_the_loop_a_later_head_on_a_connection_has_the_deadline_too(
    tmp_path: Path, servers
) -> None:
    """A keep-alive connection idle longer than the head deadline after its first
    request is not cut for it (gunicorn's keep-alive is the idle limit); its next head,
    once it starts, must be whole within the deadline."""
    env = {**SLOW, "ZOSCII_API_SERVER": "loop"}
    server = servers(tmp_path / "data", workers=1, threads=2, env=env)
    with connect(server.port, timeout=GIVE_UP) as sock:
        for _ in range(2):
            sock.sendall(b"GET /?action=scan HTTP/1.1\r\nHost: x\r\n\r\n")
            assert _read_one(sock).startswith(b"HTTP/1.1 200")
            time.sleep(1.5)  # idle: longer than the head deadline, shorter than keep-alive
        sock.sendall(b"GET /?action=scan HTTP/1.1\r\nHost: x\r\n")
        drips, reply = _drip_until_answered(sock)
    assert reply.status == 408, reply.raw[:200]
    assert 2 <= drips < 20


def test_under_the_loop_a_head_sent_during_a_long_poll_is_timed_after_its_answer(
    tmp_path: Path, servers
) -> None:
    """A head that starts while the connection's last request is still being answered (a
    fetch waiting for a message) is not cut in the middle of that answer: the fetch is
    answered first, then the trickled head gets its 408."""
    env = {**SLOW, "ZOSCII_API_SERVER": "loop"}
    # 8 threads: a worker lets a fetch wait only while 4 of its threads stay free
    server = servers(tmp_path / "data", workers=1, threads=8, env=env)
    requests.get(server.url, params={"action": "publish", "q": "w", "msg": "first"})
    first = requests.get(server.url, params={"action": "fetch", "q": "w"})
    after = first.headers["Content-Disposition"].split('"')[1]
    waiting = f"GET /?action=fetch&q=w&after={after}&wait=3 HTTP/1.1\r\nHost: x\r\n\r\n"
    with connect(server.port, timeout=GIVE_UP) as sock:
        started = time.monotonic()
        sock.sendall(waiting.encode())
        time.sleep(0.5)
        sock.sendall(b"GET /?action=scan HTTP/1.1\r\nHost: x\r\n")
        while time.monotonic() - started < 2.5:  # past the head deadline, still waiting
            try:
                sock.sendall(b"a")
            except OSError as exc:
                pytest.fail(f"cut while its last request was still being answered: {exc}")
            time.sleep(0.3)
        answered = _read_one(sock)
        assert time.monotonic() - started >= 2.9  # the fetch waited its 3 s
        assert not answered.startswith(b"HTTP/1.1 408"), answered[:200]
        drips, reply = _drip_until_answered(sock)
    assert reply.status == 408, reply.raw[:200]
    assert drips < 20


def _drip_until_answered(sock: socket.socket) -> tuple[int, RawReply]:
    """Send a byte every 0.3 s until the server answers (at most 100); how many were
    sent, and everything the server sent until it closed."""
    drips = 0
    while drips < 100 and not _readable(sock, 0.3):
        sock.sendall(b"a")
        drips += 1
    return drips, RawReply(read_all(sock))


def _read_one(sock: socket.socket) -> bytes:
    """One whole answer with a Content-Length, read from a keep-alive connection."""
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    body = b""
    while len(body) < length:
        body += sock.recv(length - len(body))
    return head + body


@pytest.mark.parametrize("kind", ["threads", "loop"])
def test_a_trickled_body_is_cut_with_408_and_leaves_nothing(
    tmp_path: Path, servers, kind: str
) -> None:
    """Under the loop server (zoscii_api.asgi) the first body is read on the event loop
    (it declares a small length), the chunked one by a thread: both under the deadline."""
    data_dir = tmp_path / "data"
    server = servers(data_dir, workers=1, threads=2, env={**SLOW, "ZOSCII_API_SERVER": kind})
    heads = [
        (
            b"POST /?action=publish&q=slow HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/octet-stream\r\nContent-Length: 100000\r\n\r\n"
        ),
        (
            b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
            b"Content-Type: application/x-www-form-urlencoded\r\n\r\n"
            b"15\r\naction=publish&q=slow\r\n"
        ),
    ]
    drips = [lambda n: b"m" * 100, lambda n: b"5\r\n&msg=\r\n" if n == 0 else b"1\r\nm\r\n"]
    tricklers = [Trickler(server.port, h, d) for h, d in zip(heads, drips, strict=True)]
    for trickler in tricklers:
        trickler.start()
    for trickler in tricklers:
        assert trickler.holding.wait(GIVE_UP)
    assert requests.get(server.url + "healthz", timeout=GIVE_UP).status_code == 200
    for trickler in tricklers:
        assert trickler.cut.wait(GIVE_UP)
        assert trickler.reply.status == 408, trickler.reply.raw[:300]
        assert "Request body too slow" in trickler.reply.envelope()["error"]
    assert not (data_dir / "queues" / "slow").exists() or not any(
        (data_dir / "queues" / "slow").iterdir()
    )
    assert list((data_dir / "queues" / "temp").iterdir()) == []
    TALLY["slow clients: cut"] += len(tricklers)


@pytest.mark.slow  # 2 s of trickling (test_deadlines: the same rule on a fake clock)
@pytest.mark.parametrize("kind", ["threads", "loop"])
def test_a_slow_but_steady_upload_gets_through(tmp_path: Path, servers, kind: str) -> None:
    """The body deadline grows with what arrives: 20 KB at 10 KB/s takes twice the
    1 s timeout and is fine, since it is well above the minimum rate."""
    data_dir = tmp_path / "data"
    server = servers(data_dir, workers=1, threads=2, env={**SLOW, "ZOSCII_API_SERVER": kind})
    payload = bytes(range(256)) * 80

    def pieces():
        for start in range(0, len(payload), 1000):
            time.sleep(0.1)
            yield payload[start : start + 1000]

    reply = requests.post(
        server.url,
        params={"action": "publish", "q": "steady"},
        data=pieces(),
        headers={"Content-Type": "application/octet-stream"},
        timeout=GIVE_UP,
    )
    assert reply.status_code == 200 and reply.json()["error"] == "", reply.text
    fetched = requests.get(server.url, params={"action": "fetch", "q": "steady"})
    assert fetched.content == payload


@pytest.mark.slow  # 2 s idle between two requests
def test_an_idle_keepalive_connection_is_not_cut_by_the_head_deadline(
    tmp_path: Path, servers
) -> None:
    """The deadline starts when a thread takes a request, not when the connection opened."""
    server = servers(tmp_path / "data", workers=1, threads=2, env=SLOW)
    request = b"GET /?action=scan HTTP/1.1\r\nHost: x\r\n\r\n"
    with connect(server.port) as sock:
        for number in range(2):
            if number:
                time.sleep(2)  # longer than the head timeout, shorter than keep-alive (5 s)
            sock.sendall(request)
            head = b""
            while b"\r\n\r\n" not in head:
                head += sock.recv(1)
            assert head.startswith(b"HTTP/1.1 200"), head
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            while length:
                length -= len(sock.recv(length))
