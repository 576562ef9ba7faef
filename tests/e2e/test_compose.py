"""The shipped docker-compose.yml itself, started as ``make up`` starts it (deploy/up.sh):
the operator's token made and printed once, all five services (the four and the proxy in
front of the api) healthy, hardened as documented, the api answering through the proxy
on the public port, internal ports on 127.0.0.1 only; then what an operator does in
their first hour: ``zoscii queues`` and a purge in the console with the printed token,
each leaving its line in the audit trail; ``down -v`` removes everything. Uses the
compose CLI (``docker compose`` or docker-compose 1.29), as a user would, with a unique
project name and free host ports so it never clashes with a stack already running here."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest
import requests
from docker.models.containers import Container
from testcontainers.core.config import ConnectionMode
from testcontainers.core.docker_client import DockerClient

from tests.e2e import mq
from tests.e2e.browser import headless_chromium
from tests.e2e.compose_cli import clean_environment, compose_command, run_compose
from tests.e2e.compose_spec import COMPOSE_FILE, REPO_ROOT
from tests.e2e.stack import wait_healthy
from tests.statissa.served import wait_until
from tests.support.e2e_run import E2E, image_tag_env

log = logging.getLogger(__name__)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

SERVICES = {"proxy", "api", "live", "replikate", "claireup", "statissa"}
PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"
UP_TIMEOUT = 240  # seconds to healthy; the shipped probe interval is 15 s
TOKEN_PRINTED = re.compile(r"shown only this once.*?\n\s*\n\s+([0-9a-f]{64})\s*\n", re.S)


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def published_host(container: Container, port: int) -> str:
    """Where the tests reach ``port``, published by the container on all interfaces (the
    same rules testcontainers applies to its own containers).

    testcontainers says bridge_ip when it believes it runs in a container beside the
    engine's; the engine may still be this machine's own (a VM image that has a
    /.dockerenv), where the published port answers on the engine's host: tried first."""
    tc = DockerClient()
    mode = tc.get_connection_mode()
    if mode == ConnectionMode.gateway_ip:
        return tc.gateway_ip(container.id)
    if mode == ConnectionMode.docker_host:
        return tc.host()
    for host in (tc.host(), tc.gateway_ip(container.id)):
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=5):
            return host
    pytest.skip(f"bridge_ip connection mode: published port {port} answers on no host tried")


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


def test_make_up_then_the_operators_first_hour_then_down_removes_everything(
    e2e: E2E, tmp_path: Path
) -> None:
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
        "ZOSCII_LOG_FORMAT": "json",  # the audit trail as a log pipeline reads it
    }
    env_file.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    token_file = tmp_path / "secrets" / "admin-token"
    base = [*compose, "-p", project, "--env-file", str(env_file), "-f", str(COMPOSE_FILE)]

    selector = {"label": f"{PROJECT_LABEL}={project}"}
    try:
        printed = make_up(compose, project, env_file, token_file)
        token = token_file.read_text().strip()
        assert TOKEN_PRINTED.search(printed)[1] == token, printed  # printed once, kept
        assert f"ZOSCII_ADMIN_TOKEN_SHA256={sha256_hex(token)}" in env_file.read_text()
        assert token not in env_file.read_text()  # the stack has only its hash
        assert oct(token_file.stat().st_mode & 0o777) == "0o600"
        assert "Not\n" in printed and "compose network only" in printed  # the direct port
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

        api = f"http://{published_host(by_service['proxy'], api_port)}:{api_port}"
        direct = f"http://127.0.0.1:{direct_port}"
        stats = f"http://127.0.0.1:{stats_port}"
        with requests.Session() as http:
            mq.publish_raw(http, api, "compose", mq.ALL_BYTES, 1)
            assert mq.bodies(mq.drain(http, api, "compose")) == [mq.ALL_BYTES]
            assert http.get(f"{api}/metrics", timeout=10).status_code == 404  # not public
            assert mq.bodies(mq.drain(http, direct, "compose")) == [mq.ALL_BYTES]
            assert http.get(f"{direct}/metrics", timeout=10).status_code == 200
            assert http.get(f"{stats}/healthz", timeout=10).status_code == 200
            # the console's fetch counts: statissa reads the api's /metrics over the
            # compose network (http://api:8080/), 2 messages served so far
            assert fetch_counts_in_history(http, stats, "compose") == 2.0
            # a name nobody configured (DNS rebinding) is refused
            rebound = http.get(f"{stats}/", headers={"Host": "evil.example"}, timeout=10)
            assert rebound.status_code == 421

        # the first hour: the CLI with the printed token, through the proxy
        queues = zoscii(api, token, "--json", "queues")
        assert queues.returncode == 0, queues.stderr
        listed = {q["queue"]: q for q in json.loads(queues.stdout)["queues"]}
        assert listed["compose"]["messages"] == 1
        assert zoscii(api, "", "queues").returncode == 5  # no token: refused, exit 5
        forged_header_is_not_believed(direct, token, by_service["api"])
        console_in_a_browser(stats, "compose")
        purge_in_the_console(stats, "compose", token)
        purges = audit_lines(by_service["api"], "purge", "compose")
        refused, audit = purges  # the other container's, then the console's
        assert (refused["outcome"], refused["client"]) == ("refused", "-")
        assert (audit["outcome"], audit["client"]) == ("done", "admin-token")
        assert audit["result"]["purged"] == 1 and audit["level"] == "INFO"
        assert audit["address"] not in ("-", "127.0.0.1")  # the operator's, via statissa
        with requests.Session() as http:
            assert mq.drain(http, api, "compose") == []
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


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def make_up(compose: list[str], project: str, env_file: Path, token_file: Path) -> str:
    """What `make up` runs once the images exist (deploy/up.sh); its output."""
    env = {
        **clean_environment(),
        "ENV_FILE": str(env_file),
        "ADMIN_TOKEN_FILE": str(token_file),
        "UP_TIMEOUT": str(UP_TIMEOUT),
    }
    command = ["deploy/up.sh", *compose, "-p", project, "-f", str(COMPOSE_FILE)]
    done = subprocess.run(
        command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, f"deploy/up.sh failed:\n{done.stdout}\n{done.stderr}"
    log.info("deploy/up.sh:\n%s", done.stdout)
    return done.stdout


def zoscii(url: str, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI as the operator runs it after `make up`: ZOSCII_URL and ZOSCII_TOKEN."""
    env = {**clean_environment(), "ZOSCII_URL": f"{url}/", "ZOSCII_TOKEN": token}
    return subprocess.run(
        [sys.executable, "-m", "zosciimq.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def audit_lines(api: Container, action: str, queue: str) -> list[dict[str, Any]]:
    """The api's audit records (JSON log lines, event "admin") of ``action`` on ``queue``."""
    deadline = time.monotonic() + 30
    while True:
        found = []
        for line in api.logs().decode("utf-8", "replace").splitlines():
            if line.startswith("{") and '"event":"admin"' in line:
                record = json.loads(line)
                if (record["action"], record["queue"]) == (action, queue):
                    found.append(record)
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def forged_header_is_not_believed(direct: str, token: str, api: Container) -> None:
    """Issue 27: X-Forwarded-For: 127.0.0.1 straight to the api's port listed every queue
    (the host's connections come from the bridge gateway, in the pools compose trusted),
    and another container on the network purged one. Neither is believed now, and
    admin needs the token anyway."""
    forged = {"X-Forwarded-For": "127.0.0.1"}
    with requests.Session() as http:
        refused = http.post(f"{direct}/", data={"action": "queues"}, headers=forged, timeout=10)
        assert refused.status_code == 401, refused.text
        bearer = {**forged, "Authorization": f"Bearer {token}", "X-Request-ID": "forged-xff"}
        listed = http.post(f"{direct}/", data={"action": "queues"}, headers=bearer, timeout=10)
        assert listed.status_code == 200, listed.text
    (line,) = [r for r in audit_lines(api, "queues", None) if r["request_id"] == "forged-xff"]
    assert line["address"] != "127.0.0.1"  # the host's own address as the api sees it
    # another container on the compose network, without the token
    (network,) = api.attrs["NetworkSettings"]["Networks"]  # the project's one network
    script = (
        "import urllib.request,urllib.error\n"
        "r=urllib.request.Request('http://api:8080/',data=b'action=purge&q=compose',"
        "headers={'X-Forwarded-For':'127.0.0.1'})\n"
        "try: urllib.request.urlopen(r,timeout=10); print(200)\n"
        "except urllib.error.HTTPError as e: print(e.code)\n"
    )
    out = api.client.containers.run(
        api.image.id, ["python", "-c", script], network=network, remove=True, read_only=True
    )
    assert out.decode().strip() == "401"


def purge_in_the_console(stats: str, queue: str, token: str) -> None:
    """In headless Chromium: the queue's page offers to sign in, the printed token signs
    in (HTTP Basic, user admin), and the purge is confirmed by typing the queue's name."""
    from selenium.webdriver.common.by import By

    with headless_chromium() as browser:
        browser.get(f"{stats}/queues/{queue}")
        link = browser.find_element(By.ID, "sign-in")
        assert "operator's token" in browser.find_element(By.ID, "actions-note").text
        # The token in the URL answers the 401 as the browser's prompt would (Chromium
        # then keeps the credentials for this origin), and /login sends it back to the
        # queue. That URL still carries them, which Chromium sends only when challenged:
        # the queue's own address, as after a prompt, gets them unasked.
        browser.get(link.get_attribute("href").replace("http://", f"http://admin:{token}@", 1))
        assert browser.current_url.endswith(f"/queues/{queue}"), browser.current_url
        browser.get(f"{stats}/queues/{queue}")
        browser.find_element(By.ID, "purge").click()
        wait_until(lambda: "/admin/purge" in browser.current_url, 10, "the confirmation page")
        browser.find_element(By.ID, "confirm").send_keys(queue)
        browser.find_element(By.ID, "confirm-button").click()
        wait_until(lambda: browser.find_elements(By.ID, "result"), 30, "the purge's result")
        text = browser.find_element(By.TAG_NAME, "h2").text
        assert text == f"Purged 1 message(s) from {queue}", browser.page_source[-3000:]


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
