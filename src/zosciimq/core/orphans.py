"""The core's own files of a queue that no longer exists: when they may go.

A queue's index, write-ahead log and sidecars (``.zoscii/index/<q>.idx``, ``.wal``, ``.ttl``,
``.usage``) belong to its directory. An operator who removes ``queues/<q>/`` (or the
original PHP server, which knows nothing of them) leaves them behind; they are safe to
delete only when, under the queue lock, the directory is still gone: a publisher creates
the directory before it takes that lock to commit, so then nobody is using them, and a
queue made anew meanwhile keeps its files. Lock files are never deleted (a process
waiting on the old inode would hold a lock a newcomer also holds).

The rule is the disk format's, so it lives here; claireup only decides when to apply it
(``forget_if_vanished`` per entry of ``walk.iter_index_files``) and counts the result.
"""

from __future__ import annotations

import os

from zosciimq.core.layout import DataDir
from zosciimq.core.locking import FileLock
from zosciimq.core.walk import Found, Kind

QUEUE_FILES = frozenset({Kind.INDEX, Kind.JOURNAL, Kind.WAL, Kind.SIDECAR})


def forget_if_vanished(data_dir: DataDir, found: Found, *, dry_run: bool = False) -> int | None:
    """Delete ``found`` (an entry of ``walk.iter_index_files``) when it is a queue's
    index, journal or sidecar and the queue's directory is gone: its size in bytes, or
    None when it stays (another kind, a live queue, already gone). ``dry_run``: the size
    it would free, nothing deleted, no lock taken. Other OSErrors are raised."""
    queue = found.queue
    if found.kind not in QUEUE_FILES or not queue or data_dir.queue_dir(queue).exists():
        return None
    if dry_run:
        return _size(found.path)
    with FileLock(data_dir.queue_lock_path(queue)):
        if data_dir.queue_dir(queue).exists():
            return None  # made anew since the listing: its files are in use again
        size = _size(found.path)
        if size is None:
            return None
        try:
            os.unlink(found.path)
        except FileNotFoundError:
            return None
        return size


def _size(path: str) -> int | None:
    try:
        return os.lstat(path).st_size
    except FileNotFoundError:
        return None
