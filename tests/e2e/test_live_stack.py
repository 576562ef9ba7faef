"""The live service behind the compose proxy, as deployed (issue 25): docker-compose.yml's
``proxy``, ``api`` and ``live`` services under a project of their own.

* A waiting fetch through the proxy is answered by the live service (its metrics count
  it; the api's do not), woken by a publish through the same proxy; a fetch without
  ``wait`` and every publish are still the api's.
* Server-Sent Events and WebSocket streams pass the proxy unbuffered (an event arrives
  while the stream is open) and carry the message's name and bytes.
* The fan-out in small: a couple of hundred readers of each kind through the proxy, every
  message to every reader, once and in order.

No timing thresholds: the figures are for bench/fanout.py.
"""

from __future__ import annotations

import asyncio
import base64
import resource
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import requests
from websockets.asyncio.client import connect

from bench.fanout_readers import Reader, Tally, connect_readers, payload
from tests.e2e.compose_cli import compose_command, run_compose
from tests.e2e.compose_spec import COMPOSE_FILE
from tests.e2e.stack import wait_healthy
from tests.e2e.test_compose import free_ports, published_host, remove_project
from tests.support.e2e_run import E2E, image_tag_env

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"
READERS_PER_KIND = 200
MESSAGES = 10


@pytest.fixture(scope="module")
def stack(e2e: E2E, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    compose = compose_command()
    project = f"zoscii-e2e-live-{e2e.run_id}"
    api_port, direct_port, live_port = free_ports(3)
    env_file = tmp_path_factory.mktemp("live") / "compose.env"
    settings = {
        **image_tag_env(),
        "ZOSCII_API_PORT": api_port,
        "ZOSCII_API_DIRECT_PORT": direct_port,
        "ZOSCII_LIVE_DIRECT_PORT": live_port,
    }
    env_file.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    base = [*compose, "-p", project, "--env-file", str(env_file), "-f", str(COMPOSE_FILE)]
    selector = {"label": f"{PROJECT_LABEL}={project}"}
    try:
        run_compose(base, "up", "-d", "--no-build", "proxy", timeout=300)
        containers = e2e.client.containers.list(all=True, filters=selector)
        by_service = {c.labels[SERVICE_LABEL]: c for c in containers}
        assert set(by_service) == {"proxy", "api", "live"}, sorted(by_service)
        wait_healthy(containers, timeout=240)
        host = published_host(by_service["proxy"], api_port)
        yield {
            "url": f"http://{host}:{api_port}/",
            "host": host,
            "port": str(api_port),
            "api": f"http://127.0.0.1:{direct_port}/",
            "live": f"http://127.0.0.1:{live_port}/",
        }
    finally:
        try:
            run_compose(base, "down", "-v", timeout=300)
        finally:
            remove_project(e2e.client, project)


def counted(url: str, family: str, queue: str) -> float:
    text = requests.get(url + "metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith(f'{family}{{queue="{queue}"}} '):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def publish(url: str, queue: str, data: bytes) -> None:
    reply = requests.post(url, params={"action": "publish", "q": queue}, data=data, timeout=30)
    assert reply.status_code == 200 and reply.json()["error"] == "", reply.text


def last_name(url: str, queue: str) -> str:
    pointer = ""
    while True:
        reply = requests.get(url, params={"action": "fetch", "q": queue, "after": pointer},
                             timeout=30)  # fmt: skip
        if reply.headers.get("Content-Type") != "application/octet-stream":
            return pointer
        pointer = reply.headers["Content-Disposition"].split('"')[1]


def test_a_waiting_fetch_through_the_proxy_is_the_live_services(stack: dict[str, str]) -> None:
    url, queue = stack["url"], "e2e-live-poll"
    publish(url, queue, b"first")
    pointer = last_name(url, queue)
    threading.Timer(1.0, lambda: publish(url, queue, b"\x00second\xff")).start()
    reply = requests.get(
        url, params={"action": "fetch", "q": queue, "after": pointer, "wait": 20}, timeout=40
    )
    assert reply.content == b"\x00second\xff"
    assert counted(stack["live"], "zoscii_live_messages_fetched_total", queue) == 1
    # the fetches without wait (last_name's) were the api's, the waiting one was not
    assert counted(stack["api"], "zoscii_api_messages_fetched_total", queue) == 1


def sse(url: str, queue: str) -> requests.Response:
    """A Server-Sent Events stream of ``queue`` from its first message (a context manager)."""
    return requests.get(
        url,
        params={"action": "stream", "q": queue},
        headers={"Accept": "text/event-stream"},
        stream=True,
        timeout=30,
    )


def test_streams_pass_the_proxy_unbuffered(stack: dict[str, str]) -> None:
    url, queue = stack["url"], "e2e-live-stream"
    publish(url, queue, b"backlog")
    with sse(url, queue) as events:
        assert events.headers["Content-Type"].startswith("text/event-stream")
        lines = events.iter_lines(chunk_size=1)
        assert b"data: backlog" in [next(lines) for _ in range(5)]
        threading.Timer(0.5, lambda: publish(url, queue, b"live")).start()
        seen = [next(lines) for _ in range(3)]  # no buffering: it arrives while open
        assert b"data: live" in seen, seen

    async def websocket() -> bytes:
        ws_url = url.replace("http://", "ws://") + f"?action=stream&q={queue}"
        async with connect(ws_url) as ws:
            await asyncio.wait_for(ws.recv(), 20)  # backlog
            await asyncio.wait_for(ws.recv(), 20)  # live
            await asyncio.to_thread(publish, url, queue, b"\xffover a websocket")
            return await asyncio.wait_for(ws.recv(), 20)  # type: ignore[return-value]

    frame = asyncio.run(websocket())
    assert frame.partition(b"\n")[2] == b"\xffover a websocket"


def test_events_far_larger_than_the_proxys_stream_buffer_pass_whole(
    stack: dict[str, str],
) -> None:
    """The proxy relays a stream through a 1 KiB buffer: a 300 KiB binary message
    arrives byte for byte, by SSE (base64) and by WebSocket, and the next one after it."""
    url, queue = stack["url"], "e2e-live-large-events"
    big = bytes(range(256)) * 1200  # 300 KiB, not UTF-8
    publish(url, queue, big)
    publish(url, queue, b"after")
    with sse(url, queue) as events:
        fields: list[tuple[bytes, bytes]] = []
        lines = events.iter_lines(chunk_size=8192)
        while len([f for f in fields if f[0] == b"data"]) < 2:
            name, _, value = next(lines).partition(b": ")
            fields.append((name, value))
    data = [value for name, value in fields if name == b"data"]
    assert (b"event", b"binary") in fields
    assert base64.b64decode(data[0]) == big
    assert data[1] == b"after"

    async def websocket() -> list[str | bytes]:
        async with connect(url.replace("http://", "ws://") + f"?action=stream&q={queue}",
                           max_size=None) as ws:  # fmt: skip
            return [await asyncio.wait_for(ws.recv(), 20) for _ in range(2)]

    frames = asyncio.run(websocket())
    assert [frame.partition(b"\n")[2] for frame in frames] == [big, b"after"]


def test_hundreds_of_readers_through_the_proxy_get_everything(stack: dict[str, str]) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 3 * READERS_PER_KIND + 256
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))
    url, queue = stack["url"], "e2e-live-fanout"
    publish(url, queue, payload(0))
    start = last_name(url, queue)
    host, port = stack["host"], int(stack["port"])

    async def run() -> dict[str, Tally]:
        tallies = {kind: Tally(READERS_PER_KIND) for kind in ("longpoll", "sse", "websocket")}
        readers: list[Reader] = []
        for kind, tally in tallies.items():
            tally.measuring = True
            readers += await connect_readers(kind, READERS_PER_KIND, host, port, queue, start,
                                             tally)  # fmt: skip
        for number in range(1, MESSAGES + 1):
            await asyncio.to_thread(publish, url, queue, payload(number))
        deadline = time.monotonic() + 60
        while any(r.received < MESSAGES for r in readers) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        for reader in readers:
            reader.close()
        return tallies

    for kind, tally in asyncio.run(run()).items():
        assert tally.errors == [], (kind, tally.errors[:3])
        assert tally.order_errors == 0 and tally.gaps == 0, kind
        assert tally.reached_all(list(range(1, MESSAGES + 1))) == MESSAGES, kind


def test_the_proxy_still_takes_publishes_whole_before_the_api(stack: dict[str, str]) -> None:
    """A publish whose body stops halfway holds no api thread: the proxy reads it; the
    other publishes go on (the routing to the live service left publishes as they were)."""
    host, port = stack["host"], int(stack["port"])
    sockets = []
    try:
        for _ in range(100):
            sock = socket.create_connection((host, port), timeout=30)
            sock.sendall(
                b"POST /?action=publish&q=e2e-live-slow HTTP/1.1\r\nHost: mq\r\n"
                b"Content-Length: 1000\r\n\r\nhalf"
            )
            sockets.append(sock)
        for number in range(20):
            publish(stack["url"], "e2e-live-ok", b"%d" % number)
    finally:
        for sock in sockets:
            sock.close()
