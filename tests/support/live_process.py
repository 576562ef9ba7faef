"""A real live-service process (``python -m zoscii_live``) on a data directory."""

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
from zosciimq.core import DataDir, QueueStore, Upload

LISTENING = re.compile(r"live service on [^ ]+:(\d+) \(watch: (\w+)\)")




class LiveProcess:
    def __init__(self, data_dir: Path, **settings: str) -> None:
        self.data_dir = data_dir
        self.env = clean_env(
            {
                "ZOSCII_DATA_DIR": str(data_dir),
                "ZOSCII_LIVE_HOST": "127.0.0.1",
                "ZOSCII_LIVE_PORT": "0",
                "ZOSCII_LOG_LEVEL": "INFO",
                **settings,
            }
        )
        self.lines: list[str] = []
        self.port = 0
        self.watch = ""
        self.process: subprocess.Popen[str] | None = None
        self._ready = threading.Event()
        self._store: QueueStore | None = None

    def restart(self) -> LiveProcess:
        """Start again on the same port (after ``kill`` or ``terminate``)."""
        self.env["ZOSCII_LIVE_PORT"] = str(self.port)
        return self.start()

    def start(self) -> LiveProcess:
        self.lines, self.port = [], 0
        self._ready.clear()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "zoscii_live"],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        threading.Thread(target=self._read_log, args=(self.process,), daemon=True).start()
        if not self._ready.wait(20) or not self.port:
            self.kill()
            raise AssertionError("the live service did not start:\n" + self.log())
        return self

    def _read_log(self, process: subprocess.Popen[str]) -> None:
        assert process.stderr is not None
        for line in process.stderr:
            self.lines.append(line)
            if m := LISTENING.search(line):
                self.port, self.watch = int(m[1]), m[2]
                self._ready.set()
        self._ready.set()

    def log(self) -> str:
        return "".join(self.lines)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def health(self) -> dict[str, object]:
        return json.loads(self.get("/healthz")[1])

    def metric(self, name: str, **labels: str) -> float:
        _, text = self.get("/metrics")
        selector = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        wanted = f"{name}{{{selector}}}" if labels else name
        for line in text.splitlines():
            if line.startswith(wanted + " "):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def wait_for(self, key: str, value: object, timeout: float = 10.0) -> None:
        """Until /healthz says ``key`` is ``value`` (connections, followed_queues)."""
        deadline = time.monotonic() + timeout
        while self.health()[key] != value:
            assert time.monotonic() < deadline, self.health()
            time.sleep(0.02)

    def terminate(self, timeout: float = 20) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    # --- publishing, as the api does -------------------------------------------------------
    @property
    def store(self) -> QueueStore:
        if self._store is None:
            self._store = QueueStore(DataDir(self.data_dir), default_retention_days=1)
        return self._store

    def publish(self, queue: str, *contents: bytes) -> list[str]:
        names = []
        for content in contents:
            upload = Upload(DataDir(self.data_dir), 1 << 30)
            upload.write(content)
            result = self.store.publish(queue, upload, retention_days=1)
            assert result.name is not None
            names.append(result.name)
        return names
