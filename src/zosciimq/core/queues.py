"""Queues: publish with strictly increasing names, fetch by pointer in name order.

The guarantee that matters most (PROTOCOL.md 3, "Visibility order"): a consumer that
fetches by pointer sees every acknowledged message exactly once, in name order, while
publishers run concurrently in many workers, processes and containers.

How: all publishes to a queue serialise on one lock file (an fcntl lock, so it holds
across processes and NFS clients). Under that lock a group of publishers gets names
above every name allocated before, its record goes into the queue's write-ahead log,
its uploads are renamed into place, and only then are the names made visible in the
queue's index (``core.commit``, docs/durability.md). Fetch reads only the visible part
of the index, so a message becomes visible strictly after every lower name did; nobody
can see ``B`` and later find an ``A < B`` appear.

Publishers of one process to one queue share commits (``core.group_commit``); a crash
is made good from the log (``core.recovery``); the background checkpoint makes what the
log covers durable in bulk (``core.checkpoint``).
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO

from zosciimq.core import index as idx
from zosciimq.core.checkpoint import Checkpointer, Durability, Flusher, sync_volumes
from zosciimq.core.clock import Clock, utc_now
from zosciimq.core.commit import MAX_GROUP_MESSAGES, Position, Publish, QueueCommitter, Rules
from zosciimq.core.durable import raise_if_full, storage_error
from zosciimq.core.group_commit import Lane, Steps, run_flushes
from zosciimq.core.layout import DataDir
from zosciimq.core.locking import Holder
from zosciimq.core.nonces import Nonces
from zosciimq.core.outgoing import Outgoing, PublishResult
from zosciimq.core.queue_files import OpenQueues, QueueFiles
from zosciimq.core.recovery import QueueRecovery, Report, needs_reboot_recovery, wal_queues
from zosciimq.core.upload import INLINE_BYTES, Upload, sync_uploads
from zosciimq.core.wal import LogCorrupt

log = logging.getLogger(__name__)

_READ_MESSAGE = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
# How long a group commit waits at most for publishers of its process that are still
# flushing large uploads: about one upload flush on a local disk.
GROUP_LINGER_SECONDS = 0.005


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


class QueueStore:
    def __init__(
        self,
        data_dir: DataDir,
        clock: Clock = utc_now,
        rules: Rules | None = None,
        default_retention_days: int = 0,
        group_linger: float = GROUP_LINGER_SECONDS,
        durability: Durability | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.clock = clock
        self.group_linger = group_linger
        self.durability = durability or Durability()
        self.nonces = Nonces(data_dir)
        self._open = OpenQueues(data_dir)
        self._volume = data_dir.volumes()
        self.checkpointer = Checkpointer(self._volume, self.durability.checkpoint_seconds)
        self.flusher = Flusher(self.durability.flush_interval)
        self.recovery = QueueRecovery(data_dir, self.nonces, self._sync_volume)
        self.committer = QueueCommitter(
            data_dir,
            self.nonces,
            self.recovery,
            clock=clock,
            # The queue policy (core.policy): limits, and retention when a publish gives none.
            rules=rules,
            default_retention_days=default_retention_days,
            durability=self.durability,
            checkpointer=self.checkpointer,
            flusher=self.flusher,
            advance=self.checkpoint_to,
        )

    def close(self) -> None:
        """Flush and checkpoint what this store wrote, and close every queue file it
        keeps open (they also close when idle)."""
        self.flusher.close()
        self.checkpointer.close()
        self._open.close()

    def _sync_volume(self) -> None:
        sync_volumes(self._volume)

    # --- publish -------------------------------------------------------------------
    def publish(
        self,
        queue: str,
        upload: Upload,
        *,
        retention_days: int | None,
        nonce: str | None = None,
    ) -> PublishResult:
        """Make ``upload`` the next message of ``queue``; durable when this returns.

        ``queue``, ``retention_days`` and ``nonce`` must already be clean (names.clean_*);
        ``retention_days`` None: the queue's policy, else the store's default.
        With a nonce that was used before (by any queue or the store) nothing is written.
        """
        return self.publish_many(queue, [Outgoing(upload, retention_days, nonce)])[0]

    def publish_many(self, queue: str, messages: Sequence[Outgoing]) -> list[PublishResult]:
        """Publish several messages under contiguous names, all or nothing.

        Every message gets a result in order: its name, or ``duplicate`` when its nonce
        had been used (earlier, or by a message before it in the same call). Any error
        writes none of them.

        A large message's upload is flushed here, outside any lock (its log record only
        refers to it); a small one's bytes go into the log record instead.
        """
        if not messages:
            return []
        (outcome,) = self.publish_each(queue, [messages])
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def publish_each(
        self, queue: str, callers: Sequence[Sequence[Outgoing]]
    ) -> list[list[PublishResult] | BaseException]:
        """``publish_many`` for several independent callers at once, in their order:
        each caller's messages all or nothing under contiguous names, and each caller's
        own outcome (its results, or the error that refused it, such as QueueFull).
        For a server that gathers its callers on one thread (an event loop) and so
        cannot wait for a commit once per caller: they share the commits, as the
        threads of ``publish_many`` do."""
        return run_flushes(self.publish_steps(queue, callers))

    def publish_steps(
        self, queue: str, callers: Sequence[Sequence[Outgoing]]
    ) -> Steps[list[list[PublishResult] | BaseException]]:
        """``publish_each``, pausing at the log's flush (``group_commit.Steps``): an
        event loop flushes in a thread and reads other requests meanwhile. The queue's
        lock stays held until the steps end."""
        large = [m.upload for messages in callers for m in messages if m.upload.size > INLINE_BYTES]
        try:
            with self._open.use(queue) as files:
                lane: Lane[Sequence[Outgoing], list[PublishResult]] = files.lane
                if large:
                    lane.arrive()
                    try:
                        sync_uploads(large, directory=self.data_dir.temp_str)
                    except BaseException:
                        lane.left()
                        raise
                done = yield from lane.submit_steps(
                    callers,
                    lambda group: self.committer.commit(files, group),
                    arrived=bool(large),
                    linger=self.group_linger,
                    take=_group_size,
                )
        except OSError as exc:
            raise_if_full(exc)
            raise
        return [storage_error(s.error) if s.error is not None else (s.result or []) for s in done]

    def is_busy(self, queue: str) -> Holder:
        """Who holds ``queue``'s lock at this moment: nobody (""), a thread of this
        process ("here") or another process ("elsewhere"). A hint for a caller that
        must not wait for it, such as an event loop."""
        with self._open.use(queue) as files:
            return files.lock_holder()

    # --- checkpoints and recovery ----------------------------------------------------
    def checkpoint_to(self, queue: str, position: Position) -> None:
        """Move ``queue``'s log checkpoint to ``position`` (the checkpointer's callback,
        after it flushed the volume): its records up to there are not redone again."""
        with self._open.use(queue) as files, files.lock:
            wal = files.wal(create=False)
            if wal is None or wal.ino != position.ino:
                return  # removed or made anew since: nothing of ours in it
            header = wal.header()
            if header.ckpt_lsn < position.lsn <= header.tail_lsn:
                wal.checkpointed(header, position.offset, position.lsn, position.last)

    def checkpoint(self, queue: str) -> str:
        """Checkpoint ``queue`` now (a flush of the volume); the highest name the
        checkpoint covers. A deleter (claireup, a purge) deletes only names up to it: a
        recovery could otherwise make a deleted message again from the log."""
        with self._open.use(queue) as files, files.lock:
            if not os.path.isdir(files.dir):
                return ""
            sound = self.recovery.sound_index(files)
            files.index.give_back(sound.index)
            last = sound.header.last  # the lock held: no group in flight, all committed
            wal, header = sound.wal, sound.wal_header
            if wal is not None and header is not None and not header.empty:
                self._sync_volume()
                wal.checkpointed(header, header.tail_off, header.tail_lsn, last)
            return last

    def recover_volume(self) -> Report:
        """Redo what a restart of the machine may have taken from every queue (a service
        calls this before it answers; queues not looked at here recover when next used)."""
        report = Report()
        for queue in wal_queues(self.data_dir):
            if not needs_reboot_recovery(self.data_dir.wal_path(queue)):
                continue
            try:
                with self._open.use(queue) as files, files.lock:
                    wal = files.wal(create=False)
                    if wal is not None:
                        report.add(self.recovery.after_reboot(files, wal))
            except (OSError, LogCorrupt) as exc:
                log.error("queue %s: recovery failed: %s", queue, exc)
        return report

    def rebuild_index(self, queue: str) -> int:
        """Rebuild a queue's index from its directory; claireup calls this after deleting,
        so consumers do not step over deleted names and do not pay for the rebuild."""
        with self._open.use(queue) as files, files.lock:
            sound = self.recovery.sound_index(files)
            files.index.give_back(sound.index)
            rebuilt = idx.rebuild(files.index_path, files.dir, floor=sound.header.last)
            files.index.drop()
            files.own_commit = None
            return rebuilt.committed

    # --- fetch -----------------------------------------------------------------------
    def fetch(self, queue: str, after: str = "") -> FetchResult:
        """The first message after ``after`` (clean pointer; "" for the first)."""
        with self._open.use(queue) as files:
            index, header = self._readable_index(files)
            try:
                for name, file in self._open_after(files, index, header.committed, after, 1):
                    return FetchResult(name=name, file=file, size=os.fstat(file.fileno()).st_size)
                return FetchResult(queue_empty=not after or header.committed == 0)
            finally:
                files.index.give_back(index)

    def iter_after(
        self, queue: str, after: str, limit: int
    ) -> Generator[tuple[str, BinaryIO], None, None]:
        """Up to ``limit`` (name, open file) pairs after ``after``, skipping deleted files.

        A pointer naming a deleted message still finds the next one: the search is by
        order, not by looking the pointer up.
        """
        with self._open.use(queue) as files:
            index, header = self._readable_index(files)
            try:
                yield from self._open_after(files, index, header.committed, after, limit)
            finally:
                files.index.give_back(index)

    def _open_after(
        self,
        files: QueueFiles,
        index: idx.IndexFile | idx.ListedIndex,
        count: int,
        after: str,
        limit: int,
    ) -> Iterator[tuple[str, BinaryIO]]:
        start = index.first_after(after, count)
        yielded = 0
        for position, name in enumerate(index.iter_from(start, count), start):
            if yielded >= limit:
                return
            try:
                fd = os.open(f"{files.dir}/{name}", _READ_MESSAGE)
            except (FileNotFoundError, ValueError):
                continue  # deleted since it was indexed, or a record a power loss zeroed
            except OSError as exc:
                if exc.errno != errno.ELOOP:
                    raise
                log.warning("queue %s: %s is a link; not served", files.name, name)
                continue
            file = os.fdopen(fd, "rb")
            yielded += 1
            index.remember(name, position)
            yield name, file

    def _readable_index(
        self, files: QueueFiles
    ) -> tuple[idx.IndexFile | idx.ListedIndex, idx.IndexHeader]:
        """A borrowed index that agrees with the directory, and its header.

        No lock unless it may not agree: a set ``pending`` is a publish in flight whose
        names are not visible yet, which is exactly right for a reader, so the index is
        trusted meanwhile; unless its publisher died (kill -9): then recover now, not at
        the next publish. The first read of a queue in a process also looks whether the
        machine restarted since its log was written (core.recovery).
        """
        dir_stat: os.stat_result | None = files.dir_stat()
        if not files.wal_checked:  # once per process: a restart of the machine left
            if needs_reboot_recovery(files.wal_path):  # the log to redo (under the lock)
                dir_stat = None
            else:
                files.wal_checked = True
        for _ in range(2 if dir_stat is not None else 0):
            index = files.index.borrow()
            if index is None:
                break
            header = index.header()
            if header is not None and header.stale:
                files.index.give_back(index)
                files.index.drop()
                continue
            if (
                header is not None
                and index.tail_is_sound(header.committed)
                and (
                    (dir_stat is not None and header.matches(dir_stat) and not header.pending)
                    or (header.pending and files.lock_is_held())  # a commit in flight
                )
            ):
                return index, header
            files.index.give_back(index)
            break
        try:
            with files.lock:
                sound = self.recovery.sound_index(files)
                return sound.index, sound.header
        except OSError as exc:
            if exc.errno not in idx.READ_ONLY_ERRORS:
                raise
            return self._listed(files, dir_stat or files.dir_stat())

    def _listed(
        self, files: QueueFiles, dir_stat: os.stat_result
    ) -> tuple[idx.ListedIndex, idx.IndexHeader]:
        """The queue listed in memory, on a volume that cannot take the index's repair
        (a read-only copy): reads go on, in name order, without writing a byte."""
        listed = files.listed
        if listed is None or not listed.header().matches(dir_stat):
            listed = files.listed = idx.ListedIndex(idx.list_queue_names(files.dir), dir_stat)
        return listed, listed.header()

    def names_after(self, queue: str, after: str, limit: int) -> list[str]:
        """Up to ``limit`` visible names after ``after``, from the index alone (files are
        not opened: some may be gone since)."""
        with self._open.use(queue) as files:
            index, header = self._readable_index(files)
            try:
                start = index.first_after(after, header.committed)
                return list(itertools.islice(index.iter_from(start, header.committed), limit))
            finally:
                files.index.give_back(index)

    def count_after(self, queue: str, after: str) -> int:
        """Visible names after ``after`` (deleted files included until the next rebuild)."""
        with self._open.use(queue) as files:
            index, header = self._readable_index(files)
            try:
                return header.committed - index.first_after(after, header.committed)
            finally:
                files.index.give_back(index)

    def last_name(self, queue: str) -> str:
        """The highest visible name ("" for an empty queue)."""
        with self._open.use(queue) as files:
            index, header = self._readable_index(files)
            try:
                return index.record(header.committed - 1) if header.committed else ""
            finally:
                files.index.give_back(index)

    def last_before(self, queue: str, bound: str) -> str:
        """The highest visible name that does not sort after ``bound`` ("" when none).

        With a 14-digit stamp as ``bound`` that is the last name published before that
        second: used as a pointer, fetch continues with the first name at or after it.
        """
        with self._open.use(queue) as files:
            index, header = self._readable_index(files)
            try:
                position = index.first_after(bound, header.committed)
                return index.record(position - 1) if position else ""
            finally:
                files.index.give_back(index)

    def expiries(self, queue: str, names: Iterable[str]) -> dict[str, float]:
        """When those of ``names`` that were published with a TTL expire (Unix seconds).

        The queue's expiry file is read incrementally: only what was appended since.
        """
        with self._open.use(queue) as files:
            return files.expiries.lookup(names)

    def change_token(self, queue: str) -> tuple[int, int, int]:
        """Changes whenever the queue's index does (a publish, a rebuild): for waiters."""
        stat = os.stat(self.data_dir.index_path(queue))
        return stat.st_ino, stat.st_size, stat.st_mtime_ns

    def depth(self, queue: str) -> int:
        """Indexed names (may include messages deleted since the last rebuild)."""
        with self._open.use(queue) as files:
            index, header = self._readable_index(files)
            files.index.give_back(index)
            return header.committed


def _group_size(waiting: list[Publish]) -> int:
    """How many waiting submissions the next commit covers: all, up to the group cap."""
    count = size = 0
    for submission in waiting:
        size += len(submission.work)
        if count and size > MAX_GROUP_MESSAGES:
            break
        count += 1
    return count
