"""An exclusive lock that holds across threads, processes and hosts sharing a volume.

``fcntl.lockf`` (POSIX record locks) is what NFS forwards to its lock manager, but its
locks belong to the process: two threads of one gunicorn worker would both "get" it.
So each lock path also has a process-wide ``threading.Lock`` in front of it. The kernel
drops a process's fcntl locks when it dies, so a kill -9 never leaves a lock held.

POSIX locks have a second trap: closing *any* descriptor of the file drops the process's
lock on it. So each lock file has one descriptor per process, opened at first use and
kept while it is in use (which saves an open and a close on every publish); it is closed
once no thread of the process has held or waited for it for ``IDLE_SECONDS`` (so an idle
api does not keep the volume busy for an unmount or a read-only remount), or when more
than ``keep`` locks are open. Use is counted explicitly from ``acquire`` to ``release``:
tying the descriptor's life to garbage collection raced (CPython runs ``__del__`` before
it clears the weak references through which another thread could still find the lock).
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
import time
import weakref
from collections import OrderedDict
from pathlib import Path
from types import TracebackType
from typing import Literal

IDLE_SECONDS = 2.0
Holder = Literal["", "here", "elsewhere"]  # who holds a lock (FileLock.holder)


class _ProcessLock:
    """The per-process part of one lock file: a thread lock, its descriptor, its users."""

    __slots__ = ("fd", "last_used", "path", "thread_lock", "users")

    def __init__(self, path: str) -> None:
        self.path = path
        self.thread_lock = threading.Lock()
        self.fd: int | None = None
        self.users = 0  # threads between acquire and release (waiting or holding)
        self.last_used = 0.0

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


class IdleCloser:
    """Open descriptors kept by a process and closed by a background thread once idle:
    the lock table here, a process's open queues (``queue_files.OpenQueues``). The owner
    has a ``_mutex``, says how to ``close_idle`` and whether it ``_holds_nothing``; the
    thread runs while the owner exists and holds something (the next use starts it again)."""

    _closer_name = "zoscii-idle"
    idle_seconds: float
    _mutex: threading.Lock
    _closer: threading.Thread | None

    def close_idle(self, older_than: float) -> int:
        raise NotImplementedError

    def _holds_nothing(self) -> bool:
        """Whether nothing is left to watch (the caller holds the mutex)."""
        raise NotImplementedError

    def _start_closer(self) -> None:
        """Start the idle-closing thread unless it runs (the caller holds the mutex)."""
        if self._closer is None:
            self._closer = threading.Thread(
                target=_close_idle_forever,
                args=(weakref.ref(self), self.idle_seconds),
                name=self._closer_name,
                daemon=True,
            )
            self._closer.start()


def _close_idle_forever(owner: weakref.ref[IdleCloser], idle_seconds: float) -> None:
    """Runs while its owner exists (a weak reference: it never keeps it alive) and holds
    something; the next use starts another."""
    while True:
        time.sleep(idle_seconds / 2)
        holder = owner()
        if holder is None:
            return
        holder.close_idle(idle_seconds)
        with holder._mutex:
            if holder._holds_nothing():
                holder._closer = None
                return
        del holder


class _LockTable(IdleCloser):
    """The one _ProcessLock per path in this process. Process-wide by necessity: every
    caller must share the thread lock and the descriptor of a path, or threads would not
    exclude each other and one close would drop another's lock. Locks unused for
    ``idle_seconds`` are closed and forgotten by a background thread, and beyond ``keep``
    paths the least recently used unused ones at once. Only a lock no thread holds or
    waits for (``users`` 0, counted under the mutex) is ever closed."""

    _closer_name = "zoscii-idle-locks"

    def __init__(self, keep: int = 256, idle_seconds: float = IDLE_SECONDS) -> None:
        self.keep = keep
        self.idle_seconds = idle_seconds
        self._mutex = threading.Lock()
        self._locks: OrderedDict[str, _ProcessLock] = OrderedDict()
        self._pid = os.getpid()
        self._closer: threading.Thread | None = None

    def enter(self, path: str) -> _ProcessLock:
        """The lock of ``path``, counted as used until ``leave``."""
        with self._mutex:
            if self._pid != os.getpid():  # a forked child: fcntl locks are not inherited
                self._locks = OrderedDict()
                self._pid = os.getpid()
                self._closer = None  # threads do not survive a fork
            lock = self._locks.get(path)
            if lock is None:
                lock = self._locks[path] = _ProcessLock(path)
                if len(self._locks) > self.keep:
                    self._forget_unused()
                self._start_closer()
            else:
                self._locks.move_to_end(path)
            lock.users += 1
            return lock

    def leave(self, lock: _ProcessLock) -> None:
        with self._mutex:
            lock.users -= 1
            lock.last_used = time.monotonic()

    def close_idle(self, older_than: float) -> int:
        """Close and forget the locks unused for ``older_than`` seconds; how many."""
        deadline = time.monotonic() - older_than
        with self._mutex:
            idle = [
                path
                for path, lock in self._locks.items()
                if not lock.users and lock.last_used <= deadline
            ]
            for path in idle:
                _close(self._locks.pop(path))
            return len(idle)

    def __len__(self) -> int:
        return len(self._locks)

    def _holds_nothing(self) -> bool:
        return not self._locks

    def open_descriptors(self) -> int:
        with self._mutex:
            return sum(lock.fd is not None for lock in self._locks.values())

    def _forget_unused(self) -> None:
        """Close the oldest unused locks down to ``keep`` (the caller holds the mutex)."""
        excess = len(self._locks) - self.keep
        for path in [p for p, lock in self._locks.items() if lock.users == 0][:excess]:
            _close(self._locks.pop(path))


def _close(lock: _ProcessLock) -> None:
    if lock.fd is not None:
        os.close(lock.fd)
        lock.fd = None


_TABLE = _LockTable()


def _fresh_table_in_child() -> None:
    """A forked child starts with a table of its own: only the forking thread survives a
    fork, so a mutex another thread (the idle closer) held at that moment would stay held
    for ever (a child that hung in CI), and the POSIX locks held were the parent's."""
    global _TABLE
    _TABLE = _LockTable(keep=_TABLE.keep, idle_seconds=_TABLE.idle_seconds)


os.register_at_fork(after_in_child=_fresh_table_in_child)


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

    def holder(self) -> Holder:
        """Who holds the lock at this moment: nobody (""), a thread of this process
        through any instance of the path ("here": the process-wide thread lock is
        taken), or another process ("elsewhere"). A hint for a caller that must not
        wait, such as an event loop: it may change at once. Costs two ``lockf`` calls
        when nobody holds it (taken and let go)."""
        lock = _TABLE.enter(self._key)
        try:
            who = _take_now(lock)
            if not who:
                _let_go(lock)
            return who
        finally:
            _TABLE.leave(lock)

    def try_acquire(self) -> bool:
        """Take the lock if nobody holds it, without waiting: False when it is held.

        For work that should be skipped rather than queued behind another holder
        (a replication job already running in another container).
        """
        lock = _TABLE.enter(self._key)
        try:
            taken = not _take_now(lock)
        except BaseException:
            _TABLE.leave(lock)
            raise
        if not taken:
            _TABLE.leave(lock)
            return False
        self._lock = lock
        return True

    def release(self) -> None:
        lock, self._lock = self._lock, None
        if lock is None:
            return
        try:
            _let_go(lock)
        finally:
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


def _take_now(lock: _ProcessLock) -> Holder:
    """Take ``lock`` (its thread lock, then the file's) if nobody holds it, without
    waiting: "" when the caller holds it now, else who does."""
    if not lock.thread_lock.acquire(blocking=False):
        return "here"
    try:
        fcntl.lockf(lock.descriptor(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException as exc:
        lock.thread_lock.release()
        if isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EAGAIN):
            return "elsewhere"
        raise
    return ""


def _let_go(lock: _ProcessLock) -> None:
    """Release what ``_take_now`` or ``acquire`` took: the file's lock, then the thread's."""
    try:
        if lock.fd is not None:
            fcntl.lockf(lock.fd, fcntl.LOCK_UN)
    finally:
        lock.thread_lock.release()


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
