"""A queue's commit: one group of publishes made durable and visible, step by step.

Under the nonces' locks and the queue's lock (an fcntl lock: across threads, processes,
containers and NFS clients), for a group of publishers of one process
(``core.group_commit``), in the order docs/durability.md gives:

1. recovery, if a crash left anything (``core.recovery``);
2. the queue policy's limits; names above every name the queue ever had, in arrival
   order; a used nonce gets nothing;
3. the names into the index, after the visible ones (not visible yet), and the header
   marks them ``pending`` with where their log record will start;
4. **the log record** (names, nonces, expiries, the bytes of small messages, the upload
   of large ones) appended to the queue's write-ahead log, and in ``sync`` durability
   **flushed**: one device flush, no journal commit (``core.wal``). From here the group
   is durable: a crash of any kind is redone from the record;
5. the expiries, the renames of the uploads to their names, the nonce markers, what the
   policy drops: none of them flushed (the checkpoint does that in bulk, for many
   groups at once);
6. the header makes the names visible, and the publishers are answered.

An error before 4 leaves nothing. An error after it (no inode for a marker, a full
directory) undoes the group: its renames and markers removed, the record taken back out
of the log (flushed), ``pending`` cleared; every publisher gets the error (507 for a full
volume): nothing is half there.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from typing import NamedTuple

from zosciimq.core import index as idx
from zosciimq.core import limits, policy
from zosciimq.core.checkpoint import Checkpointer, Durability, Flusher, sync_volumes
from zosciimq.core.clock import Clock
from zosciimq.core.durable import unlink_quietly
from zosciimq.core.group_commit import Steps, Submission
from zosciimq.core.layout import DataDir
from zosciimq.core.names import MAX_COUNTER, format_name, format_stamp, new_guid
from zosciimq.core.nonces import Nonces
from zosciimq.core.outgoing import Outgoing, PublishResult
from zosciimq.core.queue_files import QueueFiles
from zosciimq.core.recovery import QueueRecovery, Sound
from zosciimq.core.upload import INLINE_BYTES, sync_uploads
from zosciimq.core.wal import Entry, LogCorrupt, LogHeader, Record, WriteAheadLog
from zosciimq.errors import TryAgain

log = logging.getLogger(__name__)

Rules = Callable[[str], policy.QueueRule]  # a queue's policy rule (core.policy)
Publish = Submission[Sequence[Outgoing], list[PublishResult]]
MAX_GROUP_MESSAGES = 4096  # one commit's worth; more waits for the next
# The bytes one commit copies into its log record; a group's messages beyond it are
# flushed on their own and referred to (the log stays small, and so its ring).
MAX_GROUP_INLINE = 16 << 20


class Position(NamedTuple):
    """Where a log stood after a commit: the checkpointer moves its checkpoint there."""

    ino: int
    offset: int
    lsn: int
    last: str  # the queue's highest name by then


class QueueCommitter:
    """Commits groups of publishes to queues (a ``Lane``'s commit function)."""

    def __init__(
        self,
        data_dir: DataDir,
        nonces: Nonces,
        recovery: QueueRecovery,
        *,
        clock: Clock,
        rules: Rules | None,
        default_retention_days: int,
        durability: Durability,
        checkpointer: Checkpointer,
        flusher: Flusher,
        advance: Callable[[str, Position], None],
    ) -> None:
        self.data_dir = data_dir
        self.nonces = nonces
        self.recovery = recovery
        self.clock = clock
        self.rules = rules
        self.default_retention_days = default_retention_days
        self.durability = durability
        self.relaxed = durability.relaxed
        self.checkpointer = checkpointer
        self.flusher = flusher
        self.advance = advance  # QueueStore.checkpoint_to: the checkpointer's callback
        self._volume = data_dir.volumes()
        self._advances: dict[str, Callable[[object], None]] = {}

    def commit(self, files: QueueFiles, group: list[Publish]) -> Steps[None]:
        """Commit a group; every submission in it ends done, with results or an error.
        In ``sync`` durability it pauses once, for the log's flush (``Steps``), its
        locks held: nothing of the group is visible before the flush has returned."""
        nonces = [m.nonce for s in group for m in s.work]
        with self.nonces.lock(*nonces), files.lock:
            files.lane.join(group, _joinable(group))  # who came while we waited for it
            dir_stat = files.made_dir_stat()
            sound = self.recovery.sound_index(files, dir_stat)
            index, header = sound.index, sound.header
            try:
                rule = self.rules(files.name) if self.rules is not None else None
                usage, drops = self._limits(files, index, header, group, rule)
                retention = self.default_retention_days
                if rule is not None and rule.retention_days is not None:
                    retention = rule.retention_days
                accepted = self._allocate([s for s in group if not s.done], header, retention)
                if accepted:
                    yield from self._write(files, sound, accepted, drops, dir_stat.st_ino)
                    if usage is not None:
                        self._keep_usage(files, header, usage, accepted)
            finally:
                files.index.give_back(index)

    # --- 2. limits and names --------------------------------------------------------------
    def _limits(
        self,
        files: QueueFiles,
        index: idx.IndexFile,
        header: idx.IndexHeader,
        group: list[Publish],
        rule: policy.QueueRule | None,
    ) -> tuple[limits.Usage | None, list[str]]:
        """The queue policy's limits: a submission over them is refused (done, with
        QueueFull), or the oldest messages are to be dropped to make room (their names;
        dropped once the group is logged, so a failed group drops nothing)."""
        if rule is None or not rule.limited:
            return None, []
        usage = limits.read_usage(files.usage_path, header) or limits.scan_usage(
            files.dir, index, header
        )
        incoming = [(len(s.work), sum(m.upload.size for m in s.work)) for s in group]
        verdicts, drops = limits.make_room(
            files.name, rule, usage, files.dir, index, header, incoming
        )
        for submission, error in zip(group, verdicts, strict=True):
            if error is not None:
                submission.fail(error)
        return usage, drops

    def _keep_usage(
        self,
        files: QueueFiles,
        header: idx.IndexHeader,
        usage: limits.Usage,
        accepted: list[tuple[Outgoing, str]],
    ) -> None:
        """Remember the counts for the header this commit leaves; the index is rebuilt
        once dropped records outnumber the live ones (so a reader from the start does
        not step over them one by one)."""
        usage.count += len(accepted)
        usage.bytes += sum(m.upload.size for m, _ in accepted)
        if usage.head >= limits.REBUILD_AFTER and usage.head > usage.count:
            header = idx.rebuild(files.index_path, files.dir, floor=header.last)
            files.index.drop()
            files.own_commit = None
            if header.committed != usage.count:  # changed behind our back: recount
                unlink_quietly(files.usage_path)
                return
            usage.head = 0
        usage.key = limits.header_key(header)
        limits.write_usage(files.usage_path, usage)

    def _allocate(
        self, group: list[Publish], header: idx.IndexHeader, retention: int
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
            for message in submission.work:
                nonce = message.nonce
                if nonce is not None and (nonce in seen or self.nonces.used(nonce)):
                    results.append(PublishResult(name=None, duplicate=True))
                    continue
                if counter > MAX_COUNTER:
                    break
                days = retention if message.retention_days is None else message.retention_days
                name = format_name(stamp, counter, days, new_guid())
                counter += 1
                if nonce is not None:
                    seen.add(nonce)
                mine.append((message, name))
                results.append(PublishResult(name=name))
            else:
                accepted.extend(mine)
                submission.result = results
                continue
            for message, _ in mine:
                if message.nonce is not None:
                    seen.discard(message.nonce)
            counter -= len(mine)
            submission.fail(
                TryAgain("More than 10,000 messages in one second on this queue; try again.")
            )
        return accepted

    # --- 3 to 6 ----------------------------------------------------------------------------
    def _write(
        self,
        files: QueueFiles,
        sound: Sound,
        accepted: list[tuple[Outgoing, str]],
        drops: list[str],
        dir_ino: int,
    ) -> Steps[None]:
        index, header = sound.index, sound.header
        names = [name for _, name in accepted]
        record = Record(files.name, self._entries(files, accepted), dropped=drops)
        wal, wal_header = sound.wal, sound.wal_header
        if wal is None or wal_header is None:  # the queue's first commit
            wal = files.wal()
            assert wal is not None
            wal_header = _header_of(wal)
        wal_header = self._room(files, wal, wal_header, record, header.last)
        dir_fd = files.dir_fd(dir_ino)
        index.write_records(header.committed, names)
        header.last, header.pending = names[-1], len(names)
        header.wal_off, header.wal_lsn = wal_header.tail_off, wal_header.tail_lsn
        index.write_header(header)
        logged = None
        try:
            logged = wal.append(wal_header, record, relaxed=self.relaxed)
            if not self.relaxed:
                yield wal.sync  # the group is durable once it has returned
        except Exception:  # (a process dying mid-way unwinds nothing: recovery's case)
            if logged is None:
                self._clear_pending(index, header)
            else:  # appended, but its flush failed: it must not be redone either
                self._undo(files, index, header, wal, logged, record, [], [])
            raise
        renamed: list[str] = []
        marked: list[str] = []
        try:
            expiries = "".join(
                f"{n} {int(m.expires_at * 1000)}\n" for m, n in accepted if m.expires_at is not None
            ).encode("ascii")
            if expiries:  # before the names exist: never a name without its expiry
                os.write(files.ttl_fd(), expiries)
            for message, name in accepted:
                os.rename(message.upload.temp_path, name, dst_dir_fd=dir_fd)
                message.upload.mark_committed()
                renamed.append(name)
            marked = self.nonces.mark_many((m.nonce for m, _ in accepted if m.nonce), sync=False)
        except Exception:
            self._undo(files, index, header, wal, logged, record, renamed, marked)
            raise
        for name in drops:
            unlink_quietly(os.path.join(files.dir, name))
        dir_stat = os.fstat(dir_fd)
        header.committed += len(names)
        header.pending = 0
        header.dir_mtime_ns, header.dir_ino = dir_stat.st_mtime_ns, dir_stat.st_ino
        index.write_header(header)
        if self.durability.shared:
            index.sync()  # another host reads the index from the server
        files.own_commit = (index.ino, header.committed, header.dir_mtime_ns, header.dir_ino)
        position = Position(wal.ino, logged.tail_off, logged.tail_lsn, names[-1])
        self.checkpointer.note(f"queue {files.name}", position, self._advance_for(files.name))
        if self.relaxed:
            self.flusher.note(files.wal_path)

    def _advance_for(self, queue: str) -> Callable[[object], None]:
        """The checkpointer's callback for ``queue`` (one per queue, kept)."""
        advance = self._advances.get(queue)
        if advance is None:

            def advance(position: object) -> None:
                assert isinstance(position, Position)
                self.advance(queue, position)

            if len(self._advances) > 4096:
                self._advances.clear()
            self._advances[queue] = advance
        return advance

    def _entries(self, files: QueueFiles, accepted: list[tuple[Outgoing, str]]) -> list[Entry]:
        """The record's entries: small messages carry their bytes (up to the group's
        budget); the others are flushed now and referred to by their upload's path."""
        entries, budget, large = [], MAX_GROUP_INLINE, []
        temp_dir = self.data_dir.temp_str
        root = len(str(self.data_dir.root)) + 1
        for message, name in accepted:
            upload = message.upload
            data = upload.inline
            if data is not None and upload.size <= min(INLINE_BYTES, budget):
                budget -= upload.size
                content: bytes | None = bytes(data)
            else:
                content = None
                large.append(upload)
            expires = None if message.expires_at is None else int(message.expires_at * 1000)
            entries.append(
                Entry(
                    path=f"queues/{files.name}/{name}",
                    size=upload.size,
                    data=content,
                    temp=upload.temp_path[root:],
                    nonce=message.nonce or "",
                    expires_ms=expires,
                )
            )
        if large:  # normally flushed before the lock (QueueStore.publish_many); not these
            sync_uploads(large, directory=temp_dir)
        return entries

    def _room(
        self,
        files: QueueFiles,
        wal: WriteAheadLog,
        wal_header: LogHeader,
        record: Record,
        last: str,
    ) -> LogHeader:
        """A log with room for the record. An empty ring whose end is too near starts
        again at its beginning. A full one is checkpointed at once (all before its tail
        is written: we hold the lock) and made larger, as the background checkpoint did
        not keep up with this queue."""
        ready = wal.room_for(wal_header, record)
        if ready is not None:
            return ready
        log.info("queue %s: write-ahead log full; checkpointing now", files.name)
        sync_volumes(self._volume)
        wal_header = wal.checkpointed(wal_header, wal_header.tail_off, wal_header.tail_lsn, last)
        return wal.make_room(wal_header, record, grow=True)

    @staticmethod
    def _clear_pending(index: idx.IndexFile, header: idx.IndexHeader) -> None:
        header.pending = header.wal_off = header.wal_lsn = 0
        try:
            index.write_header(header)
        except OSError:
            pass  # the next lock holder finds pending set and recovers

    def _undo(
        self,
        files: QueueFiles,
        index: idx.IndexFile,
        header: idx.IndexHeader,
        wal: WriteAheadLog,
        logged: LogHeader,
        record: Record,
        renamed: list[str],
        marked: list[str],
    ) -> None:
        """Take back a group that failed after its record was logged (no inode for a
        marker, a directory that cannot grow): nothing of it stays, and nobody could
        have seen it. If the volume refuses even that, ``pending`` stays set and the
        next lock holder redoes the group from its record."""
        try:
            for name in renamed:
                unlink_quietly(os.path.join(files.dir, name))
            self.nonces.unmark_many(marked)
            wal.take_back(logged, record)
        except OSError:
            log.exception("queue %s: a failed group could not be undone", files.name)
            return
        self._clear_pending(index, header)


def _joinable(group: list[Publish]) -> Callable[[Publish], bool]:
    """Which waiting submissions may join ``group`` once its locks are held: those
    without a nonce (the locks of theirs are not held), while the group stays within
    its cap."""
    room = MAX_GROUP_MESSAGES - sum(len(s.work) for s in group)

    def fits(submission: Publish) -> bool:
        nonlocal room
        room -= len(submission.work)
        return room >= 0 and all(m.nonce is None for m in submission.work)

    return fits


def _header_of(wal: WriteAheadLog) -> LogHeader:
    try:
        return wal.header()
    except LogCorrupt:  # checked by recovery just before; a stranger's file since
        raise OSError(f"{wal.path}: not a write-ahead log") from None
