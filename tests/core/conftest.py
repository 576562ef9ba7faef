from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from zosciimq.core import DataDir, DataStore, QueueStore, Upload


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self, start: datetime = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


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
def publish(data_dir: DataDir, queues: QueueStore) -> Callable[..., str | None]:
    def _publish(queue: str, body: bytes, retention: int = 1, nonce: str | None = None):
        with Upload(data_dir) as upload:
            upload.write(body)
            return queues.publish(queue, upload, retention_days=retention, nonce=nonce).name

    return _publish
