"""Message files written on disk by name, as the original or a crash-free publish leaves them."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime
from pathlib import Path

from zosciimq.core import DataDir, MessageName
from zosciimq.core.names import format_stamp


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
