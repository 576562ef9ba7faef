"""Queues: publish with strictly increasing names, fetch by pointer in name order.

The guarantee that matters most (PROTOCOL.md 3, "Visibility order"): a consumer that
fetches by pointer sees every acknowledged message exactly once, in name order, while
publishers run concurrently in many workers, processes and containers.

How: all publishes to a queue serialise on one lock file (an fcntl lock, so it holds
across processes and NFS clients). Under that lock a publisher allocates names above
every name allocated before, renames the fsynced uploads into place, fsyncs the
directory and only then makes the names visible in the queue's index. Fetch reads only
the visible part of the index, so a message becomes visible strictly after every lower
name did; nobody can see ``B`` and later find an ``A < B`` appear.

Group commit: the slow part under the lock is the disk (a directory fsync and an index
fdatasync). Publishers of one process that arrive while a commit is running queue up;
when it ends, one of them (the leader) commits everything that waited as one group:
one lock, one directory fsync, one index flush, names in arrival order. Nobody is
answered before the commit that covers them. Across processes and containers, groups
take turns on the fcntl lock: correct, just less batched. The content of each message
is flushed by its own publisher before it joins a group, outside any lock; a leader
waits a moment for the publishers still flushing theirs (``group_linger``).
"""

from __future__ import annotations

import copy
import errno
import itertools
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from stat import S_ISDIR, S_ISLNK
from typing import BinaryIO

from zosciimq.core import index as idx
from zosciimq.core import policy
from zosciimq.core.durable import ensure_dir, fsync_dir, raise_if_full, unlink_quietly
from zosciimq.core.errors import QueueNotFound, TryAgain
from zosciimq.core.layout import DataDir
from zosciimq.core.names import MAX_COUNTER, format_stamp, is_message_name
from zosciimq.core.nonces import Nonces
from zosciimq.core.queue_files import OpenQueues, QueueFiles
from zosciimq.core.upload import Upload, sync_uploads
from zosciimq.errors import QueueUnusable

log = logging.getLogger("zosciimq.core.queues")

Clock = Callable[[], datetime]
Rules = Callable[[str], policy.QueueRule]  # a queue's policy rule (core.policy)
_READ_MESSAGE = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
MAX_GROUP_MESSAGES = 4096  # one commit's worth; more waits for the next
# How long a group commit waits at most for publishers of its process that are still
# flushing their uploads: about one upload flush on a local disk.
GROUP_LINGER_SECONDS = 0.005


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class PublishResult:
    name: str | None  # None when the nonce had been used: nothing was written
    duplicate: bool = False


@dataclass(frozen=True)
class Outgoing:
    """One message to publish: its upload and its clean retention and nonce, and when
    it expires for consumer groups (Unix seconds; None: never, see ``groups``).

    ``retention_days`` None: the queue policy's retention for the queue, else the
    store's default, decided in the commit that names the message (one policy lookup
    per commit, for the limits and the retention together)."""

    upload: Upload
    retention_days: int | None
    nonce: str | None = None
    expires_at: float | None = None


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


class _Submission:
    """One caller's messages, waiting for the commit that covers them.

    Each waits on a condition of its own (over the queue's ``turn`` lock), so a commit
    wakes the publishers it answered and the next leader, not every waiting thread."""

    __slots__ = ("done", "error", "messages", "results", "wake")

    def __init__(self, messages: Sequence[Outgoing], turn: threading.Lock) -> None:
        self.messages = messages
        self.results: list[PublishResult] = []
        self.error: BaseException | None = None
        self.done = False
        self.wake = threading.Condition(turn)


class QueueStore:
    def __init__(
        self,
        data_dir: DataDir,
        clock: Clock = utc_now,
        rules: Rules | None = None,
        default_retention_days: int = 0,
        group_linger: float = GROUP_LINGER_SECONDS,
    ) -> None:
        self.data_dir = data_dir
        self.clock = clock
        self.group_linger = group_linger
        # The queue policy (core.policy): limits, and retention when a publish gives none.
        self.rules = rules
        self.default_retention_days = default_retention_days
        self.nonces = Nonces(data_dir)
        self._open = OpenQueues(data_dir)

    def close(self) -> None:
        """Close every queue file this store keeps open (they also close when idle)."""
        self._open.close()

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
        """
        if not messages:
            return []
        try:
            with self._open.use(queue) as files:
                with files.turn:
                    files.arriving += 1
                try:
                    sync_uploads([m.upload for m in messages])  # slow: outside the lock
                except BaseException:
                    with files.turn:
                        _joined(files)
                    raise
                return self._submit(files, _Submission(messages, files.turn))
        except OSError as exc:
            raise_if_full(exc)
            raise

    def _submit(self, files: QueueFiles, submission: _Submission) -> list[PublishResult]:
        """Wait for the commit that covers ``submission``, leading one when it is our turn.

        A leader whose fellow publishers are still flushing their uploads waits for them
        (``group_linger`` at most) before it takes the group: with eight publishers to one
        queue over two processes a commit covered 3.0 publishes where it covered 1.8.
        """
        with files.turn:
            files.waiting.append(submission)
            _joined(files)
            lingered = False
            while not submission.done:
                if files.committing or files.lingerer is not None:
                    submission.wake.wait()  # done, or the next leader
                    continue
                if files.arriving and not lingered:
                    lingered, files.lingerer = True, submission
                    deadline = time.monotonic() + self.group_linger
                    try:
                        while files.arriving and (left := deadline - time.monotonic()) > 0:
                            submission.wake.wait(left)
                    finally:
                        files.lingerer = None
                    continue
                files.committing = True
                group = _take_group(files.waiting)
                files.turn.release()
                try:
                    self._commit(files, group)
                finally:
                    files.turn.acquire()
                    files.committing = False
                    for answered in group:
                        answered.wake.notify()
                    if files.waiting:
                        files.waiting[0].wake.notify()  # leads the next commit
        if submission.error is not None:
            raise submission.error
        return submission.results

    def _commit(self, files: QueueFiles, group: list[_Submission]) -> None:
        """Commit a group; every submission in it ends done, with results or an error."""
        try:
            nonces = [m.nonce for s in group for m in s.messages]
            with self.nonces.lock(*nonces), files.lock:
                dir_stat = self._queue_dir(files)
                index = self._locked_index(files)
                try:
                    rebuilt, header = self._recover(files, index, dir_stat)
                    if rebuilt is not None:  # recovery replaced the file: borrow the new one
                        files.index.give_back(index)
                        index = files.index.borrow(create=True)
                        assert index is not None
                        header = index.header()
                    assert header is not None
                    rule = self.rules(files.name) if self.rules is not None else None
                    usage = self._make_room(files, index, header, group, rule)
                    retention = self.default_retention_days
                    if rule is not None and rule.retention_days is not None:
                        retention = rule.retention_days
                    accepted = self._allocate([s for s in group if not s.done], header, retention)
                    if accepted:
                        self._write(files, index, header, accepted, dir_stat.st_ino)
                    elif usage is not None and usage.dropped:
                        fsync_dir(files.dir)
                    if usage is not None:
                        self._keep_usage(files, header, usage, accepted)
                finally:
                    files.index.give_back(index)
        except BaseException as exc:
            for position, submission in enumerate(group):
                if not submission.done:
                    submission.error = exc if position == 0 else copy.copy(exc)
        for submission in group:
            submission.done = True

    def _make_room(
        self,
        files: QueueFiles,
        index: idx.IndexFile,
        header: idx.IndexHeader,
        group: list[_Submission],
        rule: policy.QueueRule | None,
    ) -> policy.Usage | None:
        """The queue policy's limits (lock held): a submission over them is refused
        (done, with QueueFull), or the oldest messages are dropped to make room."""
        if rule is None or not rule.limited:
            return None
        usage = policy.read_usage(files.usage_path, header) or policy.scan_usage(
            files.dir, index, header
        )
        incoming = [(len(s.messages), sum(m.upload.size for m in s.messages)) for s in group]
        verdicts = policy.make_room(files.name, rule, usage, files.dir, index, header, incoming)
        for submission, error in zip(group, verdicts, strict=True):
            if error is not None:
                submission.error = error
                submission.done = True
        return usage

    def _keep_usage(
        self,
        files: QueueFiles,
        header: idx.IndexHeader,
        usage: policy.Usage,
        accepted: list[tuple[Outgoing, str]],
    ) -> None:
        """Remember the counts for the header this commit leaves; the index is rebuilt
        once dropped records outnumber the live ones (so a reader from the start does
        not step over them one by one)."""
        usage.count += len(accepted)
        usage.bytes += sum(m.upload.size for m, _ in accepted)
        if usage.head >= policy.REBUILD_AFTER and usage.head > usage.count:
            header = idx.rebuild(files.index_path, files.dir, floor=header.last)
            files.index.drop()
            if header.committed != usage.count:  # changed behind our back: recount
                unlink_quietly(files.usage_path)
                return
            usage.head = 0
        usage.key = policy.header_key(header)
        policy.write_usage(files.usage_path, usage)

    def _allocate(
        self, group: list[_Submission], header: idx.IndexHeader, retention: int
    ) -> list[tuple[Outgoing, str]]:
        """Names for every message whose nonce is unused, above every name ever given;
        ``retention`` for a message that brings none.

        The clock is read once: the group shares a second and counts up within it, and
        a clock that stepped back continues from the last name instead.
        """
        stamp = format_stamp(self.clock())
        last = header.last
        if last and stamp <= last[:14]:
            stamp, counter = last[:14], int(last[14:18]) + 1
        else:
            counter = 0
        accepted: list[tuple[Outgoing, str]] = []
        seen: set[str] = set()
        for submission in group:
            mine: list[tuple[Outgoing, str]] = []
            results: list[PublishResult] = []
            for message in submission.messages:
                nonce = message.nonce
                if nonce is not None and (nonce in seen or self.nonces.used(nonce)):
                    results.append(PublishResult(name=None, duplicate=True))
                    continue
                if counter > MAX_COUNTER:
                    break
                days = retention if message.retention_days is None else message.retention_days
                name = f"{stamp}{counter:04d}-{days:04d}-{uuid.uuid4()}.bin"
                counter += 1
                if nonce is not None:
                    seen.add(nonce)
                mine.append((message, name))
                results.append(PublishResult(name=name))
            else:
                accepted.extend(mine)
                submission.results = results
                continue
            for message, _ in mine:
                if message.nonce is not None:
                    seen.discard(message.nonce)
            counter -= len(mine)
            submission.error = TryAgain(
                "More than 10,000 messages in one second on this queue; try again."
            )
            submission.done = True
        return accepted

    def _write(
        self,
        files: QueueFiles,
        index: idx.IndexFile,
        header: idx.IndexHeader,
        accepted: list[tuple[Outgoing, str]],
        dir_ino: int,
    ) -> None:
        """The durable steps of one group (docs/durability.md), rolled back on error.

        The records go into the index before the renames but stay invisible until the
        header counts them, after every flush: so the directory fsync and the index
        flush can ride one journal commit of the file system, and a reader never sees a
        name whose file could still be lost.
        """
        names = [name for _, name in accepted]
        journal = "".join(f"{n} {m.nonce}\n" for m, n in accepted if m.nonce).encode("ascii")
        journal_fd = files.journal_fd()  # created with the queue's first group, nonce or not
        if journal:
            os.pwrite(journal_fd, journal, 0)
        expiries = "".join(
            f"{n} {int(m.expires_at * 1000)}\n" for m, n in accepted if m.expires_at is not None
        ).encode("ascii")
        if expiries:  # before the names exist, flushed with the index: never a name without
            os.write(files.ttl_fd(), expiries)
        index.write_records(header.committed, names)
        header.last, header.pending, header.journal = names[-1], len(names), len(journal)
        index.write_header(header)
        renamed: list[str] = []
        marked: list[str] = []
        dir_fd = files.dir_fd(dir_ino)
        try:
            for message, name in accepted:
                os.rename(message.upload.temp_path, name, dst_dir_fd=dir_fd)
                message.upload.mark_committed()
                renamed.append(name)
            dir_stat = os.fstat(dir_fd)
            os.fsync(dir_fd)
            marked = self.nonces.mark_many(m.nonce for m, _ in accepted if m.nonce)
            index.sync()
            if expiries:
                os.fdatasync(files.ttl_fd())
            header.committed += len(names)
            header.pending = header.journal = 0
            header.dir_mtime_ns, header.dir_ino = dir_stat.st_mtime_ns, dir_stat.st_ino
            index.write_header(header)
            files.own_commit = (index.ino, header.committed, header.dir_mtime_ns, header.dir_ino)
        except OSError:
            self._roll_back(files, index, header, renamed, marked)
            raise

    def _roll_back(
        self,
        files: QueueFiles,
        index: idx.IndexFile,
        header: idx.IndexHeader,
        renamed: list[str],
        marked: list[str],
    ) -> None:
        """Undo a group that failed after its first rename (disk full while marking or
        indexing): nothing of it stays, and nobody could have seen it."""
        for name in renamed:
            unlink_quietly(os.path.join(files.dir, name))
        self.nonces.unmark_many(marked)
        header.pending = header.journal = 0
        try:
            stat = os.lstat(files.dir)
            header.dir_mtime_ns, header.dir_ino = stat.st_mtime_ns, stat.st_ino
            index.write_header(header)
        except OSError:
            pass  # the next lock holder finds pending set and rebuilds

    def _queue_dir(self, files: QueueFiles) -> os.stat_result:
        """The queue directory's stat (lock held), the directory created when missing."""
        try:
            return _queue_dir_stat(files)
        except QueueNotFound:
            if os.path.lexists(files.dir):
                raise QueueUnusable(
                    f"Queue '{files.name}' cannot be used: its path is not a directory "
                    "of this server's data directory."
                ) from None
            ensure_dir(Path(files.dir))
            return _queue_dir_stat(files)

    def _locked_index(self, files: QueueFiles) -> idx.IndexFile:
        """The queue's current index file (lock held), created when missing."""
        try:
            on_disk = os.lstat(files.index_path)
            if S_ISLNK(on_disk.st_mode):  # not ours: never followed, replaced by a rebuild
                log.warning("%s is a link: removed", files.index_path)
                os.unlink(files.index_path)
                raise FileNotFoundError
            on_disk_ino: int | None = on_disk.st_ino
        except FileNotFoundError:
            ensure_dir(self.data_dir.indexes)
            on_disk_ino = None
        index = files.index.borrow(create=True)
        assert index is not None
        if on_disk_ino is not None and index.ino == on_disk_ino and index.writable:
            return index
        # An orphan (deleted or replaced behind our back), or opened read-only while the
        # volume was: open the path again.
        files.index.give_back(index)
        files.index.drop()
        index = files.index.borrow(create=True)
        assert index is not None
        return index

    def _recover(
        self, files: QueueFiles, index: idx.IndexFile, dir_stat: os.stat_result | None = None
    ) -> tuple[idx.IndexHeader | None, idx.IndexHeader | None]:
        """Bring the index in line with the directory (queue lock held).

        Returns (the new header, None) when the index was rebuilt (the caller must then
        reopen it), (None, the header) when it was already sound. ``pending`` seen under
        the lock: its publisher died mid-group (see ``_finish_dead_group``), then the
        index is rebuilt from the directory, the truth. ``dir_stat``: the directory's,
        when the caller just took it.
        """
        header = index.header()
        if header is None or header.stale:  # new, torn, or from an older version
            rebuilt = idx.rebuild(files.index_path, files.dir)
        elif header.pending:
            self._finish_dead_group(files, index, header)
            rebuilt = idx.rebuild(files.index_path, files.dir, floor=header.last)
        elif not header.matches(dir_stat or os.lstat(files.dir)) or not self._tail_is_sound(
            files, index, header
        ):
            rebuilt = idx.rebuild(files.index_path, files.dir, floor=header.last)
        else:
            return None, header
        files.index.drop()
        files.own_commit = None
        return rebuilt, None

    @staticmethod
    def _tail_is_sound(files: QueueFiles, index: idx.IndexFile, header: idx.IndexHeader) -> bool:
        """The last record the header counts is a name; known without reading it when
        the header is still the one this process's own last commit wrote."""
        if files.own_commit == (index.ino, header.committed, header.dir_mtime_ns, header.dir_ino):
            return True
        return index.tail_is_sound(header.committed)

    def _finish_dead_group(
        self, files: QueueFiles, index: idx.IndexFile, header: idx.IndexHeader
    ) -> None:
        """All or nothing for a group whose publisher died before committing it.

        Its names are the pending records. Every one of them in the directory: the
        group is kept and its nonces marked, so a retry does not store it twice. Only
        some of them: the ones there are removed, as nobody was answered and nobody
        could see them; the retry stores the whole group again. (After a power loss the
        records may not have reached the disk; then whatever is in the directory stays,
        as it always has.)
        """
        names = list(index.iter_from(header.committed, header.committed + header.pending))
        if len(names) != header.pending or not all(map(is_message_name, names)):
            self._mark_journal(files, header)
            return
        present = [n for n in names if os.path.exists(os.path.join(files.dir, n))]
        if len(present) == len(names):
            self._mark_journal(files, header)
        elif present:
            for name in present:
                unlink_quietly(os.path.join(files.dir, name))
            fsync_dir(files.dir)

    def _mark_journal(self, files: QueueFiles, header: idx.IndexHeader) -> None:
        """Mark the nonces of the dead group's messages that are in the directory."""
        if not header.journal:
            return
        raw = os.pread(files.journal_fd(), header.journal, 0).decode("ascii", "replace")
        present = []
        for line in raw.splitlines():
            name, _, nonce = line.partition(" ")
            if nonce and os.path.exists(os.path.join(files.dir, name)):
                present.append(nonce)
        self.nonces.mark_many(present)

    def rebuild_index(self, queue: str) -> int:
        """Rebuild a queue's index from its directory; claireup calls this after deleting,
        so consumers do not step over deleted names and do not pay for the rebuild."""
        with self._open.use(queue) as files, files.lock:
            index = self._locked_index(files)
            try:
                rebuilt, _ = self._recover(files, index)
                if rebuilt is None:  # it agreed with the directory: rebuild anyway
                    header = index.header()
                    floor = header.last if header is not None else ""
                    rebuilt = idx.rebuild(files.index_path, files.dir, floor=floor)
            finally:
                files.index.give_back(index)
            files.index.drop()
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

    def iter_after(self, queue: str, after: str, limit: int) -> Iterator[tuple[str, BinaryIO]]:
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
        the next publish.
        """
        dir_stat = _queue_dir_stat(files)
        for _ in range(2):
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
                and (header.matches(dir_stat) or (header.pending and _lock_is_held(files)))
            ):
                return index, header
            files.index.give_back(index)
            break
        try:
            with files.lock:
                locked = self._locked_index(files)
                try:
                    self._recover(files, locked)
                finally:
                    files.index.give_back(locked)
                files.index.drop()
                index = files.index.borrow()
                assert index is not None
                header = index.header()
        except OSError as exc:
            if exc.errno not in idx.READ_ONLY_ERRORS:
                raise
            return self._listed(files, dir_stat)
        assert header is not None
        return index, header

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


def _queue_dir_stat(files: QueueFiles) -> os.stat_result:
    """The queue directory's own stat: a link planted in queues/ is no queue of ours
    (it would read and write outside the data directory)."""
    try:
        stat = os.lstat(files.dir)
    except FileNotFoundError:
        raise QueueNotFound(f"Queue '{files.name}' not found.") from None
    if not S_ISDIR(stat.st_mode):
        log.warning("queues/%s is not a directory (a link?): not served", files.name)
        raise QueueNotFound(f"Queue '{files.name}' not found.")
    return stat


def _joined(files: QueueFiles) -> None:
    """A publisher's upload is flushed (or failed): a lingering leader need not wait for
    it any more (``files.turn`` held)."""
    files.arriving -= 1
    if files.lingerer is not None and not files.arriving:
        files.lingerer.wake.notify()


def _take_group(waiting: list[_Submission]) -> list[_Submission]:
    """The submissions the next commit covers, in arrival order, within the group cap."""
    group, size = [], 0
    while waiting and (not group or size + len(waiting[0].messages) <= MAX_GROUP_MESSAGES):
        submission = waiting.pop(0)
        group.append(submission)
        size += len(submission.messages)
    return group


def _lock_is_held(files: QueueFiles) -> bool:
    """Whether a publisher holds the queue lock now (a kill -9 releases it). On a volume
    that cannot be written nobody can be publishing."""
    try:
        if not files.lock.try_acquire():
            return True
    except OSError as exc:
        if exc.errno in idx.READ_ONLY_ERRORS:
            return False
        raise
    files.lock.release()
    return False
