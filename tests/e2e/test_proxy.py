"""The proxy in front of the api (issue 15), with the shipped docker-compose.yml: the
``proxy`` and ``api`` services started with the compose CLI under a project of their own.

* Hundreds of connections that send half a request head and stop are held by nginx, not
  by gunicorn's threads: while they are open, publishes through the proxy all succeed
  (none times out), and nginx reports them as connections it is still reading.
* A message of several MiB (spooled to disk by nginx) arrives byte for byte; bodies over
  the proxy's limit get the api's JSON envelope with 413, from nginx itself.
* Query strings (queue names, GET messages) stay out of the proxy's access log, /metrics
  is not reachable through it, and the request id crosses it.

No timing thresholds: the figures are for bench/slow_clients.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import pytest
import requests
from docker.models.containers import Container

from tests.e2e import mq
from tests.e2e.compose_cli import compose_command, run_compose
from tests.e2e.compose_spec import COMPOSE_FILE
from tests.e2e.stack import wait_healthy
from tests.e2e.test_compose import free_ports, published_host, remove_project
from tests.support.e2e_run import E2E, image_tag_env

log = logging.getLogger(__name__)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"
HALF_OPEN = 300  # connections holding half a request head; the api has 2 x 32 threads
PUBLISHES = 60
MAX_MESSAGE = 16 << 20  # the proxy then takes bodies up to 32 MiB
T = TypeVar("T")
HALF_HEAD = b"POST /?action=publish&q=slowloris HTTP/1.1\r\nHost: mq\r\nContent-Le"


@pytest.fixture(scope="module")
def proxied(e2e: E2E, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """proxy + api from docker-compose.yml; yields the proxy's URL and the containers."""
    compose = compose_command()
    project = f"zoscii-e2e-proxy-{e2e.run_id}"
    api_port, direct_port, live_port = free_ports(3)  # live: the proxy's dependency too
    env_file = tmp_path_factory.mktemp("proxy") / "compose.env"
    settings = {
        **image_tag_env(),
        "ZOSCII_API_PORT": api_port,
        "ZOSCII_API_DIRECT_PORT": direct_port,
        "ZOSCII_LIVE_DIRECT_PORT": live_port,
        "ZOSCII_MAX_MESSAGE_BYTES": MAX_MESSAGE,
        # longer than the test: the half-sent heads must still be open at its end
        "ZOSCII_PROXY_HEADER_TIMEOUT_SECONDS": 300,
    }
    env_file.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    base = [*compose, "-p", project, "--env-file", str(env_file), "-f", str(COMPOSE_FILE)]

    selector = {"label": f"{PROJECT_LABEL}={project}"}
    try:
        # the proxy and the api, its dependency
        run_compose(base, "up", "-d", "--no-build", "proxy", timeout=300)
        containers = e2e.client.containers.list(all=True, filters=selector)
        by_service = {c.labels[SERVICE_LABEL]: c for c in containers}
        assert set(by_service) == {"proxy", "api", "live"}, sorted(by_service)
        wait_healthy(containers, timeout=240)
        url = f"http://{published_host(by_service['proxy'], api_port)}:{api_port}"
        yield {"url": url, "proxy": by_service["proxy"], "api": by_service["api"]}
    finally:
        try:
            run_compose(base, "down", "-v", timeout=300)
        finally:
            remove_project(e2e.client, project)


def until(read: Callable[[], T], done: Callable[[T], bool], seconds: float = 10) -> T:
    """``read()`` again until ``done`` says yes or ``seconds`` pass; the last value read
    (the caller asserts on it)."""
    deadline = time.monotonic() + seconds
    while not done(value := read()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return value


def nginx_status(proxy: Container) -> dict[str, int]:
    """nginx's stub_status counters, from inside the container (loopback-only port)."""
    result = proxy.exec_run(["/usr/local/bin/zoscii-proxy-health", "status"])
    text = result.output.decode()
    assert result.exit_code == 0, text
    counts = {k.lower(): int(v) for k, v in re.findall(r"(Reading|Writing|Waiting): (\d+)", text)}
    counts["active"] = int(re.search(r"Active connections: (\d+)", text).group(1))
    return counts


@contextlib.contextmanager
def half_sent_heads(host: str, port: int, count: int) -> Iterator[list[socket.socket]]:
    """``count`` connections that each sent the start of a request head, then nothing."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.create_connection((host, port), timeout=30)
            sock.sendall(HALF_HEAD)
            sockets.append(sock)
        yield sockets
    finally:
        for sock in sockets:
            sock.close()


def still_open(sock: socket.socket) -> bool:
    """No answer and no close from the server yet."""
    sock.setblocking(False)
    try:
        return sock.recv(1) == b"x"  # b"": closed; data: an answer
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.setblocking(True)


def test_half_sent_request_heads_do_not_hold_back_publishes(proxied: dict) -> None:
    url: str = proxied["url"]
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with half_sent_heads(host, int(port), HALF_OPEN) as sockets:
        # nginx holds them, reading (once it has accepted the last ones connected)
        status = until(lambda: nginx_status(proxied["proxy"]), lambda s: s["reading"] >= HALF_OPEN)
        assert status["reading"] >= HALF_OPEN, status

        def publish(number: int) -> str:
            with requests.Session() as http:
                body = mq.payload("proxied", number, 1024)
                try:
                    mq.publish_raw(http, url, "proxied", body, 1)
                except requests.Timeout as exc:  # mq's 30 s: a held-back publish
                    return f"timed out: {exc}"
                return "ok"

        with ThreadPoolExecutor(max_workers=8) as pool:
            outcomes = list(pool.map(publish, range(PUBLISHES)))
        assert outcomes == ["ok"] * PUBLISHES, [o for o in outcomes if o != "ok"][:3]
        assert all(still_open(sock) for sock in sockets)  # held all along, not cut
    with requests.Session() as http:
        got = mq.bodies(mq.drain(http, url, "proxied"))
    assert sorted(got) == sorted(mq.payload("proxied", n, 1024) for n in range(PUBLISHES))


def test_a_large_message_crosses_the_proxy_byte_for_byte(proxied: dict) -> None:
    url: str = proxied["url"]
    message = os.urandom(12 << 20) + bytes(range(256))  # spooled to disk by nginx
    with requests.Session() as http:
        mq.publish_raw(http, url, "large", message, 1)
        got = mq.drain(http, url, "large")
        assert [hashlib.sha256(b).hexdigest() for b in mq.bodies(got)] == [
            hashlib.sha256(message).hexdigest()
        ]
        # over the api's limit but within the proxy's: the api's own 413
        reply = http.post(
            f"{url}/",
            params={"action": "publish", "q": "large"},
            data=b"m" * (MAX_MESSAGE + 1),
            headers={"Content-Type": "application/octet-stream"},
            timeout=60,
        )
        assert reply.status_code == 413 and mq.envelope(reply)["error"], reply.content[:200]
        # over the proxy's limit (max + 16 MiB): refused by nginx, same envelope
        reply = http.post(
            f"{url}/",
            params={"action": "publish", "q": "large"},
            data=b"m" * (MAX_MESSAGE + (16 << 20) + 1),
            headers={"Content-Type": "application/octet-stream"},
            timeout=60,
        )
        assert reply.status_code == 413 and mq.envelope(reply)["error"], reply.content[:200]
        assert len(mq.drain(http, url, "large")) == 1


def test_no_query_strings_in_the_log_no_metrics_and_the_request_id(proxied: dict) -> None:
    url: str = proxied["url"]
    secret_queue, secret_message = "q7c1b9e3secret", b"msg-5f2d4a-secret"
    with requests.Session() as http:
        mq.publish_get(http, url, secret_queue, secret_message, 1)
        reply = http.get(
            f"{url}/",
            params={"action": "fetch", "q": secret_queue},
            headers={"X-Request-ID": "e2e-proxy-1"},
            timeout=30,
        )
        assert reply.content == secret_message
        assert reply.headers["X-Request-ID"] == "e2e-proxy-1"  # the api got the client's id
        # a body over 128 KiB goes to nginx's spool: its [warn] about that named the whole
        # request line, query string and all (issue 29)
        mq.publish_raw(http, url, secret_queue, os.urandom(200 << 10), 1)
        metrics = http.get(f"{url}/metrics", timeout=30)
        assert metrics.status_code == 404 and mq.envelope(metrics)["error"] == "Not found."
    # until the request's log line has reached docker
    logs = until(
        lambda: proxied["proxy"].logs().decode("utf-8", "replace"),
        lambda text: '"request_id":"e2e-proxy-1"' in text,
    )
    assert '"request_id":"e2e-proxy-1"' in logs, logs[-2000:]
    assert secret_queue not in logs and "5f2d4a" not in logs, logs[-2000:]
