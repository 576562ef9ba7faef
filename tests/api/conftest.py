"""The api through the Flask test client (tests.support.api_app): a fresh data dir each,
the moment a request of it starts waiting for its queue (long-poll), and the message
bytes it wrote to disk."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from tests.support.api_app import make_client
from zoscii_api.waiting import QueueWatcher
from zosciimq.core.upload import Upload


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def client(data_dir: Path) -> FlaskClient:
    return make_client(data_dir)


@pytest.fixture
def parked(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Set once a request of an in-process api found nothing and waits for its queue to
    change: a test publishes after it, so that the publish is what wakes the request."""
    event = threading.Event()
    real_wait = QueueWatcher.wait

    def wait(self: QueueWatcher, queue: str, seen_generation: int, timeout: float) -> bool:
        event.set()
        return real_wait(self, queue, seen_generation, timeout)

    monkeypatch.setattr(QueueWatcher, "wait", wait)
    return event


class Written:
    """Message bytes written to uploads (queues/temp) while the test runs: ``total``, and
    ``chunks`` one length per write."""

    def __init__(self) -> None:
        self.chunks: list[int] = []

    @property
    def total(self) -> int:
        return sum(self.chunks)


@pytest.fixture
def written(monkeypatch: pytest.MonkeyPatch) -> Written:
    """What was written before a refusal: a refused request must write nothing."""
    seen = Written()
    real_write = Upload.write

    def write(self: Upload, chunk: bytes | bytearray | memoryview) -> None:
        seen.chunks.append(len(chunk))
        return real_write(self, chunk)

    monkeypatch.setattr(Upload, "write", write)
    return seen
