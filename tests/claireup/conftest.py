"""A data directory on real disk, a controllable clock, and message files written by name."""

from __future__ import annotations

import os
import threading
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from zoscii_claireup.cleaner import Cleaner
from zosciimq.core import DataDir, MessageName
from zosciimq.core.names import format_stamp


class Clock:
    """The time the code under test sees; tests move it by hand."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def message_name(published: datetime, retention_days: int, *, unidentified: bool = False) -> str:
    return str(
        MessageName(
            stamp=format_stamp(published),
            counter=0,
            retention_days=retention_days,
            guid=str(uuid.uuid4()),
            unidentified=unidentified,
        )
    )


def write_queue_message(
    data_dir: DataDir, queue: str, published: datetime, retention_days: int, body: bytes = b"x"
) -> Path:
    """A message as the original implementation or a crash-free publish leaves it on disk."""
    path = data_dir.queue_dir(queue) / message_name(published, retention_days)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body)
    return path


def write_store_message(
    data_dir: DataDir,
    published: datetime,
    retention_days: int,
    body: bytes = b"x",
    *,
    unidentified: bool = False,
) -> Path:
    name = MessageName(
        stamp=format_stamp(published),
        counter=0,
        retention_days=retention_days,
        guid=str(uuid.uuid4()),
        unidentified=unidentified,
    )
    path = data_dir.store_path(str(name), name.store_dirs)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body)
    return path


def set_mtime(path: Path, moment: datetime) -> None:
    os.utime(path, (moment.timestamp(), moment.timestamp()))


def all_files(root: Path) -> set[Path]:
    return {Path(d) / f for d, _dirs, files in os.walk(root) for f in files}


@pytest.fixture
def data_dir(tmp_path: Path) -> DataDir:
    data = DataDir(tmp_path / "data")
    data.ensure()
    return data


@pytest.fixture
def clock() -> Clock:
    return Clock(utc(2025, 6, 15, 12, 0, 0))


@pytest.fixture
def make_cleaner(data_dir: DataDir, clock: Clock):
    def make(**overrides: object) -> Cleaner:
        options: dict = {
            "nonce_window_seconds": 300,
            "temp_max_age_seconds": 86_400,
            "clock": clock,
            "stop": threading.Event(),
        }
        options.update(overrides)
        return Cleaner(data_dir, **options)

    return make
