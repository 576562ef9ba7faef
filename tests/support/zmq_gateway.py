"""The ZeroMQ gateway under test: a real process, and connecting a pipe to it."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import zmq

from tests.support.service_env import clean_env
from tests.zmq.wire import Pipe
from zosciimq.core import DataDir, QueueStore

LISTENING = re.compile(r"listening for (\w+) clients on (\S+)")


OPS = re.compile(r"serving /healthz and /metrics on port (\d+)")


SERVING = "zoscii_zmq.service: serving"


TCP_ANY = "tcp://127.0.0.1:*"



def pipe_name(prefix: str = "p") -> bytes:
    return (prefix + uuid.uuid4().hex[:12]).encode()


class Gateway:
    def __init__(self, data_dir: Path, broker: str | None = None, **settings: str) -> None:
        self.data_dir = data_dir
        self.broker = broker or "t" + uuid.uuid4().hex[:12]
        self.env = clean_env(
            {
                "ZOSCII_DATA_DIR": str(data_dir),
                "ZOSCII_ZPIPES_BROKER": self.broker,
                "ZOSCII_ZPIPES_ENDPOINT": TCP_ANY,
                "ZOSCII_ZMQ_REQUEST_ENDPOINT": TCP_ANY,
                "ZOSCII_ZMQ_PUSH_ENDPOINT": TCP_ANY,
                "ZOSCII_ZMQ_WORK_ENDPOINT": TCP_ANY,
                "ZOSCII_ZMQ_PUB_ENDPOINT": TCP_ANY,
                "ZOSCII_ZMQ_HOST": "127.0.0.1",
                "ZOSCII_ZMQ_METRICS_PORT": "0",
                "ZOSCII_LOG_LEVEL": "INFO",
                **settings,
            }
        )
        self.lines: list[str] = []
        self.endpoints: dict[str, list[str]] = {}
        self.ops_port = 0
        self.process: subprocess.Popen[str] | None = None
        self._ready = threading.Event()

    @property
    def ipc(self) -> str:
        return f"ipc://@/zpipes/{self.broker}"

    def endpoint(self, role: str) -> str:
        return next(e for e in self.endpoints[role] if e.startswith("tcp://"))

    def start(self) -> Gateway:
        self.lines, self.endpoints = [], {}
        self._ready.clear()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "zoscii_zmq"],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        threading.Thread(target=self._read_log, args=(self.process,), daemon=True).start()
        if not self._ready.wait(20) or self.process.poll() is not None:
            self.kill()
            raise AssertionError("the gateway did not start:\n" + self.log())
        return self

    def _read_log(self, process: subprocess.Popen[str]) -> None:
        assert process.stderr is not None
        for line in process.stderr:
            self.lines.append(line)
            if m := OPS.search(line):
                self.ops_port = int(m[1])
            if m := LISTENING.search(line):
                self.endpoints.setdefault(m[1], []).append(m[2])
            if SERVING in line:
                self._ready.set()
        self._ready.set()

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

    def ops(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ops_port}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def health(self) -> dict[str, object]:
        return json.loads(self.ops("/healthz")[1])

    def metric(self, name: str, **labels: str) -> float:
        _, text = self.ops("/metrics")
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
        store = QueueStore(DataDir(self.data_dir))
        out, pointer = [], ""
        try:
            while True:
                got = store.fetch(queue, pointer)
                if got.file is None:
                    return out
                with got.file:
                    out.append((got.name, got.file.read()))
                pointer = got.name
        except Exception as exc:
            if type(exc).__name__ == "QueueNotFound":
                return out
            raise
        finally:
            store.close()


def connect(context: zmq.Context, endpoint: str, timeout_ms: int = 5000) -> Pipe:
    return Pipe(context, endpoint, timeout_ms)
