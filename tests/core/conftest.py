from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support.queues import publish_body
from zosciimq.core import DataDir, DataStore, QueueStore, Upload
from zosciimq.core.outgoing import Outgoing


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
def publish(queues: QueueStore) -> Callable[..., str | None]:
    """``publish(queue, body, retention=1, nonce=None)``: the new message's name."""

    def _publish(queue: str, body: bytes, retention: int = 1, nonce: str | None = None):
        return publish_body(queues, queue, body, retention, nonce).name

    return _publish


def uploads_of(data_dir: DataDir, bodies: list[bytes]) -> list[Upload]:
    uploads = []
    for body in bodies:
        upload = Upload(data_dir)
        upload.write(body)
        uploads.append(upload)
    return uploads


def publish_many(queues: QueueStore, data_dir: DataDir, queue: str, bodies, nonces=None, days=1):
    """``bodies`` in one group commit (``QueueStore.publish_many``); their results."""
    uploads = uploads_of(data_dir, bodies)
    try:
        nonces = nonces or [None] * len(bodies)
        messages = [Outgoing(u, days, n) for u, n in zip(uploads, nonces, strict=True)]
        return queues.publish_many(queue, messages)
    finally:
        for upload in uploads:
            upload.discard()
