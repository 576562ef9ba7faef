"""Durable file-system primitives: fsync, atomic replace, directory creation.

Power-loss ordering used everywhere: write the file, fsync it, rename it into place,
fsync the directory that holds it. After the last step the file survives a crash under
its final name; before it, the final name does not exist at all.
"""

from __future__ import annotations

import errno
import os
import uuid
from pathlib import Path

from zosciimq.core.errors import StorageFull


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure_dir(path: Path) -> None:
    """mkdir -p, fsyncing each parent whose entry list changed, so the path survives a crash."""
    if path.is_dir():
        return
    missing = []
    probe = path
    while not probe.is_dir():
        missing.append(probe)
        probe = probe.parent
    for directory in reversed(missing):
        try:
            directory.mkdir()
        except FileExistsError:
            continue  # a concurrent creator won; it fsyncs the parent itself
        fsync_dir(directory.parent)


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so a reader or a crash sees the old or the new whole."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        unlink_quietly(tmp)
        raise_if_full(exc)
        raise
    fsync_dir(path.parent)


def raise_if_full(exc: OSError) -> None:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        raise StorageFull("No space left on the data volume; nothing was stored.") from exc


def unlink_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
