"""Durability modes, and the two background jobs that the write-ahead log needs.

``sync`` (the default) answers a commit after its log record is flushed, so an answered
message survives a power loss. ``interval`` answers after the writes and flushes the log
at most ``flush_interval`` later, as PostgreSQL's ``synchronous_commit = off`` and Redis'
``appendfsync everysec`` do: a process crash still loses nothing answered (the page
cache survives it), a power loss at most the last interval (docs/durability.md).

The **checkpointer** makes durable, in bulk, what commits wrote unflushed after their
log record (message files, directories, markers, index), with one ``syncfs`` of the
volume, and then moves each log's checkpoint past the records it covered, so recovery
never redoes them and their space is written again. It runs every ``checkpoint_seconds``
while there is something to checkpoint. The **flusher** (``interval`` only) flushes the
logs written since its last round.

Both are threads of the process that commits, started at its first commit (never at
import) and ended when idle; ``close`` runs a last round.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum

log = logging.getLogger(__name__)

IDLE_ROUNDS = 20  # rounds with nothing to do before a thread ends (the next use starts it)


CHECKPOINT_THREAD = "zoscii-checkpoint"  # the background checkpoint's thread name


class Mode(StrEnum):
    SYNC = "sync"
    INTERVAL = "interval"


@dataclass(frozen=True)
class Durability:
    """When a commit is answered, and how often the background jobs run."""

    mode: Mode = Mode.SYNC
    flush_interval: float = 0.010  # seconds, ``interval`` only
    checkpoint_seconds: float = 1.0
    # The volume is a network file system, shared by hosts: each commit also flushes the
    # queue's index, so another host reads it from the server, not a page cache here.
    shared: bool = False

    @property
    def relaxed(self) -> bool:
        return self.mode is Mode.INTERVAL


def _syncfs() -> Callable[[int], int] | None:
    """Linux's syncfs(2), which Python's os module does not offer."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_int,)
    return function


_SYNCFS = _syncfs()


def sync_volumes(paths: Iterable[str | os.PathLike[str]]) -> None:
    """Flush every file system holding one of ``paths``: their dirty data and metadata,
    in one journal commit each. (Without syncfs: sync(2), the whole machine.)"""
    seen: set[int] = set()
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        try:
            device = os.fstat(fd).st_dev
            if device in seen:
                continue
            seen.add(device)
            if _SYNCFS is None:
                os.sync()
                return
            if _SYNCFS(fd) != 0:
                number = ctypes.get_errno()
                raise OSError(number, os.strerror(number), os.fspath(path))
        finally:
            os.close(fd)


NETWORK_FILE_SYSTEMS = frozenset({"nfs", "nfs4", "cifs", "smb3", "glusterfs", "ceph", "lustre"})


def file_system_of(path: str | os.PathLike[str]) -> str:
    """The type of the file system holding ``path`` (``/proc/self/mountinfo``: the
    longest mount point that contains it); "" when it cannot be told."""
    try:
        target = os.path.realpath(path)
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as file:
            lines = file.read().splitlines()
    except OSError:
        return ""
    best, kind = "", ""
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, after = left.split(), right.split()
        if len(fields) < 5 or not after:
            continue
        point = fields[4].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, after[0]
    return kind


class _Rounds:
    """A daemon thread that runs ``round`` every ``period`` seconds while it has work,
    ends after ``IDLE_ROUNDS`` rounds without, and is started again by ``wake``."""

    def __init__(self, name: str, period: float, round_: Callable[[], bool]) -> None:
        self._name, self._period, self._round = name, period, round_
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def wake(self) -> None:
        with self._lock:  # (the thread ends holding it: a wake never finds it half gone)
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()

    def _run(self) -> None:
        idle = 0
        while not self._stop.wait(self._period):
            try:
                worked = self._round()
            except Exception:  # a full or failing volume: the next round tries again
                log.exception("%s: round failed", self._name)
                worked = True
            idle = 0 if worked else idle + 1
            if idle >= IDLE_ROUNDS:
                with self._lock:
                    if not self._round():  # nothing arrived meanwhile
                        self._thread = None
                        return
                    idle = 0

    def stop(self) -> None:
        """End the thread after a last round; a later ``wake`` starts it again."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
        with self._lock:
            self._thread = None
            self._stop.clear()
        with contextlib.suppress(Exception):
            self._round()


Advance = Callable[[object], None]  # moves one log's checkpoint to what it was given


class Checkpointer:
    """Checkpoints the logs this process wrote: one volume flush for all of them, then
    each log's checkpoint moved to where it was when the flush began."""

    def __init__(self, volume: Iterable[str | os.PathLike[str]], seconds: float) -> None:
        self.volume = list(volume)
        self._mutex = threading.Lock()
        self._due: dict[str, tuple[object, Advance]] = {}
        self._rounds = _Rounds(CHECKPOINT_THREAD, seconds, self.run)

    def note(self, key: str, position: object, advance: Advance) -> None:
        """After a commit (its lock still held, so everything before ``position`` is
        written): checkpoint ``key``'s log up to ``position`` in a coming round."""
        with self._mutex:
            self._due[key] = (position, advance)
        self._rounds.wake()

    def run(self) -> bool:
        """One round; whether there was anything to do."""
        with self._mutex:
            due, self._due = self._due, {}
        if not due:
            return False
        started = time.monotonic()
        sync_volumes(self.volume)
        for key, (position, advance) in due.items():
            try:
                advance(position)
            except FileNotFoundError:
                continue  # the queue was deleted meanwhile
            except OSError:
                log.warning("checkpoint of %s failed; its records stay to be redone", key)
        log.debug("checkpoint of %d logs in %.1f ms", len(due), 1000 * (time.monotonic() - started))
        return True

    def close(self) -> None:
        self._rounds.stop()


class Flusher:
    """``interval`` durability: flushes the logs written since its last round."""

    def __init__(self, interval: float) -> None:
        self._mutex = threading.Lock()
        self._dirty: set[str] = set()
        self._rounds = _Rounds("zoscii-wal-flush", interval, self.run)

    def note(self, path: str) -> None:
        with self._mutex:
            self._dirty.add(path)
        self._rounds.wake()

    def run(self) -> bool:
        with self._mutex:
            dirty, self._dirty = self._dirty, set()
        for path in dirty:
            # Its own descriptor (a committer may close and reopen the log's meanwhile):
            # fdatasync flushes the file's pages whoever wrote them.
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)
        return bool(dirty)

    def close(self) -> None:
        self._rounds.stop()
