"""A real live-service process (``python -m zoscii_live``) on a data directory."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.queues import publish_body
from tests.support.service_process import ServiceProcess
from zosciimq.core import DataDir, QueueStore

LISTENING = re.compile(r"live service on [^ ]+:(\d+) \(watch: (\w+)\)")


class LiveProcess(ServiceProcess):
    module = "zoscii_live"
    what = "the live service"

    def __init__(self, data_dir: Path, **settings: str) -> None:
        super().__init__(
            data_dir, {"ZOSCII_LIVE_HOST": "127.0.0.1", "ZOSCII_LIVE_PORT": "0", **settings}
        )
        self.port = 0
        self.watch = ""
        self._store: QueueStore | None = None

    def restart(self) -> LiveProcess:
        """Start again on the same port (after ``kill`` or ``terminate``)."""
        self.env["ZOSCII_LIVE_PORT"] = str(self.port)
        return self.start()

    def start(self) -> LiveProcess:
        self.port = 0
        super().start()
        return self

    def on_line(self, line: str) -> None:
        if m := LISTENING.search(line):
            self.port, self.watch = int(m[1]), m[2]
            self.ops_port = self.port  # one port serves readers, /healthz and /metrics
            self.ready()

    def started(self) -> bool:
        return bool(self.port)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    # --- publishing, as the api does -------------------------------------------------------
    @property
    def store(self) -> QueueStore:
        if self._store is None:
            self._store = QueueStore(DataDir(self.data_dir), default_retention_days=1)
        return self._store

    def publish(self, queue: str, *contents: bytes) -> list[str]:
        names = []
        for content in contents:
            result = publish_body(self.store, queue, content)
            assert result.name is not None
            names.append(result.name)
        return names


def live_service(
    tmp_path_factory: pytest.TempPathFactory, **settings: str
) -> Iterator[LiveProcess]:
    """A service on a data directory of its own, with ``settings`` (environment
    variables), killed after the tests that use it: a module fixture's body."""
    data = tmp_path_factory.mktemp("live-data")
    DataDir(data).ensure()
    process = LiveProcess(data, **settings).start()
    try:
        yield process
    finally:
        process.kill()
