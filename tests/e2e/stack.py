"""ZOSCII MQ stacks built from the images with testcontainers.

A ``Stack`` is one deployment: one named data volume and the containers that share it,
each run as docker-compose.yml defines the service (image, environment, ports, read-only
root, tmpfs /tmp, dropped capabilities, no-new-privileges, the image's user, health
check). Stacks of one test module share a network, so that one stack's replikate can
reach another stack's api by a network alias. Every name carries the run id, every
object the run label, and everything a stack created is removed when it closes.

Not taken from the compose file: ``restart: unless-stopped`` (the tests restart and kill
containers themselves; the daemon restarting a killed container behind their back would
race them) and the log rotation options (the default json-file driver is used).
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any

import docker
import docker.errors
from docker.models.containers import Container
from testcontainers.core.container import DockerContainer
from testcontainers.core.network import Network

from tests.e2e.compose_spec import ServiceSpec

log = logging.getLogger(__name__)

RUN_LABEL = "org.zoscii.e2e.run"
HEALTH_PROBE_INTERVAL = 1.0  # seconds; see ServiceSpec.healthcheck


def parse_docker_time(text: str) -> datetime:
    """Docker's RFC 3339 times with nanoseconds (Python keeps microseconds)."""
    text = re.sub(r"(\.\d{6})\d+", r"\1", text.strip())
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def image_missing(client: docker.DockerClient, image: str) -> bool:
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        return True
    return False


def logs_tail(container: Container, lines: int = 40) -> str:
    with contextlib.suppress(docker.errors.DockerException):
        return container.logs(tail=lines).decode("utf-8", "replace")
    return "(no logs)"


def health_state(container: Container) -> tuple[str, str]:
    """(state, detail) of a container: "healthy" only once a probe that started after the
    container's (re)start passed, so a status left over from before a restart never
    counts. Other states: "starting", "unhealthy", "exited", "no-healthcheck"."""
    container.reload()
    state = container.attrs["State"]
    if not state.get("Running"):
        return "exited", f"status {state.get('Status')}, exit code {state.get('ExitCode')}"
    health = state.get("Health")
    if not health:
        return "no-healthcheck", ""
    probes = health.get("Log") or []
    last = probes[-1] if probes else None
    detail = (last or {}).get("Output", "").strip()[-500:]
    if health.get("Status") == "healthy" and last:
        started = parse_docker_time(state["StartedAt"])
        if parse_docker_time(last["Start"]) >= started and last.get("ExitCode") == 0:
            return "healthy", detail
        return "starting", "last passing probe is older than the start"
    return str(health.get("Status")), detail


def wait_healthy(containers: Iterable[Container], timeout: float) -> float:
    """Wait until every container is healthy; returns the seconds it took. Fails at once
    when one exits or docker marks it unhealthy, with its last log lines."""
    pending = {c.name: c for c in containers}
    start = time.monotonic()
    deadline = start + timeout
    while pending:
        for name, container in list(pending.items()):
            state, detail = health_state(container)
            if state == "healthy":
                del pending[name]
            elif state in ("exited", "unhealthy", "no-healthcheck"):
                raise AssertionError(
                    f"container {name} is {state} ({detail})\n--- last logs:\n"
                    f"{logs_tail(container)}"
                )
        if pending and time.monotonic() > deadline:
            details = {n: health_state(c) for n, c in pending.items()}
            tails = "\n".join(f"--- {n}:\n{logs_tail(c)}" for n, c in pending.items())
            raise AssertionError(f"not healthy after {timeout:.0f} s: {details}\n{tails}")
        if pending:
            time.sleep(0.25)
    return time.monotonic() - start


class Service:
    """One running container of a stack."""

    def __init__(self, spec: ServiceSpec, container: DockerContainer) -> None:
        self.spec = spec
        self.tc = container

    @property
    def name(self) -> str:
        return self.container.name

    @property
    def container(self) -> Container:
        return self.tc.get_wrapped_container()

    def url(self, port: int | None = None) -> str:
        """Base URL of a port published on all interfaces, as seen from the tests."""
        port = port or self.spec.ports[0].container_port
        host = self.tc.get_container_host_ip()
        return f"http://{host}:{self.tc.get_exposed_port(port)}"

    def wait_healthy(self, timeout: float = 120) -> float:
        return wait_healthy([self.container], timeout)

    def restart(self) -> None:
        """``docker restart``: SIGTERM, the compose file's grace period, then start."""
        self.container.restart(timeout=int(self.spec.stop_grace_seconds))

    def kill_and_start(self) -> None:
        """``docker kill -s KILL`` then ``docker start``: a crash, no shutdown code runs."""
        self.container.kill(signal="SIGKILL")
        self.container.wait(timeout=30)
        self.container.start()

    def exec(self, command: list[str]) -> tuple[int, bytes]:
        """``docker exec`` as the image's user; (exit code, stdout and stderr)."""
        result = self.container.exec_run(command, demux=False)
        return int(result.exit_code), result.output

    def logs(self, lines: int = 40) -> str:
        return logs_tail(self.container, lines)


class Stack:
    """One deployment: a data volume and the containers sharing it."""

    def __init__(
        self,
        client: docker.DockerClient,
        specs: Mapping[str, ServiceSpec],
        run_id: str,
        name: str,
        network: Network,
    ) -> None:
        self.client = client
        self.specs = specs
        self.run_id = run_id
        self.name = name
        self.network = network
        self.services: dict[str, Service] = {}
        self.volume = client.volumes.create(
            name=f"zoscii-e2e-{run_id}-{name}-data", labels={RUN_LABEL: run_id}
        )

    def start(
        self,
        service: str,
        env: Mapping[str, str] | None = None,
        aliases: Iterable[str] = (),
    ) -> Service:
        """Start one compose service of this stack (without waiting for it)."""
        spec = self.specs[service]
        if image_missing(self.client, spec.image):  # testcontainers would pull it
            raise AssertionError(f"image {spec.image} is missing: run make images")
        kwargs: dict[str, Any] = {
            "labels": {RUN_LABEL: self.run_id, "org.zoscii.e2e.stack": self.name},
            "read_only": spec.read_only,
            "cap_drop": list(spec.cap_drop),
            "security_opt": list(spec.security_opt),
            "healthcheck": spec.healthcheck(HEALTH_PROBE_INTERVAL),
        }
        container = DockerContainer(
            spec.image,
            env=spec.environment(env or {}),
            name=f"zoscii-e2e-{self.run_id}-{self.name}-{service}",
            network=self.network,
            network_aliases=[f"{self.name}-{service}", *aliases],
            **kwargs,
        )
        container.with_volume_mapping(self.volume.name, spec.data_mount, "rw")
        for path in spec.tmpfs:
            container.with_tmpfs_mount(path)
        for port in spec.ports:
            # On a free host port, on all interfaces even where compose binds 127.0.0.1:
            # these tests may run in a container of their own, reaching the engine's
            # host through a gateway address. The bind addresses themselves are checked
            # on the compose files (test_deploy_files.py) and the real stack (test_compose).
            container.ports[f"{port.container_port}/tcp"] = None
        self.services[service] = Service(spec, container)
        container.start()
        log.info("started %s (%s)", container.get_wrapped_container().name, spec.image)
        return self.services[service]

    def __getitem__(self, service: str) -> Service:
        return self.services[service]

    def close(self) -> None:
        """Remove the containers, then the volume; keeps going past errors."""
        for service in self.services.values():
            with contextlib.suppress(docker.errors.NotFound):
                try:
                    service.tc.stop()  # docker rm -f -v
                except docker.errors.DockerException as exc:
                    log.warning("removing %s failed: %s", service.spec.name, exc)
        with contextlib.suppress(docker.errors.NotFound):
            self.volume.remove(force=True)


@contextlib.contextmanager
def network(client: docker.DockerClient, run_id: str, name: str) -> Iterator[Network]:
    """A user-defined network (aliases resolve on it), removed at the end."""
    net = Network(docker_network_kw={"labels": {RUN_LABEL: run_id}})
    net.name = f"zoscii-e2e-{run_id}-{name}"
    net.create()
    try:
        yield net
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            net.remove()


def remove_everything_labelled(client: docker.DockerClient, run_id: str) -> list[str]:
    """Safety net at the end of the session: whatever a crashed fixture left behind."""
    left = []
    selector = {"label": f"{RUN_LABEL}={run_id}"}
    for container in client.containers.list(all=True, filters=selector):
        left.append(container.name)
        with contextlib.suppress(docker.errors.NotFound):
            container.remove(force=True, v=True)
    for net in client.networks.list(filters=selector):
        left.append(net.name)
        with contextlib.suppress(docker.errors.NotFound):
            net.remove()
    for volume in client.volumes.list(filters=selector):
        left.append(volume.name)
        with contextlib.suppress(docker.errors.NotFound):
            volume.remove(force=True)
    return left
