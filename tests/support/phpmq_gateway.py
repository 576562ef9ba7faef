"""The PHPMQ gateway under test: a real process or in this one, and publishing to it."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from zoscii_phpmq.gateway import Gateway
from zoscii_phpmq.metrics import PhpmqMetrics
from zoscii_phpmq.settings import Settings

from tests.phpmq.wire import Client
from tests.support.service_process import ServiceProcess
from zosciimq.core import DataDir, QueueStore
from zosciimq.core.groups import ConsumerGroups, GroupStats, dead_letter_queue

T = TypeVar("T")


LISTENING = re.compile(r"listening for PHPMQ clients on [^ ]+:(\d+)")


class GatewayProcess(ServiceProcess):
    module = "zoscii_phpmq"
    what = "the gateway"

    def __init__(self, data_dir: Path, **settings: str) -> None:
        super().__init__(
            data_dir,
            {
                "ZOSCII_PHPMQ_HOST": "127.0.0.1",
                "ZOSCII_PHPMQ_PORT": "0",
                "ZOSCII_PHPMQ_METRICS_PORT": "0",
                **settings,
            },
        )
        self.port = 0

    def start(self) -> GatewayProcess:
        super().start()
        return self

    def on_line(self, line: str) -> None:
        if m := LISTENING.search(line):
            self.port = int(m[1])
            self.ready()

    def connect(self, source: str | None = None) -> Client:
        return Client(self.port, source=source)

    def wait_idle(self, timeout: float = 5.0) -> None:
        """Until the gateway has no connection open (those of earlier tests closed)."""
        self.wait_health("connections", 0, timeout)

    def wait_connections(self, count: int, timeout: float = 5.0) -> None:
        """Until /healthz counts ``count`` open connections (new accepted, closed gone)."""
        self.wait_health("connections", count, timeout)

    def wait_pending(self, count: int, timeout: float = 5.0) -> None:
        """Until /healthz counts ``count`` pending connections (no first message yet)."""
        self.wait_health("pending", count, timeout)

    # --- the data directory, through the core (as the api would see it) ------------------------
    def store(self) -> QueueStore:
        return QueueStore(DataDir(self.data_dir))

    def dead_letters(self, queue: str, group: str = "phpmq") -> list[bytes]:
        return [data for _, data in self.messages(dead_letter_queue(queue, group))]

    def groups(self) -> ConsumerGroups:
        data_dir = DataDir(self.data_dir)
        return ConsumerGroups(data_dir, QueueStore(data_dir))

    def wait_for_stats(
        self, queue: str, done: Callable[[GroupStats], bool], timeout: float = 5.0
    ) -> GroupStats:
        """The phpmq group's figures once ``done(figures)`` holds (the gateway applies a
        client's acks after they arrive), or the last ones read after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            stats = self.groups().stats(queue, "phpmq")
            if done(stats) or time.monotonic() > deadline:
                return stats
            time.sleep(0.02)

    def wait_for_messages(self, queue: str, count: int, timeout: float = 5.0) -> list[bytes]:
        deadline = time.monotonic() + timeout
        while True:
            got = [data for _, data in self.messages(queue)]
            if len(got) >= count or time.monotonic() > deadline:
                return got
            time.sleep(0.02)


class InProcessGateway:
    """The gateway's ``Gateway`` on an event loop of its own in a thread of the test's
    process, so a test can count what the core does for it (monkeypatched)."""

    def __init__(self, data_dir: Path, **env: str) -> None:
        settings = Settings.from_env(
            {"ZOSCII_DATA_DIR": str(data_dir), "ZOSCII_PHPMQ_HOST": "127.0.0.1", **env}
        )
        self.data_dir = data_dir
        self.metrics = PhpmqMetrics()
        self.gateway = Gateway(settings.with_overrides(port=0), self.metrics)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.port = 0

    def __enter__(self) -> InProcessGateway:
        self.thread.start()
        self.port = self._call(self.gateway.start())[1]
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._call(self.gateway.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(30)

    def connect(self) -> Client:
        return Client(self.port)

    def metric(self, name: str, **labels: str) -> float:
        value = self.metrics.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value


def publish(gateway: GatewayProcess, queue: str, *contents: bytes, ttl: int = 0) -> None:
    """Publish through a connection of its own and wait until they are visible."""
    from tests.phpmq import wire

    before = len(gateway.messages(queue.lower()))
    with gateway.connect() as client:
        for content in contents:
            client.send(wire.send(queue, content, ttl))
        got = gateway.wait_for_messages(queue.lower(), before + len(contents))
    assert len(got) == before + len(contents), got
