"""The open files of each queue, kept between requests and closed when idle.

Opening a queue's lock, index, directory and write-ahead log on every publish cost four
opens and four closes per message. So each process keeps them open while a queue is in use:
``OpenQueues.use(queue)`` hands out its ``QueueFiles``, which stay open for
``IDLE_SECONDS`` after their last use and are then closed by a background thread (so a
process holding ten thousand queues does not hold ten thousand sets of descriptors,
and an idle api does not keep the volume busy for an unmount or a read-only remount).
The directory and index are checked against their paths under the queue lock and
reopened when they were replaced (a queue deleted and created again, an index rebuilt).
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from stat import S_ISDIR, S_ISLNK
from typing import Any

from zosciimq.core import index as idx
from zosciimq.core.durable import ensure_dir, names_inode
from zosciimq.core.group_commit import Lane
from zosciimq.core.layout import DataDir
from zosciimq.core.locking import FileLock, Holder, IdleCloser
from zosciimq.core.wal import WriteAheadLog
from zosciimq.errors import QueueNotFound, QueueUnusable

log = logging.getLogger(__name__)

IDLE_SECONDS = 2.0


class SharedIndex:
    """A queue's index file, opened once and read by every thread of the process.

    Dropped when a rebuild replaced it; its descriptor is closed once the last reader
    still using it is done, never under a reader's feet (the number could be reused).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._mutex = threading.Lock()
        self._current: idx.IndexFile | None = None
        self._users: dict[idx.IndexFile, int] = {}
        self._retired: set[idx.IndexFile] = set()

    def borrow(self, *, create: bool = False) -> idx.IndexFile | None:
        """The open index (None when there is none and ``create`` is false); give it back."""
        with self._mutex:
            index = self._current
            if index is None:
                try:
                    index = idx.IndexFile.open(self.path, create=create)
                except OSError as exc:
                    if exc.errno != errno.ELOOP or create:
                        raise
                    index = None  # a link: treated as missing, the lock holder removes it
                if index is None:
                    return None
                self._current = index
            self._users[index] = self._users.get(index, 0) + 1
            return index

    def give_back(self, index: idx.IndexFile | idx.ListedIndex) -> None:
        if isinstance(index, idx.ListedIndex):
            return  # a listing in memory: nothing to close
        with self._mutex:
            left = self._users[index] - 1
            if left:
                self._users[index] = left
                return
            del self._users[index]
            if index in self._retired:
                self._retired.discard(index)
                index.close()

    def drop(self) -> None:
        """Forget the open file (replaced on disk): the next borrow opens the path."""
        with self._mutex:
            old, self._current = self._current, None
            if old is None:
                return
            if old in self._users:
                self._retired.add(old)
            else:
                old.close()


class QueueFiles:
    """One queue's paths and open descriptors, and the lane its publishers take."""

    def __init__(self, data_dir: DataDir, name: str) -> None:
        self.name = name
        self.dir = str(data_dir.queue_dir(name))
        self.index_path = str(data_dir.index_path(name))
        self.wal_path = str(data_dir.wal_path(name))
        self.lock = FileLock(data_dir.queue_lock_path(name))
        self.index = SharedIndex(self.index_path)
        self._dir_fd: int | None = None
        self._dir_ino = 0
        self._wal: WriteAheadLog | None = None
        # The log was looked at since this process started (core.recovery): a reader
        # checks once whether a crash left records to redo, then trusts the index.
        self.wal_checked = False
        self._ttl_fd: int | None = None
        self._ttl_ino = 0
        # (index inode, committed, dir mtime, dir inode) of the header this process's last
        # commit left: while the index still says that, nobody else wrote records since,
        # and the tail need not be read back to know it is sound (QueueStore._recover).
        self.own_commit: tuple[int, int, int, int] | None = None
        self.ttl_path = str(data_dir.ttl_path(name))
        self.usage_path = str(data_dir.usage_path(name))  # policy counts (core.limits)
        self.expiries = ExpiryTable(self.ttl_path)
        self.listed: idx.ListedIndex | None = None  # read-only volumes, see QueueStore
        self.lane: Lane[Any, Any] = Lane()  # this process's publishers (core.group_commit)
        self.users = 0
        self.last_used = time.monotonic()

    def dir_stat(self) -> os.stat_result:
        """The queue directory's own stat: a link planted in queues/ is no queue of ours
        (it would read and write outside the data directory)."""
        try:
            stat = os.lstat(self.dir)
        except FileNotFoundError:
            raise QueueNotFound(f"Queue '{self.name}' not found.") from None
        if not S_ISDIR(stat.st_mode):
            log.warning("queues/%s is not a directory (a link?): not served", self.name)
            raise QueueNotFound(f"Queue '{self.name}' not found.")
        return stat

    def made_dir_stat(self) -> os.stat_result:
        """The directory's stat (lock held), the directory created when missing."""
        try:
            return self.dir_stat()
        except QueueNotFound:
            if os.path.lexists(self.dir):
                raise QueueUnusable(
                    f"Queue '{self.name}' cannot be used: its path is not a directory "
                    "of this server's data directory."
                ) from None
            ensure_dir(Path(self.dir))
            return self.dir_stat()

    def locked_index(self) -> idx.IndexFile:
        """The queue's current index file (lock held), created when missing."""
        try:
            on_disk = os.lstat(self.index_path)
            if S_ISLNK(on_disk.st_mode):  # not ours: never followed, replaced by a rebuild
                log.warning("%s is a link: removed", self.index_path)
                os.unlink(self.index_path)
                raise FileNotFoundError
            on_disk_ino: int | None = on_disk.st_ino
        except FileNotFoundError:
            ensure_dir(os.path.dirname(self.index_path))
            on_disk_ino = None
        index = self.index.borrow(create=True)
        assert index is not None
        if on_disk_ino is not None and index.ino == on_disk_ino and index.writable:
            return index
        # An orphan (deleted or replaced behind our back), or opened read-only while the
        # volume was: open the path again.
        self.index.give_back(index)
        self.index.drop()
        index = self.index.borrow(create=True)
        assert index is not None
        return index

    def lock_holder(self) -> Holder:
        """Who holds the queue lock now (``FileLock.holder``; a kill -9 releases it). On
        a volume that cannot be written nobody can be publishing."""
        try:
            return self.lock.holder()
        except OSError as exc:
            if exc.errno in idx.READ_ONLY_ERRORS:
                return ""
            raise

    def lock_is_held(self) -> bool:
        """Whether a publisher, of this process or another, holds the queue lock now."""
        return bool(self.lock_holder())

    def dir_fd(self, ino: int) -> int:
        """The queue directory, open (lock held); ``ino`` is what the path is now."""
        if self._dir_fd is None or self._dir_ino != ino:
            self._close_fd("_dir_fd")
            flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
            self._dir_fd = os.open(self.dir, flags)
            self._dir_ino = os.fstat(self._dir_fd).st_ino
        return self._dir_fd

    def wal(self, *, create: bool = True) -> WriteAheadLog | None:
        """The queue's write-ahead log (lock held), made when missing, reopened when its
        file was removed or replaced (a deleted queue, an operator clearing .zoscii):
        recovery reads the path, so the records must go there."""
        if self._wal is not None and not names_inode(self.wal_path, self._wal.ino):
            self._wal.close()
            self._wal = None
        if self._wal is None:
            self._wal = WriteAheadLog.open(self.wal_path, create=create)
        return self._wal

    def ttl_fd(self) -> int:
        """The queue's expiry times, appended to (lock held)."""
        if self._ttl_fd is not None and not names_inode(self.ttl_path, self._ttl_ino):
            self._close_fd("_ttl_fd")
        if self._ttl_fd is None:
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
            self._ttl_fd = os.open(self.ttl_path, flags, 0o644)
            self._ttl_ino = os.fstat(self._ttl_fd).st_ino
        return self._ttl_fd

    def close(self) -> None:
        self._close_fd("_dir_fd")
        self._close_fd("_ttl_fd")
        if self._wal is not None:
            self._wal.close()
            self._wal = None
        self.index.drop()

    def _close_fd(self, attribute: str) -> None:
        fd = getattr(self, attribute)
        if fd is not None:
            setattr(self, attribute, None)
            os.close(fd)

    def __del__(self) -> None:  # dropped without close(): no descriptor leaks
        self.close()


class ExpiryTable:
    """The ``<queue>.ttl`` file read into a dict, a little more at each call.

    Lines are ``<name> <expiry in ms>`` and are only ever appended (claireup rewrites
    the file whole to drop the names of deleted messages: then it is read again).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._mutex = threading.Lock()
        self._ino = 0
        self._offset = 0
        self._partial = b""
        self._table: dict[str, float] = {}

    def lookup(self, names: Iterable[str]) -> dict[str, float]:
        """The expiry of each of ``names`` that has one."""
        with self._mutex:
            self._refresh()
            return {name: self._table[name] for name in names if name in self._table}

    def _refresh(self) -> None:
        """Read what was appended since the last call (mutex held)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            self._ino, self._offset, self._partial, self._table = 0, 0, b"", {}
            return
        try:
            stat = os.fstat(fd)
            if stat.st_ino != self._ino or stat.st_size < self._offset:
                self._ino, self._offset, self._partial, self._table = stat.st_ino, 0, b"", {}
            while chunk := os.pread(fd, 1 << 16, self._offset):
                self._offset += len(chunk)
                lines = (self._partial + chunk).split(b"\n")
                self._partial = lines.pop()
                for line in lines:
                    name, _, millis = line.decode("ascii", "replace").partition(" ")
                    if millis.isdigit():
                        self._table[name] = int(millis) / 1000
        finally:
            os.close(fd)


class OpenQueues(IdleCloser):
    """The QueueFiles a process keeps open, at most ``limit`` of them at once."""

    _closer_name = "zoscii-idle-queues"

    def __init__(self, data_dir: DataDir, idle_seconds: float = IDLE_SECONDS) -> None:
        self.data_dir = data_dir
        self.idle_seconds = idle_seconds
        self._open: dict[str, QueueFiles] = {}
        self._mutex = threading.Lock()
        self._closer: threading.Thread | None = None
        soft_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        # Five descriptors per open queue; beyond the limit a queue's files live one call.
        self.limit = 1024 if soft_limit < 0 else max(16, min(1024, soft_limit // 10))

    @contextmanager
    def use(self, queue: str) -> Iterator[QueueFiles]:
        files, kept = self._take(queue)
        try:
            yield files
        finally:
            if kept:
                with self._mutex:
                    files.users -= 1
                    files.last_used = time.monotonic()
            else:
                files.close()

    def _take(self, queue: str) -> tuple[QueueFiles, bool]:
        with self._mutex:
            files = self._open.get(queue)
            if files is None:
                files = QueueFiles(self.data_dir, queue)
                if len(self._open) >= self.limit:
                    return files, False
                self._open[queue] = files
                self._start_closer()
            files.users += 1
            return files, True

    def close_idle(self, older_than: float) -> int:
        """Close the files of queues unused for ``older_than`` seconds; how many closed."""
        deadline = time.monotonic() - older_than
        with self._mutex:
            idle = [q for q, f in self._open.items() if not f.users and f.last_used <= deadline]
            closing = [self._open.pop(queue) for queue in idle]
        for files in closing:
            files.close()
        return len(closing)

    def close(self) -> None:
        self.close_idle(older_than=-1.0)

    def _holds_nothing(self) -> bool:
        return not self._open
