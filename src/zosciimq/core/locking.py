"""An exclusive lock that holds across threads, processes and hosts sharing a volume.

``fcntl.lockf`` (POSIX record locks) is what NFS forwards to its lock manager, but its
locks belong to the process: two threads of one gunicorn worker would both "get" it.
So each lock path also has a process-wide ``threading.Lock`` in front of it. The kernel
drops a process's fcntl locks when it dies, so a kill -9 never leaves a lock held.

POSIX locks have a second trap: closing *any* descriptor of the file drops the process's
lock on it. So each lock file has one descriptor per process, opened at first use and
kept (which also saves an open and a close on every publish) until the file is among
the least recently used beyond ``_LockTable.keep`` *and* no thread of the process holds
or waits for it. Use is counted explicitly from ``acquire`` to ``release``: tying the
descriptor's life to garbage collection raced (CPython runs ``__del__`` before it clears
the weak references through which another thread could still find the dying lock).
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
import time
from collections import OrderedDict
from pathlib import Path
from types import TracebackType


class _ProcessLock:
    """The per-process part of one lock file: a thread lock, its descriptor, its users."""

    __slots__ = ("fd", "path", "thread_lock", "users")

    def __init__(self, path: str) -> None:
        self.path = path
        self.thread_lock = threading.Lock()
        self.fd: int | None = None
        self.users = 0  # threads between acquire and release (waiting or holding)

    def descriptor(self) -> int:
        """The open lock file (the caller holds the thread lock)."""
        if self.fd is None:
            flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
            try:
                self.fd = os.open(self.path, flags, 0o644)
            except FileNotFoundError:
                os.makedirs(os.path.dirname(self.path), exist_ok=True)
                self.fd = os.open(self.path, flags, 0o644)
        return self.fd


class _LockTable:
    """The one _ProcessLock per path in this process. Process-wide by necessity: every
    caller must share the thread lock and the descriptor of a path, or threads would not
    exclude each other and one close would drop another's lock. Bounded: beyond ``keep``
    paths, the least recently used idle ones are closed and forgotten."""

    def __init__(self, keep: int = 256) -> None:
        self.keep = keep
        self._mutex = threading.Lock()
        self._locks: OrderedDict[str, _ProcessLock] = OrderedDict()
        self._pid = os.getpid()

    def enter(self, path: str) -> _ProcessLock:
        """The lock of ``path``, counted as used until ``leave``."""
        with self._mutex:
            if self._pid != os.getpid():  # a forked child: fcntl locks are not inherited
                self._locks = OrderedDict()
                self._pid = os.getpid()
            lock = self._locks.get(path)
            if lock is None:
                lock = self._locks[path] = _ProcessLock(path)
                if len(self._locks) > self.keep:
                    self._forget_idle()
            else:
                self._locks.move_to_end(path)
            lock.users += 1
            return lock

    def leave(self, lock: _ProcessLock) -> None:
        with self._mutex:
            lock.users -= 1

    def __len__(self) -> int:
        return len(self._locks)

    def open_descriptors(self) -> int:
        with self._mutex:
            return sum(lock.fd is not None for lock in self._locks.values())

    def _forget_idle(self) -> None:
        """Close the oldest unused locks down to ``keep`` (the caller holds the mutex).
        Nobody in the process holds or waits for them, so no lock of ours is dropped."""
        excess = len(self._locks) - self.keep
        for path in [p for p, lock in self._locks.items() if lock.users == 0][:excess]:
            lock = self._locks.pop(path)
            if lock.fd is not None:
                os.close(lock.fd)


_TABLE = _LockTable()


class FileLock:
    """One exclusive lock on ``path``. An instance may be shared by threads (a queue's
    cached handle is): the thread lock behind it serialises them."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._key = str(path)
        self._lock: _ProcessLock | None = None  # set while held

    def acquire(self) -> None:
        lock = _TABLE.enter(self._key)
        try:
            lock.thread_lock.acquire()
            try:
                _lock_waiting(lock.descriptor())
            except BaseException:
                lock.thread_lock.release()
                raise
        except BaseException:
            _TABLE.leave(lock)
            raise
        self._lock = lock

    def try_acquire(self) -> bool:
        """Take the lock if nobody holds it, without waiting: False when it is held.

        For work that should be skipped rather than queued behind another holder
        (a replication job already running in another container).
        """
        lock = _TABLE.enter(self._key)
        taken = False
        try:
            if lock.thread_lock.acquire(blocking=False):
                try:
                    fcntl.lockf(lock.descriptor(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    taken = True
                except OSError as exc:
                    if exc.errno not in (errno.EACCES, errno.EAGAIN):
                        raise
                finally:
                    if not taken:
                        lock.thread_lock.release()
        finally:
            if not taken:
                _TABLE.leave(lock)
        if taken:
            self._lock = lock
        return taken

    def release(self) -> None:
        lock, self._lock = self._lock, None
        if lock is None:
            return
        try:
            if lock.fd is not None:
                fcntl.lockf(lock.fd, fcntl.LOCK_UN)
        finally:
            lock.thread_lock.release()
            _TABLE.leave(lock)

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


class LockSet:
    """Several locks taken in one global order (sorted paths) and released together."""

    def __init__(self, paths: list[str]) -> None:
        self._locks = [FileLock(path) for path in sorted(set(paths))]
        self._taken: list[FileLock] = []

    def __enter__(self) -> LockSet:
        try:
            for lock in self._locks:
                lock.acquire()
                self._taken.append(lock)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        while self._taken:
            self._taken.pop().release()


def _lock_waiting(fd: int) -> None:
    """``lockf(LOCK_EX)``, retrying the kernel's false deadlock reports.

    POSIX locks belong to processes, so when threads of two processes each hold one lock
    and wait for another (nonce shard, then queue), the kernel sees a cycle between the
    two *processes* and fails with EDEADLK, although the holders are different threads
    that will release in order. Every caller takes locks in one global order (nonce
    shards sorted, then queue), so a real deadlock cannot happen: wait and try again.
    """
    while True:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX)
            return
        except OSError as exc:
            if exc.errno != errno.EDEADLK:
                raise
            time.sleep(0.001)
