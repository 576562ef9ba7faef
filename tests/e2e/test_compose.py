"""The shipped docker-compose.yml itself: ``up -d`` brings all five services (the four
and the proxy in front of the api) to healthy, hardened as documented, the api answers
through the proxy on the public port, internal ports on 127.0.0.1 only, ``down -v`` removes
everything. Uses the compose CLI (``docker compose`` or docker-compose 1.29), as a user
would, with a unique project name and free host ports so it never clashes with a stack
already running here."""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from pathlib import Path

import docker
import docker.errors
import pytest
import requests
from docker.models.containers import Container
from testcontainers.core.config import ConnectionMode
from testcontainers.core.docker_client import DockerClient

from tests.e2e import mq
from tests.e2e.browser import headless_chromium
from tests.e2e.compose_cli import compose_command, run_compose
from tests.e2e.compose_spec import COMPOSE_FILE
from tests.e2e.conftest import E2E, image_tag_env
from tests.e2e.stack import wait_healthy

log = logging.getLogger(__name__)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

SERVICES = {"proxy", "api", "live", "replikate", "claireup", "statissa"}
PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"
UP_TIMEOUT = 240  # seconds to healthy; the shipped probe interval is 15 s


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def published_host(container: Container) -> str:
    """Where the tests reach a port the container publishes on all interfaces (the same
    rules testcontainers applies to its own containers)."""
    tc = DockerClient()
    mode = tc.get_connection_mode()
    if mode == ConnectionMode.gateway_ip:
        return tc.gateway_ip(container.id)
    if mode == ConnectionMode.docker_host:
        return tc.host()
    pytest.skip("bridge_ip connection mode: published host ports are not reachable")


def remove_project(client: docker.DockerClient, project: str) -> None:
    """If ``down -v`` failed: whatever the project left."""
    selector = {"label": f"{PROJECT_LABEL}={project}"}
    for container in client.containers.list(all=True, filters=selector):
        with contextlib.suppress(docker.errors.NotFound):
            container.remove(force=True, v=True)
    for net in client.networks.list(filters=selector):
        with contextlib.suppress(docker.errors.NotFound):
            net.remove()
    for volume in client.volumes.list(filters=selector):
        with contextlib.suppress(docker.errors.NotFound):
            volume.remove(force=True)


def check_hardening(container: Container, project: str) -> None:
    attrs = container.attrs
    host, config = attrs["HostConfig"], attrs["Config"]
    name = container.name
    assert host["ReadonlyRootfs"] is True, name
    assert host["CapDrop"] == ["ALL"], (name, host["CapDrop"])
    assert "no-new-privileges:true" in host["SecurityOpt"], (name, host["SecurityOpt"])
    assert "/tmp" in (host.get("Tmpfs") or {}), (name, host.get("Tmpfs"))
    assert config["User"] and config["User"].split(":")[0] not in ("0", "root"), name
    if container.labels[SERVICE_LABEL] == "proxy":  # no data: its spool volume
        spool = [m for m in attrs["Mounts"] if m["Destination"] == "/var/spool/zoscii-proxy"]
        assert [m["Name"] for m in spool] == [f"{project}_zoscii_proxy_spool"], attrs["Mounts"]
        assert not [m for m in attrs["Mounts"] if m["Destination"] == "/data"], name
        return
    data = [m for m in attrs["Mounts"] if m["Destination"] == "/data"]
    assert len(data) == 1 and data[0]["Type"] == "volume", (name, attrs["Mounts"])
    assert data[0]["Name"] == f"{project}_zoscii_data" and data[0]["RW"], (name, data)


def test_compose_up_reaches_healthy_and_down_removes_everything(e2e: E2E, tmp_path: Path) -> None:
    compose = compose_command()
    project = f"zoscii-e2e-{e2e.run_id}"
    api_port, direct_port, stats_port, replikate_port, claireup_port = free_ports(5)
    env_file = tmp_path / "compose.env"
    settings = {
        **image_tag_env(),
        "ZOSCII_API_PORT": api_port,
        "ZOSCII_API_DIRECT_PORT": direct_port,
        "ZOSCII_STATISSA_PORT": stats_port,
        "ZOSCII_REPLIKATE_METRICS_PORT": replikate_port,
        "ZOSCII_CLAIREUP_METRICS_PORT": claireup_port,
    }
    env_file.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    base = [*compose, "-p", project, "--env-file", str(env_file), "-f", str(COMPOSE_FILE)]

    selector = {"label": f"{PROJECT_LABEL}={project}"}
    try:
        run_compose(base, "up", "-d", "--no-build", timeout=300)
        containers = e2e.client.containers.list(all=True, filters=selector)
        assert {c.labels[SERVICE_LABEL] for c in containers} == SERVICES
        assert len(containers) == len(SERVICES)
        took = wait_healthy(containers, timeout=UP_TIMEOUT)
        log.info("all five services healthy after %.1f s", took)

        by_service = {c.labels[SERVICE_LABEL]: c for c in containers}
        for container in containers:
            container.reload()
            check_hardening(container, project)
        bindings = {
            service: by_service[service].attrs["HostConfig"]["PortBindings"][f"{port}/tcp"]
            for service, port in (
                ("proxy", 8080),
                ("api", 8080),
                ("replikate", 9101),
                ("claireup", 9102),
                ("statissa", 9103),
            )
        }
        assert [(b["HostIp"] or "0.0.0.0", b["HostPort"]) for b in bindings["proxy"]] == [
            ("0.0.0.0", str(api_port))
        ]
        internal = {
            "api": direct_port,
            "replikate": replikate_port,
            "claireup": claireup_port,
            "statissa": stats_port,
        }
        for service, port in internal.items():
            assert bindings[service] == [{"HostIp": "127.0.0.1", "HostPort": str(port)}]

        api = f"http://{published_host(by_service['proxy'])}:{api_port}"
        with requests.Session() as http:
            mq.publish_raw(http, api, "compose", mq.ALL_BYTES, 1)
            assert mq.bodies(mq.drain(http, api, "compose")) == [mq.ALL_BYTES]
            assert http.get(f"{api}/metrics", timeout=10).status_code == 404  # not public
            direct = f"http://127.0.0.1:{direct_port}"
            assert mq.bodies(mq.drain(http, direct, "compose")) == [mq.ALL_BYTES]
            assert http.get(f"{direct}/metrics", timeout=10).status_code == 200
            stats = f"http://127.0.0.1:{stats_port}"
            assert http.get(f"{stats}/healthz", timeout=10).status_code == 200
            # the console's fetch counts: statissa reads the api's /metrics over the
            # compose network (http://api:8080/), 2 messages served so far
            assert fetch_counts_in_history(http, stats, "compose") == 2.0
        console_in_a_browser(stats, "compose")
    finally:
        try:
            run_compose(base, "down", "-v", timeout=300)
        finally:
            leftovers = (
                [c.name for c in e2e.client.containers.list(all=True, filters=selector)]
                + [n.name for n in e2e.client.networks.list(filters=selector)]
                + [v.name for v in e2e.client.volumes.list(filters=selector)]
            )
            with contextlib.suppress(docker.errors.NotFound):
                leftovers.append(e2e.client.volumes.get(f"{project}_zoscii_data").name)
            remove_project(e2e.client, project)
    assert not leftovers, f"left behind by down -v: {sorted(set(leftovers))}"


def fetch_counts_in_history(http: requests.Session, stats: str, queue: str) -> float | None:
    """The api's fetch count of ``queue`` in statissa's newest history point, once the
    two newest points both have one (so the console can draw a rate); refreshed until
    then (a point under 10 s after the previous one is not kept), for at most 120 s."""
    deadline = time.monotonic() + 120
    while True:
        refreshed = http.post(f"{stats}/refresh", timeout=120)
        assert refreshed.status_code == 200, refreshed.text[:2000]
        points = http.get(f"{stats}/history.json?range=1h", timeout=10).json()["points"]
        counted = [p["queues"][queue] for p in points[-2:] if len(p["queues"].get(queue, [])) == 5]
        if len(counted) == 2:
            return float(counted[-1][4])
        if time.monotonic() > deadline:
            return None
        time.sleep(2)


def console_in_a_browser(stats: str, queue: str) -> None:
    """statissa's console of the running stack in headless Chromium: the page loads, the
    depth chart draws ``queue`` from the history, the fetch chart has its rate."""
    from selenium.webdriver.common.by import By

    with headless_chromium() as browser:
        browser.get(f"{stats}/?range=1h")
        assert browser.find_element(By.TAG_NAME, "h1").text == "ZOSCII MQ console"
        depth = browser.find_element(
            By.CSS_SELECTOR, f'svg[data-metric="depth"] g.series[data-queue="{queue}"]'
        )
        assert int(depth.get_attribute("data-points")) >= 1
        fetch = browser.find_element(
            By.CSS_SELECTOR, f'svg[data-metric="fetch"] g.series[data-queue="{queue}"]'
        )
        assert int(fetch.get_attribute("data-points")) >= 1
