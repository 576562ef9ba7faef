"""A real api under gunicorn on a loopback port, for integration tests and benchmarks."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GUNICORN_CONF = REPO / "services" / "api" / "gunicorn.conf.py"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ApiServer:
    """One gunicorn master with its workers; ``url`` ends with a slash."""

    def __init__(
        self, data_dir: Path, *, workers: int = 2, threads: int = 8, env: dict | None = None
    ) -> None:
        self.data_dir = Path(data_dir)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.metrics_dir = tempfile.mkdtemp(prefix="zoscii-test-metrics-")
        self.log_path = Path(tempfile.mkstemp(prefix="zoscii-api-", suffix=".log")[1])
        self.env = {
            **os.environ,
            "ZOSCII_DATA_DIR": str(self.data_dir),
            "ZOSCII_BIND": f"127.0.0.1:{self.port}",
            "ZOSCII_WORKERS": str(workers),
            "ZOSCII_THREADS": str(threads),
            "PROMETHEUS_MULTIPROC_DIR": self.metrics_dir,
            "PYTHONPATH": os.pathsep.join(
                [
                    str(REPO / "src"),
                    str(REPO / "services" / "api"),
                    os.environ.get("PYTHONPATH", ""),
                ]
            ),
            **(env or {}),
        }
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> ApiServer:
        log = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the server
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "--config", str(GUNICORN_CONF)],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"api exited early:\n{self.log()}")
            try:
                with urllib.request.urlopen(self.url + "healthz", timeout=1) as reply:
                    if reply.status == 200:
                        return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"api did not become healthy:\n{self.log()}")

    def worker_pids(self) -> list[int]:
        import psutil

        assert self.process is not None
        return [child.pid for child in psutil.Process(self.process.pid).children()]

    def kill(self) -> None:
        """kill -9 of the whole process group: master and workers, no goodbye."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]


@contextmanager
def running_api(
    data_dir: Path, *, workers: int = 2, threads: int = 8, env: dict | None = None
) -> Iterator[str]:
    """Start gunicorn on a free loopback port and yield its base URL."""
    server = ApiServer(data_dir, workers=workers, threads=threads, env=env).start()
    try:
        yield server.url
    finally:
        server.stop()
