"""The ZeroMQ gateway under test: a real process, and connecting a pipe to it."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import zmq

from tests.support.service_process import ServiceProcess
from tests.zmq.wire import Pipe

LISTENING = re.compile(r"listening for (\w+) clients on (\S+)")
SERVING = "zoscii_zmq.service: serving"
TCP_ANY = "tcp://127.0.0.1:*"


def pipe_name(prefix: str = "p") -> bytes:
    return (prefix + uuid.uuid4().hex[:12]).encode()


class Gateway(ServiceProcess):
    module = "zoscii_zmq"
    what = "the gateway"

    def __init__(self, data_dir: Path, broker: str | None = None, **settings: str) -> None:
        self.broker = broker or "t" + uuid.uuid4().hex[:12]
        super().__init__(
            data_dir,
            {
                "ZOSCII_ZPIPES_BROKER": self.broker,
                "ZOSCII_ZPIPES_ENDPOINT": TCP_ANY,
                "ZOSCII_ZMQ_REQUEST_ENDPOINT": TCP_ANY,
                "ZOSCII_ZMQ_PUSH_ENDPOINT": TCP_ANY,
                "ZOSCII_ZMQ_WORK_ENDPOINT": TCP_ANY,
                "ZOSCII_ZMQ_PUB_ENDPOINT": TCP_ANY,
                "ZOSCII_ZMQ_HOST": "127.0.0.1",
                "ZOSCII_ZMQ_METRICS_PORT": "0",
                **settings,
            },
        )
        self.endpoints: dict[str, list[str]] = {}

    @property
    def ipc(self) -> str:
        return f"ipc://@/zpipes/{self.broker}"

    def endpoint(self, role: str) -> str:
        return next(e for e in self.endpoints[role] if e.startswith("tcp://"))

    def start(self) -> Gateway:
        self.endpoints = {}
        super().start()
        return self

    def on_line(self, line: str) -> None:
        if m := LISTENING.search(line):
            self.endpoints.setdefault(m[1], []).append(m[2])
        if SERVING in line:
            self.ready()


def connect(context: zmq.Context, endpoint: str, timeout_ms: int = 5000) -> Pipe:
    return Pipe(context, endpoint, timeout_ms)
