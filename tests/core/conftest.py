from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.clock import FakeClock
from tests.support.queues import publish_body
from zosciimq.core import DataDir, DataStore, QueueStore


@pytest.fixture
def data_dir(tmp_path: Path) -> DataDir:
    layout = DataDir(tmp_path / "data")
    layout.ensure()
    return layout


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def queues(data_dir: DataDir, clock: FakeClock) -> QueueStore:
    return QueueStore(data_dir, clock=clock)


@pytest.fixture
def store(data_dir: DataDir, clock: FakeClock) -> DataStore:
    return DataStore(data_dir, clock=clock)


@pytest.fixture
def publish(queues: QueueStore) -> Callable[..., str | None]:
    """``publish(queue, body, retention=1, nonce=None)``: the new message's name."""

    def _publish(queue: str, body: bytes, retention: int = 1, nonce: str | None = None):
        return publish_body(queues, queue, body, retention, nonce).name

    return _publish
