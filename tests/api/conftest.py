"""The api through the Flask test client (tests.support.api_app): a fresh data dir each,
and the moment a request of it starts waiting for its queue (long-poll)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from tests.support.api_app import make_client
from zoscii_api.waiting import QueueWatcher


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
