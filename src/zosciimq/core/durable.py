"""Durable file-system primitives: fsync, atomic replace, directory creation.

Power-loss ordering used everywhere: write the file, fsync it, rename it into place,
fsync the directory that holds it. After the last step the file survives a crash under
its final name; before it, the final name does not exist at all.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from zosciimq.core.layout import leftover_path
from zosciimq.errors import StorageFull


def fsync_dir(path: str | os.PathLike[str]) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_file_range() -> object | None:
    """Linux's sync_file_range(2), which Python's os module does not offer."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    return function


_START_WRITEBACK = _sync_file_range()
_SYNC_FILE_RANGE_WRITE = 2


def sync_files(fds: Sequence[int]) -> None:
    """fdatasync every file, starting all their writeback first.

    One fdatasync after another would wait for each file's data and a journal commit in
    turn; telling the kernel to start writing all of them first lets the file system
    carry them in one or two commits (100 small files: about 3x faster here). Only a
    hint: the fdatasync of each file is what makes it durable, on every platform.
    """
    if len(fds) > 1 and _START_WRITEBACK is not None:
        for fd in fds:
            _START_WRITEBACK(fd, 0, 0, _SYNC_FILE_RANGE_WRITE)  # type: ignore[operator]
    for fd in fds:
        os.fdatasync(fd)


def ensure_dir(path: str | os.PathLike[str]) -> None:
    """mkdir -p, fsyncing each parent whose entry list changed, so the path survives a crash."""
    path = Path(path)
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
    tmp = leftover_path(path)
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
    error = storage_error(exc)
    if error is not exc:
        raise error


def storage_error(exc: BaseException) -> BaseException:
    """StorageFull (a clear 507) for a full volume's OSError, else ``exc`` itself."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        full = StorageFull("No space left on the data volume; nothing was stored.")
        full.__cause__ = exc
        return full
    return exc


def names_inode(path: str | os.PathLike[str], ino: int) -> bool:
    """Whether ``path`` still names inode ``ino`` (a file opened earlier was not removed
    or replaced since): one lstat, as a descriptor's inode never changes."""
    try:
        return os.lstat(path).st_ino == ino
    except FileNotFoundError:
        return False


def unlink_quietly(path: str | os.PathLike[str]) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
