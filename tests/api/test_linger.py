"""The api's worker serves a quick keep-alive client on its thread (zoscii_api.gunicorn_worker):
the next request waits on the socket for a few ms instead of going through the poller,
while enough threads stay free, and a slow client is not waited for again."""

from __future__ import annotations

import http.client
import io
import socket
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlsplit

import pytest

from tests.support.api_server import running_api
from zoscii_api.gunicorn_worker import LINGER_RESERVE, ThreadWorker


class _Conn:
    """What ``_linger`` reads of gunicorn's TConn: the socket and the parser's buffer."""

    def __init__(self, sock: socket.socket, buffered: bytes = b"") -> None:
        self.sock = sock
        self.parser = SimpleNamespace(unreader=SimpleNamespace(buf=io.BytesIO(buffered)))


def _worker(*, linger_ms: int = 50, threads: int = 8, busy: int = 1) -> ThreadWorker:
    worker = ThreadWorker.__new__(ThreadWorker)  # no gunicorn arbiter: only what _linger uses
    worker.linger_ms, worker.alive, worker._busy = linger_ms, True, busy
    worker.cfg = SimpleNamespace(threads=threads)
    return worker


@pytest.fixture
def pair():
    ours, theirs = socket.socketpair()
    yield ours, theirs
    ours.close()
    theirs.close()


def test_a_request_arriving_within_the_linger_is_served_on_the_thread(pair) -> None:
    ours, theirs = pair
    threading.Timer(0.01, theirs.sendall, (b"GET / HTTP/1.1\r\n",)).start()
    assert _worker(linger_ms=2000)._linger(_Conn(ours)) is True


def test_a_client_that_does_not_come_back_goes_to_the_poller(pair) -> None:
    ours, _ = pair
    conn = _Conn(ours)
    started = time.monotonic()
    assert _worker(linger_ms=50)._linger(conn) is False
    assert time.monotonic() - started >= 0.045  # it did wait the linger out
    assert conn.zoscii_parked is not None  # and noted when it was parked


def test_a_slow_client_is_not_waited_for_again_until_it_is_quick(pair) -> None:
    ours, theirs = pair
    worker = _worker(linger_ms=20)
    conn = _Conn(ours)
    conn.zoscii_parked = time.monotonic() - 1.0  # came back a second after parking
    worker._came_back(conn)
    assert conn.zoscii_slow is True
    theirs.sendall(b"x")  # data is there, yet a slow client is not polled for
    assert worker._linger(conn) is False
    conn.zoscii_parked = time.monotonic()  # now it came back at once
    worker._came_back(conn)
    assert conn.zoscii_slow is False and worker._linger(conn) is True


def test_threads_are_kept_free_for_others(pair) -> None:
    ours, theirs = pair
    theirs.sendall(b"GET / HTTP/1.1\r\n")
    busy = 8 - LINGER_RESERVE + 1
    assert _worker(threads=8, busy=busy)._linger(_Conn(ours)) is False


def test_bytes_read_ahead_count_as_arrived(pair) -> None:
    ours, _ = pair
    assert _worker(linger_ms=10)._linger(_Conn(ours, b"GET / HTTP/1.1\r\n")) is True


def test_off_and_stopping_workers_never_linger(pair) -> None:
    ours, theirs = pair
    theirs.sendall(b"x")
    assert _worker(linger_ms=0)._linger(_Conn(ours)) is False
    stopping = _worker()
    stopping.alive = False
    assert stopping._linger(_Conn(ours)) is False


@pytest.mark.slow
def test_keep_alive_clients_beyond_the_lingering_threads_are_all_served(tmp_path: Path) -> None:
    """5 threads leave one to linger: 6 keep-alive clients taking turns are all answered
    without waiting for another's linger, and every publish lands once, in order."""
    env = {"ZOSCII_KEEPALIVE_LINGER_MS": "1000"}  # long: a starved request would show
    with running_api(tmp_path / "data", workers=1, threads=5, env=env) as url:
        port = urlsplit(url).port
        clients = [http.client.HTTPConnection("127.0.0.1", port, timeout=10) for _ in range(6)]
        slowest = 0.0
        for round_ in range(5):
            for number, conn in enumerate(clients):
                started = time.monotonic()
                conn.request("GET", f"/?action=publish&q=k{number}&msg={round_}")
                reply = conn.getresponse()
                assert reply.status == 200, reply.read()
                reply.read()
                slowest = max(slowest, time.monotonic() - started)
        # Each client's next request comes after five others': with every thread
        # lingering, the sixth client would wait for a 1 s linger to run out.
        assert slowest < 0.6, f"a request waited {slowest:.2f} s for a thread"
        for number, conn in enumerate(clients):
            got = []
            after = ""
            while True:
                conn.request("GET", f"/?action=fetch&q=k{number}&after={after}")
                reply = conn.getresponse()
                data = reply.read()
                disposition = reply.getheader("Content-Disposition")
                if not disposition:
                    break
                after = disposition.split('"')[1]
                got.append(data)
            assert got == [str(r).encode() for r in range(5)]
            conn.close()
