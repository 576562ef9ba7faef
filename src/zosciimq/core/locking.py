"""An exclusive lock that holds across threads, processes and hosts sharing a volume.

``fcntl.lockf`` (POSIX record locks) is what NFS forwards to its lock manager, but its
locks belong to the process: two threads of one gunicorn worker would both "get" it.
So each lock path also has a process-wide ``threading.Lock`` in front of it. The kernel
drops a process's fcntl locks when it dies, so a kill -9 never leaves a lock held.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
import time
from pathlib import Path
from types import TracebackType

# Process-wide by necessity: the thread lock for a path must be the same object for
# every caller in this process, or threads would not exclude each other.
_thread_locks: dict[str, threading.Lock] = {}
_registry_lock = threading.Lock()


def _thread_lock_for(path: str) -> threading.Lock:
    with _registry_lock:
        lock = _thread_locks.get(path)
        if lock is None:
            lock = _thread_locks[path] = threading.Lock()
        return lock


class FileLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._thread_lock = _thread_lock_for(str(path))
        self._fd: int | None = None

    def _open(self) -> int:
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)

    def acquire(self) -> None:
        self._thread_lock.acquire()
        try:
            fd = self._open()
            try:
                _lock_waiting(fd)
            except BaseException:
                os.close(fd)
                raise
            self._fd = fd
        except BaseException:
            self._thread_lock.release()
            raise

    def try_acquire(self) -> bool:
        """Take the lock if nobody holds it, without waiting: False when it is held.

        For work that should be skipped rather than queued behind another holder
        (a replication job already running in another container).
        """
        if not self._thread_lock.acquire(blocking=False):
            return False
        try:
            fd = self._open()
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EACCES, errno.EAGAIN):
                    self._thread_lock.release()
                    return False
                raise
            self._fd = fd
            return True
        except BaseException:
            if self._fd is None:
                self._thread_lock.release()
            raise

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                fcntl.lockf(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
                self._thread_lock.release()

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def _lock_waiting(fd: int) -> None:
    """``lockf(LOCK_EX)``, retrying the kernel's false deadlock reports.

    POSIX locks belong to processes, so when threads of two processes each hold one lock
    and wait for another (nonce shard, then queue), the kernel sees a cycle between the
    two *processes* and fails with EDEADLK, although the holders are different threads
    that will release in order. Every caller takes locks in one global order (nonce, then
    queue), so a real deadlock cannot happen: wait a moment and try again.
    """
    while True:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX)
            return
        except OSError as exc:
            if exc.errno != errno.EDEADLK:
                raise
            time.sleep(0.001)
