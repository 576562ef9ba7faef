"""The service around the gateway: settings, the command line, the ops port, a clean
SIGTERM, the group per queue; and the package and deployment files that ship it."""

from __future__ import annotations

import importlib.metadata
import json
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from zoscii_phpmq import __main__ as cli
from zoscii_phpmq.gateway import Gateway
from zoscii_phpmq.metrics import PhpmqMetrics
from zoscii_phpmq.settings import Settings

import zosciimq
from tests.phpmq import wire
from tests.support.phpmq_gateway import GatewayProcess, publish
from tests.support.queues import queue_name
from tests.support.service_env import clean_env
from zosciimq.core import DataDir, QueueStore, Upload, parse_name
from zosciimq.core.groups import ConsumerGroups
from zosciimq.core.outgoing import Outgoing

REPO = Path(__file__).resolve().parents[2]


# --- settings and the command line ----------------------------------------------------------
def test_defaults() -> None:
    settings = Settings.from_env({"ZOSCII_DEFAULT_RETENTION_DAYS": "30"})
    assert (settings.port, settings.metrics_port, settings.group) == (9100, 9104, "phpmq")
    assert settings.retention_days is None  # the queue's policy, else the core's default
    assert not settings.access.enabled
    custom = Settings.from_env(
        {
            "ZOSCII_PHPMQ_RETENTION_DAYS": "0",
            "ZOSCII_DEFAULT_RETENTION_DAYS": "30",
            "ZOSCII_PHPMQ_GROUP": "php",
            "ZOSCII_PHPMQ_QUEUE_GROUPS": "Orders=billing, invoices=workers",
        }
    )
    assert custom.retention_days == 0
    assert [custom.group_of(q) for q in ("orders", "invoices", "other")] == [
        "billing",
        "workers",
        "php",
    ]


def test_the_shared_settings_are_read_as_every_service_reads_them(tmp_path: Path) -> None:
    """core, log, access and policy come from the shared variables (read_service_env)."""
    policy = tmp_path / "policy.toml"
    policy.write_text('[queues."orders"]\nretention_days = 3\n')
    settings = Settings.from_env(
        {
            "ZOSCII_DATA_DIR": str(tmp_path / "data"),
            "ZOSCII_DEFAULT_RETENTION_DAYS": "30",
            "ZOSCII_LOG_LEVEL": "debug",
            "ZOSCII_LOG_FORMAT": "JSON",
            "ZOSCII_AUTH_CLIENTS": '[[clients]]\nname = "php"\ntoken_sha256 = "'
            + "ab" * 32
            + '"\nwrite = ["orders"]\n',
            "ZOSCII_POLICY_FILE": str(policy),
        }
    )
    assert settings.data_dir == tmp_path / "data"
    assert settings.log == ("DEBUG", "json")
    assert settings.access.enabled and settings.access.clients[0].name == "php"
    assert settings.policy.path == policy
    assert settings.policy.retention_for("orders", 30) == 3


def test_the_gateways_publishes_take_retention_from_the_policy_then_the_default(
    tmp_path: Path,
) -> None:
    """Without ZOSCII_PHPMQ_RETENTION_DAYS the gateway's store names a message with the
    queue policy's retention, else ZOSCII_DEFAULT_RETENTION_DAYS; with it, that."""
    policy = tmp_path / "policy.toml"
    policy.write_text('[queues."orders"]\nretention_days = 3\n')
    env = {
        "ZOSCII_DATA_DIR": str(tmp_path / "data"),
        "ZOSCII_POLICY_FILE": str(policy),
        "ZOSCII_DEFAULT_RETENTION_DAYS": "30",
    }
    days = {}
    for own in (None, "7"):
        settings = Settings.from_env(env | ({"ZOSCII_PHPMQ_RETENTION_DAYS": own} if own else {}))
        gateway = Gateway(settings, PhpmqMetrics())
        try:
            for queue in ("orders", "other"):
                upload = Upload(DataDir(settings.data_dir))
                upload.write(b"x")
                outgoing = Outgoing(upload, settings.retention_days, None, None)
                (name,) = gateway._publish(queue, [outgoing])
                assert name is not None
                days[(own, queue)] = parse_name(name).retention_days
        finally:
            gateway.pool.shutdown()
    assert days == {(None, "orders"): 3, (None, "other"): 30, ("7", "orders"): 7, ("7", "other"): 7}


def test_the_gateways_groups_take_dead_letter_max_deliveries_from_the_policy(
    tmp_path: Path,
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[queues."fragile"]\ndead_letter_max_deliveries = 2\n')
    settings = Settings.from_env(
        {
            "ZOSCII_DATA_DIR": str(tmp_path / "data"),
            "ZOSCII_POLICY_FILE": str(policy),
            "ZOSCII_MAX_DELIVERIES": "4",
        }
    )
    gateway = Gateway(settings, PhpmqMetrics())
    try:
        limits = [gateway.groups.deliveries_limit(q) for q in ("fragile", "other")]
    finally:
        gateway.pool.shutdown()
    assert limits == [2, 4]


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"zoscii-phpmq {zosciimq.__version__}\n"


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("ZOSCII_PHPMQ_PORT", "70000"),
        ("ZOSCII_PHPMQ_METRICS_PORT", "x"),
        ("ZOSCII_PHPMQ_GROUP", "no spaces"),
        ("ZOSCII_PHPMQ_QUEUE_GROUPS", "orders"),
        ("ZOSCII_PHPMQ_LEASE_SECONDS", "1"),
        ("ZOSCII_PHPMQ_RETENTION_DAYS", "10000"),
        ("ZOSCII_PHPMQ_MAX_CONNECTIONS", "0"),
        ("ZOSCII_PHPMQ_FRAME_TIMEOUT_SECONDS", "soon"),
        ("ZOSCII_LOG_FORMAT", "xml"),
        ("ZOSCII_AUTH_FILE", "/nonexistent/clients.toml"),
    ],
)
def test_a_bad_setting_exits_2_with_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], variable: str, value: str
) -> None:
    for name in list(__import__("os").environ):
        if name.startswith("ZOSCII_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv(variable, value)
    with pytest.raises(SystemExit) as exited:
        cli.main([])
    assert exited.value.code == 2
    out, err = capsys.readouterr()
    (line,) = err.splitlines()
    assert out == "" and line.startswith("configuration error: ") and variable in line


def test_a_port_in_use_exits_1(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        env = clean_env(
            {
                "ZOSCII_DATA_DIR": str(tmp_path),
                "ZOSCII_PHPMQ_HOST": "127.0.0.1",
                "ZOSCII_PHPMQ_PORT": str(taken.getsockname()[1]),
                "ZOSCII_PHPMQ_METRICS_PORT": "0",
            }
        )
        done = subprocess.run(
            [sys.executable, "-m", "zoscii_phpmq"],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert done.returncode == 1
    assert "cannot listen on 127.0.0.1" in done.stderr


# --- the ops port ---------------------------------------------------------------------------
def test_healthz_and_metrics(gateway: GatewayProcess) -> None:
    queue = queue_name()
    with gateway.connect() as client:
        client.send(wire.consume(queue, 1))
        publish(gateway, queue, b"counted")
        message = client.read()
        status, body = gateway.get("/healthz")
        assert status == 200
        health = json.loads(body)
        assert health["status"] == "ok" and health["connections"] >= 1 and health["consumers"] >= 1
        client.send(wire.ack(queue, message.id))
        time.sleep(0.2)
    _, text = gateway.get("/metrics")
    for name in (
        "zoscii_phpmq_open_connections",
        "zoscii_phpmq_connections_total",
        "zoscii_phpmq_consumers",
        "zoscii_phpmq_unacked",
        "zoscii_phpmq_messages_total",
        "zoscii_phpmq_content_bytes_total",
        "zoscii_phpmq_protocol_errors_total",
        "zoscii_phpmq_ignored_ids_total",
        "zoscii_phpmq_released_total",
    ):
        assert name in text, name
    for event in ("received", "sent", "acked"):
        assert gateway.metric("zoscii_phpmq_messages_total", event=event) >= 1, event
    assert queue not in text  # queue names are no labels
    assert gateway.get("/other")[0] == 404


# --- stopping -------------------------------------------------------------------------------
def test_sigterm_releases_unacked_messages_and_exits_0(tmp_path: Path) -> None:
    process = GatewayProcess(tmp_path, ZOSCII_PHPMQ_LEASE_SECONDS="600").start()
    queue = queue_name()
    try:
        publish(process, queue, b"one", b"two", b"three")
        client = process.connect()
        client.send(wire.consume(queue, 2))
        held = [client.read(), client.read()]
        started = time.monotonic()
        assert process.terminate() == 0
        assert time.monotonic() - started < 5
        client.wait_closed()
        client.close()
    finally:
        process.kill()
    assert [m.content for m in held] == [b"one", b"two"]
    log = process.log()
    assert "2 unacknowledged message(s) released for redelivery" in log
    assert re.search(r"stopped\n", log)
    # Released, not left to their 10-minute lease: another consumer gets them now, first.
    data_dir = DataDir(tmp_path)
    groups = ConsumerGroups(data_dir, QueueStore(data_dir))
    again = groups.consume(queue, "phpmq", count=3, lease=30)
    try:
        assert [d.file.read() for d in again] == [b"one", b"two", b"three"]
        assert [d.deliveries for d in again] == [2, 2, 1]
    finally:
        for delivery in again:
            delivery.file.close()


def test_a_message_in_hand_at_sigterm_is_finished(tmp_path: Path) -> None:
    process = GatewayProcess(tmp_path).start()
    queue = queue_name()
    frame = wire.send(queue, b"z" * 100_000)
    try:
        with process.connect() as client:
            client.send(frame[:50_000])
            time.sleep(0.3)  # the gateway is inside the message
            assert process.process is not None
            process.process.send_signal(15)
            process.wait_for_log("received SIGTERM")
            with pytest.raises(OSError):  # no new connections
                socket.create_connection(("127.0.0.1", process.port), timeout=2).close()
            client.send(frame[50_000:])
            client.wait_closed()
        assert process.process.wait(20) == 0
    finally:
        process.kill()
    assert process.messages(queue) and process.messages(queue)[0][1] == b"z" * 100_000


# --- groups ---------------------------------------------------------------------------------
def test_the_group_is_configurable_globally_and_per_queue(tmp_path: Path) -> None:
    process = GatewayProcess(
        tmp_path,
        ZOSCII_PHPMQ_GROUP="php-clients",
        ZOSCII_PHPMQ_QUEUE_GROUPS="special=workers",
    ).start()
    try:
        publish(process, "special", b"s")
        publish(process, "plain", b"p")
        with process.connect() as client:
            client.send(wire.consume("Special", 1))
            client.send(wire.consume("plain", 1))
            got = sorted([client.read(), client.read()], key=lambda m: m.queue)
            client.send(wire.dead_letter("Special", got[0].id))
            client.send(wire.dead_letter("plain", got[1].id))
            time.sleep(0.3)
    finally:
        process.terminate()
        process.kill()
    assert [(m.queue, m.content) for m in got] == [("Special", b"s"), ("plain", b"p")]
    groups = process.groups()
    assert groups.groups_of("special") == ["workers"]
    assert groups.groups_of("plain") == ["php-clients"]
    assert process.dead_letters("special", "workers") == [b"s"]
    assert process.dead_letters("plain", "php-clients") == [b"p"]


# --- the package and the deployment -----------------------------------------------------------
def test_the_package_is_installed_from_the_checkout() -> None:
    import zoscii_phpmq

    distribution = importlib.metadata.distribution("zoscii-phpmq")
    assert distribution.version == zosciimq.__version__
    requires = set(distribution.requires or [])
    assert {"zosciimq>=1.0", "prometheus-client>=0.26"} <= requires
    assert Path(zoscii_phpmq.__file__).resolve().is_relative_to(REPO / "services" / "phpmq")
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^SERVICES := .*\bphpmq\b", makefile, re.M)  # `make venv` installs it


def test_the_image_pins_what_the_package_needs() -> None:
    pins = {
        line.split("==")[0]: line.split("==")[1]
        for line in (REPO / "services/phpmq/requirements.txt").read_text().splitlines()
        if line and not line.startswith("#")
    }
    dev = dict(
        line.split("==")
        for line in (REPO / "requirements-dev.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    assert pins == {"prometheus-client": dev["prometheus-client"]}


def test_the_image_is_built_like_the_others() -> None:
    dockerfile = (REPO / "deploy/Dockerfile").read_text()
    assert "phpmq) port=9104 ;;" in dockerfile  # its health check; the rest is the same
    assert "phpmq" in re.search(r"SERVICES:-([^}]*)}", (REPO / "deploy/images.sh").read_text())[1]
    assert (
        "phpmq"
        in re.search(r"SERVICES=\(([^)]*)\)", (REPO / "deploy/wheelhouse.sh").read_text())[1]
    )
    ignore = (REPO / ".dockerignore").read_text().splitlines()
    for path in (
        "services/phpmq/pyproject.toml",
        "services/phpmq/requirements.txt",
        "services/phpmq/zoscii_phpmq",
        "build/wheels/phpmq",
    ):
        assert f"!{path}" in ignore, path


def test_the_compose_override_is_hardened_and_shares_the_apis_data() -> None:
    document = yaml.safe_load((REPO / "deploy/compose.phpmq.yml").read_text())
    assert list(document["services"]) == ["phpmq"]  # adds one service, changes none
    service = document["services"]["phpmq"]
    assert service["image"] == "zoscii/phpmq:${IMAGE_TAG:-dev}"
    assert service["build"]["dockerfile"] == "deploy/Dockerfile"
    assert service["build"]["args"]["SERVICE"] == "phpmq"
    assert service["read_only"] is True and service["cap_drop"] == ["ALL"]
    assert "no-new-privileges:true" in service["security_opt"]
    assert service["tmpfs"] == ["/tmp"]
    assert service["volumes_from"] == ["api"]
    assert "9104/healthz" in " ".join(service["healthcheck"]["test"])
    assert service["ports"][0].startswith("${ZOSCII_PHPMQ_ADDRESS:-127.0.0.1}:")
    assert service["ports"][1].startswith("${ZOSCII_INTERNAL_ADDRESS:-127.0.0.1}:")
    env = service["environment"]
    assert env["ZOSCII_DATA_DIR"] == "/data"
    assert {"ZOSCII_AUTH_FILE", "ZOSCII_AUTH_CLIENTS", "ZOSCII_MAX_DELIVERIES"} <= set(env)
    # every ZOSCII_PHPMQ_ setting but the ports (fixed in the container) is passed through
    settings = set(
        re.findall(
            r'"(ZOSCII_PHPMQ_[A-Z_]+)"',
            (REPO / "services/phpmq/zoscii_phpmq/settings.py").read_text(),
        )
    )
    assert settings - {
        "ZOSCII_PHPMQ_HOST",
        "ZOSCII_PHPMQ_PORT",
        "ZOSCII_PHPMQ_METRICS_PORT",
    } <= set(env)


@pytest.mark.slow  # the compose CLI, a second each (the file alone: test_the_compose_override_*)
@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="no docker-compose binary")
@pytest.mark.parametrize("variants", [(), ("deploy/compose.bind.yml",)], ids=["volume", "bind"])
def test_compose_gives_the_gateway_the_apis_data(variants: tuple[str, ...]) -> None:
    files = ["docker-compose.yml", *variants, "deploy/compose.phpmq.yml"]
    command = ["docker-compose", "--project-directory", ".", "-p", "phpmqtest"]
    for path in files:
        command += ["-f", path]
    done = subprocess.run(
        [*command, "config"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env({}),
    )
    assert done.returncode == 0, done.stderr
    config = yaml.safe_load(done.stdout)
    assert set(config["services"]) >= {"api", "replikate", "claireup", "statissa", "phpmq"}
    phpmq = config["services"]["phpmq"]
    assert phpmq["volumes_from"] == ["service:api:rw"]
    assert [p.split(":")[0] for p in phpmq["ports"]] == ["127.0.0.1", "127.0.0.1"]
