"""Queues: publish with strictly increasing names, fetch by pointer in name order.

The guarantee that matters most (PROTOCOL.md 3, "Visibility order"): a consumer that
fetches by pointer sees every acknowledged message exactly once, in name order, while
publishers run concurrently in many workers, processes and containers.

How: all publishes to a queue serialise on one lock file (an fcntl lock, so it holds
across processes and NFS clients). Under that lock a publisher allocates a name above
every name allocated before, renames the fsynced upload into place, fsyncs the directory
and only then appends the name to the queue's index. Fetch reads only the index, so a
message becomes visible strictly after every lower name did; nobody can see ``B`` and
later find an ``A < B`` appear.

The slow part, fsyncing the content, happens before the lock is taken.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from zosciimq.core import index as idx
from zosciimq.core.durable import ensure_dir, raise_if_full, unlink_quietly
from zosciimq.core.errors import QueueNotFound, TryAgain
from zosciimq.core.layout import DataDir
from zosciimq.core.locking import FileLock
from zosciimq.core.names import MAX_COUNTER, MessageName, format_stamp, is_message_name
from zosciimq.core.nonces import Nonces
from zosciimq.core.upload import Upload

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class PublishResult:
    name: str | None  # None when the nonce had been used: nothing was written
    duplicate: bool = False


@dataclass
class FetchResult:
    """Either an open message (the caller closes ``file``) or why there is none."""

    name: str = ""
    file: BinaryIO | None = None
    size: int = 0
    queue_empty: bool = False  # no message at all (vs. nothing after the pointer)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


class _Queue:
    """The paths of one queue."""

    def __init__(self, data_dir: DataDir, name: str) -> None:
        self.name = name
        self.dir: Path = data_dir.queue_dir(name)
        self.index_path: Path = data_dir.index_path(name)
        self.lock_path: Path = data_dir.queue_lock_path(name)

    def lock(self) -> FileLock:
        return FileLock(self.lock_path)


class QueueStore:
    def __init__(self, data_dir: DataDir, clock: Clock = utc_now) -> None:
        self.data_dir = data_dir
        self.clock = clock
        self.nonces = Nonces(data_dir)

    # --- publish -------------------------------------------------------------------
    def publish(
        self, queue: str, upload: Upload, *, retention_days: int, nonce: str | None = None
    ) -> PublishResult:
        """Make ``upload`` the next message of ``queue``; durable when this returns.

        ``queue``, ``retention_days`` and ``nonce`` must already be clean (names.clean_*).
        With a nonce that was used before (by any queue or the store) nothing is written.
        """
        upload.sync()
        q = _Queue(self.data_dir, queue)
        try:
            ensure_dir(q.dir)
            with self.nonces.lock(nonce), q.lock(), self._open_index(q) as index:
                header = self._recover(q, index)
                if nonce is not None and self.nonces.used(nonce):
                    return PublishResult(name=None, duplicate=True)
                name = self._next_name(header.last, retention_days)
                header.last, header.pending, header.pending_nonce = name, name, nonce or ""
                index.write_header(header)
                upload.commit(q.dir / name)
                try:
                    self._finish(q, index, header)
                except OSError:
                    self._roll_back(q, index, header)
                    raise
                return PublishResult(name=name)
        except OSError as exc:
            raise_if_full(exc)
            raise

    def _next_name(self, last: str, retention_days: int) -> str:
        """A name above every name ever allocated here, also when the clock steps back."""
        stamp = format_stamp(self.clock())
        counter = 0
        if last and stamp <= last[:14]:
            stamp, counter = last[:14], int(last[14:18]) + 1
            if counter > MAX_COUNTER:
                raise TryAgain("More than 10,000 messages in one second on this queue; try again.")
        return str(MessageName(stamp, counter, retention_days, str(uuid.uuid4())))

    def _finish(self, q: _Queue, index: idx.IndexFile, header: idx.IndexHeader) -> None:
        """Mark the nonce, index the pending message, record the directory's new state.

        The nonce goes first: if it cannot be written the message is rolled back before
        anyone could have seen it. The appended record is flushed before the reply: after
        a power loss the header page may reach the disk without the tail page, and then
        no mismatch would ever send a reader back to the directory for this message.
        """
        if header.pending_nonce:
            self.nonces.mark(header.pending_nonce)
        index.append(header.pending)
        index.sync()
        stat = os.stat(q.dir)
        header.pending = header.pending_nonce = ""
        header.dir_mtime_ns, header.dir_ino = stat.st_mtime_ns, stat.st_ino
        index.write_header(header)

    def _roll_back(self, q: _Queue, index: idx.IndexFile, header: idx.IndexHeader) -> None:
        """Undo a publish that failed after its rename (disk full while indexing)."""
        unlink_quietly(q.dir / header.pending)
        if header.pending_nonce:
            self.nonces.unmark(header.pending_nonce)
        header.pending = header.pending_nonce = ""
        try:
            index.write_header(header)
        except OSError:
            pass  # the next lock holder finds the pending file gone and clears it

    def _recover(self, q: _Queue, index: idx.IndexFile) -> idx.IndexHeader:
        """Bring the index in line with the directory (queue lock held).

        ``pending`` seen under the lock: its publisher died mid-publish, and how far it got
        in the index is unknown (appended or not; after a power loss the tail may even be
        zeros). So the index is rebuilt from the directory, the truth; a message that made
        it into the directory keeps its nonce, so a retry does not store it twice.
        """
        header = index.header()
        if header is None:  # a new or torn index
            header = idx.rebuild(q.index_path, q.dir)
            index.reopen(q.index_path)
            return header
        if header.pending:
            if header.pending_nonce and (q.dir / header.pending).exists():
                self.nonces.mark(header.pending_nonce)
            stale = True
        else:
            stale = not header.matches(os.stat(q.dir)) or not _tail_is_sound(index)
        if stale:
            header = idx.rebuild(q.index_path, q.dir, floor=header.last)
            index.reopen(q.index_path)
        return header

    def _open_index(self, q: _Queue) -> idx.IndexFile:
        ensure_dir(self.data_dir.indexes)
        index = idx.IndexFile.open(q.index_path, create=True)
        assert index is not None
        return index

    def rebuild_index(self, queue: str) -> int:
        """Rebuild a queue's index from its directory; claireup calls this after deleting,
        so consumers do not step over deleted names and do not pay for the rebuild."""
        q = _Queue(self.data_dir, queue)
        with q.lock(), self._open_index(q) as index:
            header = self._recover(q, index)
            idx.rebuild(q.index_path, q.dir, floor=header.last)
            index.reopen(q.index_path)
            return index.count()

    # --- fetch -----------------------------------------------------------------------
    def fetch(self, queue: str, after: str = "") -> FetchResult:
        """The first message after ``after`` (clean pointer; "" for the first)."""
        for name, file in self.iter_after(queue, after, limit=1):
            return FetchResult(name=name, file=file, size=os.fstat(file.fileno()).st_size)
        return FetchResult(queue_empty=self._looks_empty(queue, after))

    def iter_after(self, queue: str, after: str, limit: int) -> Iterator[tuple[str, BinaryIO]]:
        """Up to ``limit`` (name, open file) pairs after ``after``, skipping deleted files.

        A pointer naming a deleted message still finds the next one: the search is by
        order, not by looking the pointer up.
        """
        q = _Queue(self.data_dir, queue)
        index = self._current_index(q)
        with index:
            count = index.count()
            position = index.first_after(after, count)
            yielded = 0
            for name in index.iter_from(position, count):
                if yielded >= limit:
                    return
                try:
                    file = open(q.dir / name, "rb")  # noqa: SIM115 - the caller owns it
                except (FileNotFoundError, ValueError):
                    continue  # deleted since it was indexed, or a record a power loss zeroed
                yielded += 1
                yield name, file

    def _current_index(self, q: _Queue) -> idx.IndexFile:
        """An index that agrees with the directory, taking the lock only when it may not."""
        try:
            dir_stat = os.stat(q.dir)
        except FileNotFoundError:
            raise QueueNotFound(f"Queue '{q.name}' not found.") from None
        index = idx.IndexFile.open(q.index_path)
        if index is not None:
            header = index.header()
            # A set ``pending`` is a publish in flight: its message is not indexed yet,
            # which is exactly right for a reader, so trust the index meanwhile; unless
            # its publisher died (kill -9): then recover now, not at the next publish.
            if (
                header is not None
                and _tail_is_sound(index)
                and (header.matches(dir_stat) or (header.pending and _lock_is_held(q)))
            ):
                return index
            index.close()
        with q.lock(), self._open_index(q) as locked:
            self._recover(q, locked)
        index = idx.IndexFile.open(q.index_path)
        assert index is not None
        return index

    def _looks_empty(self, queue: str, after: str) -> bool:
        if not after:
            return True
        q = _Queue(self.data_dir, queue)
        with self._current_index(q) as index:
            return index.count() == 0

    def change_token(self, queue: str) -> tuple[int, int, int]:
        """Changes whenever the queue's index does (a publish, a rebuild): for waiters."""
        stat = os.stat(self.data_dir.index_path(queue))
        return stat.st_ino, stat.st_size, stat.st_mtime_ns

    def depth(self, queue: str) -> int:
        """Indexed names (may include messages deleted since the last rebuild)."""
        with self._current_index(_Queue(self.data_dir, queue)) as index:
            return index.count()


def _lock_is_held(q: _Queue) -> bool:
    """Whether a publisher holds the queue lock now (a kill -9 releases it)."""
    lock = q.lock()
    if not lock.try_acquire():
        return True
    lock.release()
    return False


def _tail_is_sound(index: idx.IndexFile) -> bool:
    """False when the index ends in something that is no name: after a power loss an
    appended record's size can reach the disk without its bytes (zeros)."""
    last = index.last_record()
    return not last or is_message_name(last)
