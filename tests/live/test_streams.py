"""Streams: Server-Sent Events and WebSocket, from a pointer, live, resumable, bounded."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import time
from pathlib import Path

import pytest
import requests
from websockets.asyncio.client import connect

from tests.support.live_process import LiveProcess
from tests.support.queues import queue_name
from zosciimq.core import DataDir


class Events:
    """A raw SSE reader over a socket (what a browser's EventSource parses)."""

    def __init__(self, live: LiveProcess, queue: str, after: str = "", **headers: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", live.port), timeout=10)
        extra = "".join(f"{k.replace('_', '-')}: {v}\r\n" for k, v in headers.items())
        self.sock.sendall(
            f"GET /?action=stream&q={queue}&after={after} HTTP/1.1\r\nHost: t\r\n"
            f"Accept: text/event-stream\r\n{extra}\r\n".encode()
        )
        self.buffer = b""
        while b"\r\n\r\n" not in self.buffer:
            self.buffer += self.sock.recv(65536)
        self.head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)

    def next(self, timeout: float = 10.0) -> dict[str, str]:
        """The next event's fields (comments skipped), data lines joined with LF."""
        self.sock.settimeout(timeout)
        while True:
            while b"\n\n" not in self.buffer:
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise EOFError(self.buffer)
                self.buffer += chunk
            raw, self.buffer = self.buffer.split(b"\n\n", 1)
            fields: dict[str, str] = {}
            data = []
            for line in raw.decode().split("\n"):
                if line.startswith(":"):
                    continue
                key, _, value = line.partition(": ")
                if key == "data":
                    data.append(value)
                else:
                    fields[key] = value
            if data:
                fields["data"] = "\n".join(data)
            if fields and set(fields) != {"retry"}:
                return fields

    def close(self) -> None:
        self.sock.close()


def test_sse_carries_every_message_with_its_name_text_and_binary(live: LiveProcess) -> None:
    queue = queue_name()
    text = "two lines\nand ünïcode"
    names = live.publish(queue, text.encode(), b"\xff\x00\xfe", b"", b"crlf\r\n")
    events = Events(live, queue)
    try:
        assert b"text/event-stream" in events.head
        got = [events.next() for _ in names]
        assert [e["id"] for e in got] == names
        assert got[0] == {"id": names[0], "data": text}
        assert got[1]["event"] == "binary"
        assert base64.b64decode(got[1]["data"]) == b"\xff\x00\xfe"
        assert got[2] == {"id": names[2], "data": ""}
        assert base64.b64decode(got[3]["data"]) == b"crlf\r\n"  # CR is not SSE text
        (later,) = live.publish(queue, b"live")
        assert events.next() == {"id": later, "data": "live"}
    finally:
        events.close()


def test_sse_resumes_after_last_event_id_without_gap_or_repeat(live: LiveProcess) -> None:
    queue = queue_name()
    names = live.publish(queue, b"1", b"2", b"3", b"4")
    # a browser reconnecting sends the URL it first used and the last id it saw
    events = Events(live, queue, after=names[0], Last_Event_ID=names[2])
    try:
        assert events.next() == {"id": names[3], "data": "4"}
    finally:
        events.close()


def test_websocket_frames_carry_the_name_and_the_bytes(live: LiveProcess) -> None:
    queue = queue_name()
    (first, second) = live.publish(queue, b"\x00binary\xff", b"second")

    async def follow() -> list[bytes]:
        url = f"ws://127.0.0.1:{live.port}/?action=stream&q={queue}&after={first}"
        async with connect(url) as ws:
            got = [await asyncio.wait_for(ws.recv(), 10)]
            await asyncio.to_thread(live.publish, queue, b"third")
            got.append(await asyncio.wait_for(ws.recv(), 10))
            return got  # type: ignore[return-value]

    got = asyncio.run(follow())
    assert got[0] == second.encode() + b"\nsecond"
    name, _, data = got[1].partition(b"\n")
    assert data == b"third" and name.decode() > second


def test_a_large_message_is_announced_and_the_stream_goes_on(tmp_path: Path) -> None:
    DataDir(tmp_path).ensure()
    live = LiveProcess(tmp_path, ZOSCII_LIVE_MAX_INLINE_BYTES="1024").start()
    try:
        queue = queue_name()
        big = os.urandom(5000)
        names = live.publish(queue, big, b"small")
        events = Events(live, queue)
        try:
            notice = events.next()
            assert notice["event"] == "large" and notice["id"] == names[0]
            assert json.loads(notice["data"]) == {"name": names[0], "size": 5000}
            assert events.next() == {"id": names[1], "data": "small"}
        finally:
            events.close()
    finally:
        live.kill()


def test_a_reader_that_does_not_read_is_cut_with_a_reason_and_resumes(tmp_path: Path) -> None:
    DataDir(tmp_path).ensure()
    live = LiveProcess(tmp_path, ZOSCII_LIVE_MAX_PENDING_BYTES=str(64 << 10)).start()
    try:
        queue = queue_name()
        (start,) = live.publish(queue, b"start")
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a tiny window
        sock.connect(("127.0.0.1", live.port))
        sock.sendall(
            f"GET /?action=stream&q={queue}&after={start} HTTP/1.1\r\nHost: t\r\n"
            "Accept: text/event-stream\r\n\r\n".encode()
        )
        live.wait_health("followed_queues", 1)
        time.sleep(0.3)  # caught up: it is a live reader now
        chunk = b"z" * (200 << 10)
        names: list[str] = []
        deadline = time.monotonic() + 30
        while live.metric("zoscii_live_disconnects_total", reason="slow_reader") < 1:
            assert time.monotonic() < deadline, "never disconnected"
            names += live.publish(queue, chunk)
            time.sleep(0.05)
        # everything written before the cut arrives, then the reason, then the end
        sock.settimeout(10)
        raw = b""
        while data := sock.recv(1 << 20):
            raw += data
        sock.close()
        events = raw.split(b"\r\n\r\n", 1)[1].split(b"\n\n")
        ids = [e.split(b"\n")[0][4:].decode() for e in events if e.startswith(b"id: ")]
        assert ids == names[: len(ids)]  # in order, from the first, nothing skipped
        reason = next(e for e in events if e.startswith(b"event: disconnect"))
        document = json.loads(reason.split(b"data: ", 1)[1])
        assert document["code"] == "slow_reader"
        assert document["resume_after"] == (ids[-1] if ids else start)
        # resuming after the last one received gets the rest, from the next one
        resumed = Events(live, queue, after=document["resume_after"])
        try:
            rest = [resumed.next()["id"] for _ in names[len(ids) :]]
            assert ids + rest == names
        finally:
            resumed.close()
    finally:
        live.kill()


def test_access_control_and_cors_apply_to_streams(tmp_path: Path) -> None:
    token = "s3cret-token-for-the-stream-test-0123456789"
    import hashlib

    digest = hashlib.sha256(token.encode()).hexdigest()
    clients = f'[[clients]]\nname = "reader"\ntoken_sha256 = "{digest}"\nread = ["feed*"]\n'
    DataDir(tmp_path).ensure()
    live = LiveProcess(
        tmp_path,
        ZOSCII_AUTH_CLIENTS=clients,
        ZOSCII_CORS_ORIGINS="https://console.example",
    ).start()
    try:
        queue = queue_name("feed")
        (name,) = live.publish(queue, b"secret")
        url = live.url
        params = {"action": "stream", "q": queue}
        sse = {"Accept": "text/event-stream", "Origin": "https://console.example"}
        assert requests.get(url, params=params, headers=sse, timeout=5).status_code == 401
        other = {**params, "q": queue_name("other"), "access_token": token}
        assert requests.get(url, params=other, headers=sse, timeout=5).status_code == 403
        with requests.get(
            url, params={**params, "access_token": token}, headers=sse, stream=True, timeout=5
        ) as response:
            assert response.status_code == 200
            assert response.headers["Access-Control-Allow-Origin"] == "https://console.example"
            lines = response.iter_lines(chunk_size=1)
            assert f"id: {name}".encode() in [next(lines) for _ in range(4)]
        preflight = requests.options(url, headers={"Origin": "https://console.example"}, timeout=5)
        assert preflight.status_code == 204
        assert "Authorization" in preflight.headers["Access-Control-Allow-Headers"]
        elsewhere = requests.get(
            url, params={"action": "fetch", "q": queue, "wait": 1},
            headers={"Authorization": f"Bearer {token}", "Origin": "https://evil.example"},
            timeout=5,
        )  # fmt: skip
        assert elsewhere.content == b"secret"
        assert "Access-Control-Allow-Origin" not in elsewhere.headers
    finally:
        live.kill()


def test_stopping_tells_every_stream_where_to_resume(tmp_path: Path) -> None:
    DataDir(tmp_path).ensure()
    live = LiveProcess(tmp_path).start()
    queue = queue_name()
    (name,) = live.publish(queue, b"x")
    events = Events(live, queue)
    try:
        assert events.next()["id"] == name
        live.wait_health("followed_queues", 1)
        time.sleep(0.2)
        assert live.terminate() == 0
        reason = events.next()
        assert reason["event"] == "disconnect"
        assert json.loads(reason["data"])["resume_after"] == name
    finally:
        events.close()
        live.kill()


def _raw_until(events: Events, seconds: float) -> bytes:
    """Every byte the stream sends for ``seconds`` (comments included)."""
    deadline = time.monotonic() + seconds
    got = events.buffer
    events.buffer = b""
    while (left := deadline - time.monotonic()) > 0:
        events.sock.settimeout(left)
        try:
            chunk = events.sock.recv(65536)
        except TimeoutError:
            break
        if not chunk:
            break
        got += chunk
    return got


@pytest.mark.slow  # waits out heartbeat intervals
def test_heartbeats_go_to_idle_streams_only(tmp_path: Path) -> None:
    """An idle stream hears a comment every interval; one that messages keep busy needs
    none, and gets none (ten thousand of them would be a fan-out of comments)."""
    DataDir(tmp_path).ensure()
    live = LiveProcess(tmp_path, ZOSCII_LIVE_HEARTBEAT_SECONDS="2").start()
    try:
        idle_queue, busy_queue = queue_name(), queue_name()
        (idle_start,) = live.publish(idle_queue, b"0")
        (busy_start,) = live.publish(busy_queue, b"0")
        idle = Events(live, idle_queue, after=idle_start)
        busy = Events(live, busy_queue, after=busy_start)
        try:
            stop = time.monotonic() + 7

            def publish() -> None:
                while time.monotonic() < stop:
                    live.publish(busy_queue, b"m")
                    time.sleep(0.2)

            async def both() -> tuple[bytes, bytes]:
                publishing = asyncio.create_task(asyncio.to_thread(publish))
                got = await asyncio.gather(
                    asyncio.to_thread(_raw_until, idle, 6.5),
                    asyncio.to_thread(_raw_until, busy, 6.5),
                )
                await publishing
                return got[0], got[1]

            idle_bytes, busy_bytes = asyncio.run(both())
            assert idle_bytes.count(b": keep-alive\n\n") >= 2, idle_bytes
            assert busy_bytes.count(b"data: m\n") >= 20, busy_bytes[:200]
            assert b": keep-alive" not in busy_bytes
        finally:
            idle.close()
            busy.close()
    finally:
        live.kill()
