"""The api under test: gunicorn on loopback (default) or the ``zoscii/api:dev`` container."""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path
from typing import Protocol

from bench.fill import share_with
from tests.support.api_server import ApiServer, free_port, until_healthy

log = logging.getLogger(__name__)

IMAGE = "zoscii/api:dev"
CONTAINER_UID = 10001  # the image's non-root user (deploy/Dockerfile)


class Api(Protocol):
    url: str

    def stop(self) -> None: ...

    def worker_pids(self) -> list[int]: ...


def start_api(
    data_dir: Path,
    *,
    containers: bool,
    workers: int,
    threads: int,
    env: dict[str, str] | None = None,
) -> Api:
    """``env``: more of the api's settings (``ZOSCII_DURABILITY``...), over the bench's own."""
    if containers:
        return ContainerApi(data_dir, workers=workers, threads=threads, env=env).start()
    server = ApiServer(data_dir, workers=workers, threads=threads, env=env)
    server.start()
    return server


def image_available(image: str = IMAGE) -> str | None:
    """None when ``docker run image`` can work, else why not."""
    try:
        result = subprocess.run(
            ["docker", "image", "inspect", image], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"docker not usable: {exc}"
    if result.returncode != 0:
        return f"image {image} not found (build it with `make images`)"
    return None


def image_id(image: str = IMAGE) -> str:
    result = subprocess.run(
        ["docker", "image", "inspect", image, "--format", "{{.Id}}"],
        capture_output=True,
        text=True,
    )
    return result.stdout.strip()[:19] or "unknown"


class ContainerApi:
    """The api image with the data directory bind-mounted, published on a loopback port."""

    def __init__(
        self,
        data_dir: Path,
        *,
        workers: int,
        threads: int,
        image: str = IMAGE,
        env: dict[str, str] | None = None,
    ) -> None:
        self.data_dir, self.image = Path(data_dir), image
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.workers, self.threads = workers, threads
        self.env = dict(env or {})
        self.container_id = ""

    def start(self, timeout: float = 60.0) -> ContainerApi:
        share_with(self.data_dir, CONTAINER_UID, CONTAINER_UID)
        command = [
            "docker",
            "run",
            "--detach",
            "--rm",
            "--read-only",
            "--tmpfs",
            "/tmp",
            "--publish",
            f"127.0.0.1:{self.port}:8080",
            "--volume",
            f"{self.data_dir}:/data",
            "--env",
            f"ZOSCII_WORKERS={self.workers}",
            "--env",
            f"ZOSCII_THREADS={self.threads}",
            *(f"--env={key}={value}" for key, value in self.env.items()),
            self.image,
        ]
        self.container_id = subprocess.run(
            command, capture_output=True, text=True, check=True
        ).stdout.strip()
        if until_healthy(self.url, timeout, pause=0.1):
            return self
        logs = subprocess.run(["docker", "logs", self.container_id], capture_output=True, text=True)
        self.stop()
        raise RuntimeError(f"container did not become healthy:\n{logs.stdout}{logs.stderr}")

    def worker_pids(self) -> list[int]:
        """Host pids of the gunicorn workers (the container's pid namespace maps onto ours)."""
        if not self.container_id:
            return []
        result = subprocess.run(
            ["docker", "top", self.container_id, "-o", "pid,ppid,args"],
            capture_output=True,
            text=True,
        )
        rows = [line.split(None, 2) for line in result.stdout.splitlines()[1:]]
        gunicorn = {int(pid): int(ppid) for pid, ppid, args in rows if "gunicorn" in args}
        masters = {pid for pid, ppid in gunicorn.items() if ppid not in gunicorn}
        return [
            pid
            for pid, ppid in gunicorn.items()
            if ppid in masters and os.path.exists(f"/proc/{pid}")
        ]

    def stop(self) -> None:
        if self.container_id:
            subprocess.run(["docker", "rm", "--force", self.container_id], capture_output=True)
            self.container_id = ""
