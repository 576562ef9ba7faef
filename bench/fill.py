"""Queues filled directly on disk, fast: valid names from the core, one tight loop of syscalls.

Publishing a million messages through HTTP would take longer than the benchmark itself;
a directory of ``.bin`` files with valid names is exactly what the api must handle
anyway (a volume written by the original, or restored from a backup), and the api
builds its index from it on the first request.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from zosciimq.core.layout import DataDir
from zosciimq.core.names import MAX_COUNTER, MessageName, format_stamp

log = logging.getLogger(__name__)

PROGRESS_EVERY = 100_000


def message_names(
    count: int, *, start: datetime | None = None, retention_days: int = 30
) -> list[str]:
    """``count`` strictly increasing message names, 10,000 per second from ``start`` on."""
    start = start or datetime.now(UTC) - timedelta(days=1)
    per_second = MAX_COUNTER + 1
    names: list[str] = []
    for second in range((count + per_second - 1) // per_second):
        stamp = format_stamp(start + timedelta(seconds=second))
        for counter in range(min(per_second, count - len(names))):
            names.append(str(MessageName(stamp, counter, retention_days, str(uuid.uuid4()))))
    return names


def fill_queue(
    data_dir: DataDir,
    queue: str,
    count: int,
    payload: bytes,
    *,
    only_at: Callable[[int], bool] | None = None,
) -> list[str]:
    """Write ``count`` messages into ``queues/<queue>/``; their names, sorted.

    With ``only_at``, only the positions it accepts get ``payload``, the rest are empty
    files: on a disk mounted with ``discard`` deleting a million files whose blocks were
    written back costs minutes, deleting empty ones seconds, and an api that fetches
    through its index never looks at the files it does not send.
    """
    directory = data_dir.queue_dir(queue)
    directory.mkdir(parents=True, exist_ok=True)
    names = message_names(count)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    began = time.perf_counter()
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for number, name in enumerate(names, 1):
            fd = os.open(name, flags, 0o644, dir_fd=dir_fd)
            if payload and (only_at is None or only_at(number - 1)):
                os.write(fd, payload)
            os.close(fd)
            if number % PROGRESS_EVERY == 0:
                log.info("filled %s: %d of %d files", queue, number, count)
    finally:
        os.close(dir_fd)
    elapsed = time.perf_counter() - began
    log.info(
        "filled %s with %d files in %.1f s (%.0f files/s)",
        queue,
        count,
        elapsed,
        count / elapsed if elapsed else 0,
    )
    return names


def write_messages(directory: Path, names: list[str], body: Callable[[int], bytes]) -> None:
    """Write ``names`` into ``directory``, ``body(position)`` each: a queue of either server."""
    directory.mkdir(parents=True, exist_ok=True)
    for number, name in enumerate(names):
        (directory / name).write_bytes(body(number))


def share_with(data_dir: Path, uid: int, gid: int) -> None:
    """chown every directory (not the files) to a container's user, so it can write in them."""
    for root, dirs, _files in os.walk(data_dir):
        os.chown(root, uid, gid)
        for name in dirs:
            os.chown(os.path.join(root, name), uid, gid)
