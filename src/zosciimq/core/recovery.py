"""Recovery: whatever a crash left, made whole again from the write-ahead log.

Two crashes, told apart by the boot id the log's header carries (``wal.boot_id``):

* **A process died** (kill -9, OOM, a container stopped hard) on a machine that kept
  running: the page cache survives, so every write it made is there. Only the group it
  was committing can be unfinished; the queue's index says so (``pending``), and the next
  holder of the queue's lock finishes it from its log record, or drops it when the record
  never became whole (then nobody was answered and no file was renamed).
  ``QueueRecovery.finish_dead_group``.
* **The machine went down** (power loss, a kernel crash, a reboot): the log's boot id is
  another one. Everything after the log's checkpoint may have been lost by the file
  system, so every whole record after it is redone: a message file that is missing,
  short or not the record's bytes is written again, markers and expiries put back, what
  the queue policy dropped dropped again. With ``interval`` durability the log's last
  records may be gone too: message files above the last name the log proves are moved
  aside into ``.zoscii/suspect/<queue>/`` and reported, never served. Then the volume is
  flushed and the checkpoint moved past the records. ``QueueRecovery.after_reboot``.

Both run under the queue's lock, when a service starts (``QueueStore.recover_volume``,
before it answers) and whenever a queue is next committed to or first read by a process.
Redoing is idempotent: a record redone twice (a crash during recovery) makes the same
files. A redo never creates a queue directory: one that is gone was deleted on purpose.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_ISDIR

from zosciimq.core import index as idx
from zosciimq.core import wal as walfile
from zosciimq.core import walk
from zosciimq.core.durable import unlink_quietly
from zosciimq.core.layout import DataDir
from zosciimq.core.names import (
    identified_name,
    is_message_name,
    is_queue_name,
    is_unidentified,
    parse_name,
)
from zosciimq.core.nonces import Nonces
from zosciimq.core.queue_files import QueueFiles
from zosciimq.core.upload import TEMP_SUFFIX
from zosciimq.core.wal import (
    SLOT_SIZE,
    Entry,
    LogCorrupt,
    LogHeader,
    Record,
    WriteAheadLog,
    read_header,
)
from zosciimq.errors import InvalidInput, QueueNotFound

log = logging.getLogger(__name__)

_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class Report:
    """What a recovery did, for the service's log and metrics."""

    queues: list[str] = field(default_factory=list)
    records: int = 0
    rewritten: list[str] = field(default_factory=list)  # files made again from the log
    suspects: list[str] = field(default_factory=list)  # moved aside: not provably whole
    lost: list[str] = field(default_factory=list)  # could not be made again (see redo)

    def add(self, other: Report) -> None:
        self.queues += other.queues
        self.records += other.records
        self.rewritten += other.rewritten
        self.suspects += other.suspects
        self.lost += other.lost

    def __bool__(self) -> bool:
        return bool(self.queues)


@dataclass
class Sound:
    """A queue's index and log as recovery left them, for a commit (lock held)."""

    index: idx.IndexFile
    header: idx.IndexHeader
    wal: WriteAheadLog | None
    wal_header: LogHeader | None


class Redo:
    """Makes the files of log records exist, whole, idempotently (lock of the log held)."""

    def __init__(self, data_dir: DataDir, nonces: Nonces) -> None:
        self.data_dir = data_dir
        self.nonces = nonces

    def record(self, record: Record, report: Report, ttl_fd: Callable[[], int] | None) -> bool:
        """Redo one record; whether anything had to be written or removed.

        Every path is checked against the layout first: a record that names anything but
        a message of its queue (or of the store) and an upload in ``queues/temp`` is not
        followed, whatever wrote it; nor is a path through a link."""
        changed = False
        expiries = []
        for entry in record.entries:
            if not self._expected(record, entry):
                log.error("not redone: %r is no message path of this log", entry.path)
                report.lost.append(entry.path)
                continue
            changed |= self._entry(entry, report)
            if entry.expires_ms is not None:
                expiries.append(f"{os.path.basename(entry.path)} {entry.expires_ms}\n")
        marked = self.nonces.mark_many((e.nonce for e in record.entries if e.nonce), sync=False)
        changed |= bool(marked)
        if expiries and ttl_fd is not None:
            os.write(ttl_fd(), "".join(expiries).encode("ascii"))  # a repeat is harmless
        for name in record.dropped:  # (a queue's: the store drops nothing)
            if not (record.queue and is_queue_name(record.queue) and is_message_name(name)):
                continue
            path = os.path.join(self.data_dir.queue_dir(record.queue), name)
            if os.path.lexists(path):
                unlink_quietly(path)
                changed = True
        report.records += 1
        return changed

    def _target(self, entry: Entry) -> str:
        return os.path.join(self.data_dir.root, entry.path)

    def _expected(self, record: Record, entry: Entry) -> bool:
        """The entry's paths are what a commit of this log writes, with no link on the
        way: ``queues/<queue>/<name>`` (the store: ``store/<d1>/<d2>/<d3>/<name>``) and
        ``queues/temp/<upload>.part``."""
        parts = entry.path.split("/")
        name = parts[-1]
        if record.queue:
            shaped = (
                len(parts) == 3
                and parts[:2] == ["queues", record.queue]
                and is_queue_name(record.queue)
                and is_message_name(name)
            )
        else:
            try:
                shaped = len(parts) == 5 and parts[0] == "store" and (
                    tuple(parts[1:4]) == parse_name(name).store_dirs
                )
            except InvalidInput:
                shaped = False
        temp = entry.temp.split("/")
        if entry.temp and not (
            len(temp) == 3 and temp[:2] == ["queues", "temp"] and temp[2].endswith(TEMP_SUFFIX)
        ):
            return False
        return shaped and _no_links(str(self.data_dir.root), parts[:-1])

    def _entry(self, entry: Entry, report: Report) -> bool:
        target = self._target(entry)
        if _whole(target, entry) or _identified_twin(target, entry):
            return False
        temp = os.path.join(self.data_dir.root, entry.temp) if entry.temp else ""
        if temp and temp.endswith(TEMP_SUFFIX) and _whole(temp, entry):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.rename(temp, target)
        elif entry.data is not None:
            _write(target, entry.data, self.data_dir.temp_str)
        else:
            # A large message whose rename was lost and whose flushed upload is gone too:
            # only a hand (or a cleaner of temp files) removes that within a checkpoint.
            log.error("cannot redo %s: neither it nor its upload %s is whole", target, temp)
            report.lost.append(entry.path)
            return False
        report.rewritten.append(entry.path)
        return True


class QueueRecovery:
    """Recovery of one queue (its lock held): a dead publisher's group, a reboot."""

    def __init__(self, data_dir: DataDir, nonces: Nonces, sync: Callable[[], None]) -> None:
        self.data_dir = data_dir
        self.redo = Redo(data_dir, nonces)
        self.sync = sync  # flushes the volume (checkpoint.sync_volumes)

    def sound_index(self, files: QueueFiles, dir_stat: os.stat_result | None = None) -> Sound:
        """The queue's index, brought in line with its log and its directory (lock held;
        the caller gives the index back). ``dir_stat``: the directory's, when the caller
        just took it.

        After a restart of the machine the log is redone first. Then the index header:
        unreadable (new, torn, zeros, an older version's) → rebuilt from a listing;
        ``pending`` → its publisher died mid-group: finished or dropped, then rebuilt;
        the directory's mtime or inode not the header's (another writer, claireup, a
        crash), or a last visible record that is no name (a power loss) → rebuilt.
        """
        wal = files.wal(create=False)
        wal_header = None  # read once: nothing else writes the log while the lock is held
        if wal is not None:
            try:
                wal_header = wal.header()
                if wal_header.boot != walfile.boot_id():
                    self.after_reboot(files, wal)
                    wal_header = wal.header()
            except LogCorrupt:
                wal, wal_header = None, None  # never finished: the committer makes it again
        files.wal_checked = True
        index = files.locked_index()
        header = index.header()
        floor = ""
        if header is None or header.stale:
            pass
        elif header.pending:
            self.finish_dead_group(files, index, header)
            floor = header.last
        elif header.matches(dir_stat or os.lstat(files.dir)) and _tail_is_sound(
            files, index, header
        ):
            return Sound(index, header, wal, wal_header)
        else:
            floor = header.last
        files.index.give_back(index)
        self._rebuild(files, floor=floor)
        rebuilt = files.index.borrow(create=True)
        assert rebuilt is not None
        header = rebuilt.header()
        assert header is not None
        return Sound(rebuilt, header, wal, wal.header() if wal is not None else None)

    def finish_dead_group(
        self, files: QueueFiles, index: idx.IndexFile, header: idx.IndexHeader
    ) -> None:
        """The group whose publisher died between ``pending`` and the commit: redone from
        its record when the record is whole (and the log flushed, so the group outlives a
        power loss from now on), else dropped (its files were never renamed: that comes
        after the record). The caller rebuilds the index from the directory afterwards."""
        names = list(index.iter_from(header.committed, header.committed + header.pending))
        wal = files.wal(create=False)
        record = None
        if wal is not None and header.wal_lsn and all(map(is_message_name, names)):
            wal_header = wal.header()
            for found in wal.records(wal_header, start=(header.wal_off, header.wal_lsn)):
                if found.queue == files.name and _names_of(found) == names:
                    record = found
                break
        if record is None:
            log.warning("queue %s: a publisher died before its group was logged", files.name)
            return
        assert wal is not None
        report = Report()
        self.redo.record(record, report, files.ttl_fd)
        if wal_header.tail_lsn <= record.lsn:  # it died before its header counted it
            wal_header = wal.write_header(_with_tail(wal_header, record.end, record.lsn + 1))
        wal.sync()
        log.warning(
            "queue %s: finished the group of %d message(s) of a publisher that died "
            "mid-commit (%d file(s) made again)",
            files.name,
            len(names),
            len(report.rewritten),
        )

    def after_reboot(self, files: QueueFiles, wal: WriteAheadLog) -> Report:
        """Redo everything after the checkpoint of a log last written under another boot;
        with ``interval`` durability, move aside what the log cannot prove."""
        report = Report()
        try:
            header = wal.header()
        except LogCorrupt:
            return report
        if header.boot == walfile.boot_id():
            return report
        try:
            files.dir_stat()
        except QueueNotFound:  # deleted on purpose (or a link): nothing to bring back
            unlink_quietly(files.wal_path)
            return report
        records = list(wal.records(header))
        changed = False
        for record in records:
            if record.queue == files.name:
                changed |= self.redo.record(record, report, files.ttl_fd)
        last = max([header.ckpt_last, *(n for r in records for n in _names_of(r))])
        if header.relaxed:
            moved = self._move_suspects(files, above=last)
            report.suspects += moved
            changed |= bool(moved)
        end = (
            (records[-1].end, records[-1].lsn + 1)
            if records
            else (header.ckpt_off, header.ckpt_lsn)
        )
        self.sync()
        wal.checkpointed(_with_tail(header, *end), *end, last)
        names = [n for r in records if r.queue == files.name for n in _names_of(r)]
        if changed or header.relaxed or not _indexed(files, names):
            self._rebuild(files, floor=last)
        if records or changed:
            report.queues.append(files.name)
        if report:
            log.warning(
                "queue %s: recovered after a restart of the machine: %d record(s) redone, "
                "%d file(s) made again, %d moved aside as not provably whole%s",
                files.name,
                report.records,
                len(report.rewritten),
                len(report.suspects),
                f" ({', '.join(report.suspects[:10])})" if report.suspects else "",
            )
        return report

    def _rebuild(self, files: QueueFiles, floor: str) -> None:
        idx.rebuild(files.index_path, files.dir, floor=floor)
        files.index.drop()
        files.own_commit = None
        unlink_quietly(files.usage_path)  # the policy's counts: counted again

    def _move_suspects(self, files: QueueFiles, above: str) -> list[str]:
        """Message files named above ``above``: written after the last record the log
        kept, so their content may not have reached the disk. Moved, never deleted."""
        moved = []
        target = self.data_dir.suspects / files.name
        for name in idx.list_queue_names(files.dir):
            if name <= above:
                continue
            target.mkdir(parents=True, exist_ok=True)
            os.rename(os.path.join(files.dir, name), target / name)
            moved.append(f"{files.name}/{name}")
        return moved


def _tail_is_sound(files: QueueFiles, index: idx.IndexFile, header: idx.IndexHeader) -> bool:
    """The last record the header counts is a name; known without reading it when the
    header is still the one this process's own last commit wrote."""
    if files.own_commit == (index.ino, header.committed, header.dir_mtime_ns, header.dir_ino):
        return True
    return index.tail_is_sound(header.committed)


def _indexed(files: QueueFiles, names: list[str]) -> bool:
    """Whether the queue's index is whole and lists every one of ``names`` (the names of
    the records after the log's checkpoint: the index pages that a power loss can have
    taken are theirs; the ones before were flushed by the checkpoint). Cheap: a lookup
    each, so a host that takes over a queue on a shared volume rebuilds nothing."""
    index = idx.IndexFile.open(files.index_path)
    if index is None:
        return False
    with index:
        header = index.header()
        if header is None or header.pending or not index.tail_is_sound(header.committed):
            return False
        for name in names:
            position = index.first_after(name[:-1], header.committed)
            if position >= header.committed or index.record(position) != name:
                return False
    return True


def _names_of(record: Record) -> list[str]:
    return [os.path.basename(e.path) for e in record.entries]


def _with_tail(header: LogHeader, offset: int, lsn: int) -> LogHeader:
    return header.but(tail_off=offset, tail_lsn=lsn)


def _no_links(root: str, directories: list[str]) -> bool:
    """Each of ``directories`` below ``root`` is a real directory or does not exist yet
    (then it is made): never a link, which would lead out of the data directory."""
    path = root
    for part in directories:
        path = os.path.join(path, part)
        try:
            if not S_ISDIR(os.lstat(path).st_mode):
                return False
        except FileNotFoundError:
            return True
    return True


def _whole(path: str, entry: Entry) -> bool:
    """``path`` is a regular file of the entry's size and, when the record holds the
    bytes, those bytes (a large message's upload was flushed before its record: its
    size says it is whole)."""
    try:
        fd = os.open(path, _READ)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:  # a link (ELOOP): not ours, never followed
        return False
    try:
        if os.fstat(fd).st_size != entry.size:
            return False
        if entry.data is None:
            return True
        return os.pread(fd, entry.size + 1, 0) == entry.data
    finally:
        os.close(fd)


def _identified_twin(path: str, entry: Entry) -> bool:
    """A store message made "-u" that a consumer identified since (renamed without it)."""
    if not is_unidentified(path):
        return False
    return _whole(identified_name(path), entry)


def _write(target: str, data: bytes, temp_dir: str) -> None:
    """Write ``data`` as ``target`` by a rename (not flushed: the caller flushes the
    volume), so a reader never sees it half written."""
    os.makedirs(temp_dir, exist_ok=True)
    temp = os.path.join(temp_dir, f"{os.urandom(16).hex()}{TEMP_SUFFIX}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    os.replace(temp, target)


def wal_queues(data_dir: DataDir) -> Iterable[str]:
    """The queues that have a write-ahead log (for a recovery at start)."""
    for found in walk.iter_index_files(data_dir):
        if found.kind is walk.Kind.WAL and found.queue:
            yield found.queue


def needs_reboot_recovery(path: str | Path) -> bool:
    """Whether the log at ``path`` was last written under another boot (one pread)."""
    try:
        fd = os.open(path, _READ)
    except OSError:
        return False
    try:
        header = read_header(os.pread(fd, 2 * SLOT_SIZE, 0))
    finally:
        os.close(fd)
    return header is not None and header.boot != walfile.boot_id()
