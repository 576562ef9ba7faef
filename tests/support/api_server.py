"""A real api under gunicorn on a loopback port, for integration tests and benchmarks.

gunicorn runs with this interpreter and finds ``zoscii_api`` and ``zosciimq`` where it is
installed (``make venv`` installs both, editable); only its config file is read by path.
"""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GUNICORN_CONF = REPO / "services" / "api" / "gunicorn.conf.py"
# The operator's token every test api has, as `make up` gives the stack one.
OPERATOR_TOKEN = "test-operator-token-" + "0123456789abcdef" * 2
OPERATOR_SHA256 = hashlib.sha256(OPERATOR_TOKEN.encode()).hexdigest()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def until_healthy(
    url: str, timeout: float, process: subprocess.Popen[bytes] | None = None, pause: float = 0.05
) -> bool:
    """Ask ``url`` + ``healthz`` until it answers 200 (True); False once ``timeout`` has
    passed or ``process`` (the server, when started here) has exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(url + "healthz", timeout=1) as reply:
                if reply.status == 200:
                    return True
        except OSError:
            time.sleep(pause)
    return False


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
            "ZOSCII_ADMIN_TOKEN_SHA256": OPERATOR_SHA256,
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
        if until_healthy(self.url, timeout, self.process):
            return self
        if self.process.poll() is not None:
            raise RuntimeError(f"api exited early:\n{self.log()}")
        raise RuntimeError(f"api did not become healthy:\n{self.log()}")

    def worker_pids(self) -> list[int]:
        import psutil

        assert self.process is not None
        return [child.pid for child in psutil.Process(self.process.pid).children()]

    def wait_for_workers(self, count: int, timeout: float = 30.0) -> list[int]:
        """The worker pids once there are ``count``: ``start()`` returns as soon as one
        answers, and the master forks the others one after another."""
        deadline = time.monotonic() + timeout
        while len(pids := self.worker_pids()) != count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(pids)} workers, not {count}:\n{self.log()}")
            time.sleep(0.02)
        return pids

    def kill(self) -> None:
        """kill -9 of the whole process group: master and workers, no goodbye."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def answers(self, path: str = "healthz", timeout: float = 30.0) -> int:
        """Wait until the server answers ``path`` at all; its status (503 included)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(self.url + path, timeout=1) as reply:
                    return reply.status
            except urllib.error.HTTPError as error:
                return error.code
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"api does not answer:\n{self.log()}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        """The end of a test's server: kill -9, as ``kill()``.

        A test stops its server once its requests are answered, and what the api
        acknowledged is on disk by then (the kill -9 tests hold it to that). A graceful
        stop (SIGTERM) keeps every worker 2 s longer for connections kept alive; a quick
        one (``shut_down``) takes a third of a second.
        """
        self.kill()

    def shut_down(self, timeout: float = 10.0) -> None:
        """gunicorn's quick shutdown (SIGQUIT): every worker logs its last lines and exits,
        and so does the master; kill -9 for what is still there after ``timeout``."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGQUIT)
            try:
                self.process.wait(timeout=timeout)
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
