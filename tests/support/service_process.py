"""A service under test as its image runs it: ``python -m <package>`` on a data directory,
its log read as it comes (the tests wait for lines and learn the ports it chose from them),
its /healthz and /metrics read over HTTP."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.support.service_env import clean_env
from zosciimq.core import DataDir, QueueStore
from zosciimq.errors import QueueNotFound

OPS = re.compile(r"serving /healthz and /metrics on port (\d+)")


class ServiceProcess:
    """One process of ``module``; a subclass reads its own log lines (``on_line``) and
    calls ``ready()`` on the one that says it serves."""

    module = ""
    what = "the service"

    def __init__(self, data_dir: Path, env: dict[str, str]) -> None:
        self.data_dir = data_dir
        self.env = clean_env({"ZOSCII_DATA_DIR": str(data_dir), "ZOSCII_LOG_LEVEL": "INFO", **env})
        self.lines: list[str] = []
        self.ops_port = 0  # where /healthz and /metrics answer
        self.process: subprocess.Popen[str] | None = None
        self._ready = threading.Event()

    def start(self) -> ServiceProcess:
        self.lines = []
        self._ready.clear()
        self.process = subprocess.Popen(
            [sys.executable, "-m", self.module],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        threading.Thread(target=self._read_log, args=(self.process,), daemon=True).start()
        if not self._ready.wait(20) or self.process.poll() is not None or not self.started():
            self.kill()
            raise AssertionError(f"{self.what} did not start:\n" + self.log())
        return self

    def _read_log(self, process: subprocess.Popen[str]) -> None:
        assert process.stderr is not None
        for line in process.stderr:
            self.lines.append(line)
            if m := OPS.search(line):
                self.ops_port = int(m[1])
            self.on_line(line)
        self._ready.set()  # it ended: start() says so

    def on_line(self, line: str) -> None:
        raise NotImplementedError

    def ready(self) -> None:
        self._ready.set()

    def started(self) -> bool:
        """Whether the lines read so far say everything the tests need (its ports)."""
        return True

    def log(self) -> str:
        return "".join(self.lines)

    def wait_for_log(self, pattern: str, timeout: float = 5.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if re.search(pattern, line):
                    return line
            time.sleep(0.02)
        raise AssertionError(f"no log line matches {pattern!r}:\n{self.log()}")

    def get(self, path: str) -> tuple[int, str]:
        """``path`` of its operations port: status and body, also for an error status."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ops_port}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def health(self) -> dict[str, object]:
        document: dict[str, object] = json.loads(self.get("/healthz")[1])
        return document

    def wait_health(self, key: str, value: object, timeout: float = 10.0) -> None:
        """Until /healthz says ``key`` is ``value`` (connections, followed queues...)."""
        deadline = time.monotonic() + timeout
        while self.health()[key] != value:
            assert time.monotonic() < deadline, self.health()
            time.sleep(0.02)

    def metric(self, name: str, **labels: str) -> float:
        """A sample of /metrics, 0 when it is not there (yet)."""
        _, text = self.get("/metrics")
        selector = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        wanted = f"{name}{{{selector}}}" if labels else name
        for line in text.splitlines():
            if line.startswith(wanted + " "):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def terminate(self, timeout: float = 20) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def messages(self, queue: str) -> list[tuple[str, bytes]]:
        """The queue as the api would serve it (the core's fetch, in name order)."""
        return queue_messages(self.data_dir, queue)


def queue_messages(data_dir: Path, queue: str) -> list[tuple[str, bytes]]:
    """Every message of ``queue`` by pointer, as a consumer reads it: (name, bytes);
    none for a queue that does not exist (yet)."""
    store = QueueStore(DataDir(data_dir))
    out: list[tuple[str, bytes]] = []
    pointer = ""
    try:
        while True:
            got = store.fetch(queue, pointer)
            if got.file is None:
                return out
            with got.file:
                out.append((got.name, got.file.read()))
            pointer = got.name
    except QueueNotFound:
        return out
    finally:
        store.close()
