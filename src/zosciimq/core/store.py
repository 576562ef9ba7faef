"""The data store: store, retrieve, scan, identify (PROTOCOL.md section 3).

Store names carry their own location (the base-36 fan-out of their time), so retrieve
needs no index. Names ending ``-u.bin`` are "unidentified": written by a replicator
(or with ``u=1``) and waiting for a consumer to find them with scan and mark them with
identify, which renames them without the suffix.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

from zosciimq.core import wal as walfile
from zosciimq.core import walk
from zosciimq.core.checkpoint import Checkpointer, Durability, Flusher, sync_volumes
from zosciimq.core.clock import utc_now
from zosciimq.core.durable import fsync_dir, names_inode, raise_if_full, unlink_quietly
from zosciimq.core.group_commit import Lane, Submission
from zosciimq.core.layout import DataDir
from zosciimq.core.locking import FileLock
from zosciimq.core.names import MessageName, is_unidentified, new_name, parse_name
from zosciimq.core.nonces import Nonces
from zosciimq.core.recovery import Redo, Report
from zosciimq.core.upload import INLINE_BYTES, Upload, sync_uploads
from zosciimq.core.wal import Entry, LogCorrupt, LogHeader, Record, WriteAheadLog
from zosciimq.errors import MessageNotFound

log = logging.getLogger(__name__)
STORE_KEY = "the store"  # the checkpointer's name for its log (no queue has a space)


@dataclass(frozen=True)
class StoreResult:
    name: str | None  # None when the nonce had been used: nothing was written
    duplicate: bool = False


@dataclass(frozen=True)
class _Item:
    """One message for the store: a new name (``name`` None) or a given one."""

    upload: Upload
    name: MessageName | None = None
    retention_days: int = 0
    nonce: str | None = None
    unidentified: bool = False


_Put = Submission[Sequence[_Item], list[StoreResult]]


class DataStore:
    """The store. Its commits go through one write-ahead log (``.zoscii/store.wal``) under
    one lock file, as a queue's do (core.commit): the record flushed, then the renames
    and markers unflushed, shared by the stores of one process that arrive together."""

    def __init__(
        self,
        data_dir: DataDir,
        clock: Callable[[], datetime] = utc_now,
        *,
        durability: Durability | None = None,
        checkpointer: Checkpointer | None = None,
        flusher: Flusher | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.clock = clock
        self.nonces = Nonces(data_dir)
        self.durability = durability or Durability()
        self._volume = data_dir.volumes()
        self.checkpointer = checkpointer or Checkpointer(
            self._volume, self.durability.checkpoint_seconds
        )
        self.flusher = flusher or Flusher(self.durability.flush_interval)
        self._lane: Lane[Sequence[_Item], list[StoreResult]] = Lane()
        self._lock = FileLock(data_dir.store_wal_lock_path)
        self._wal: WriteAheadLog | None = None
        self._redo = Redo(data_dir, self.nonces)

    def close(self) -> None:
        self.flusher.close()
        self.checkpointer.close()
        if self._wal is not None:
            self._wal.close()
            self._wal = None

    def path_of(self, name: MessageName) -> Path:
        return self.data_dir.store_path(str(name), name.store_dirs)

    def store(
        self,
        upload: Upload,
        *,
        retention_days: int,
        nonce: str | None = None,
        unidentified: bool = False,
    ) -> StoreResult:
        """Store under a new name (``CCCC`` = 0000); durable when this returns."""
        item = _Item(upload, None, retention_days, nonce, unidentified)
        return self._commit([item])[0]

    def put(self, upload: Upload, name: MessageName) -> bool:
        """Store under a given name (replication keeps the source's name).

        False, writing nothing, when the name or its identified/unidentified twin exists:
        so a replicator that repeats a message after a crash stores it once.
        """
        return self.put_many([(upload, name)])[0]

    def put_many(self, items: Sequence[tuple[Upload, MessageName]]) -> list[bool]:
        """``put`` for several messages in one commit (what a replicator's batch needs):
        True for each one written, all or nothing."""
        results = self._commit([_Item(upload, name) for upload, name in items])
        return [result.name is not None for result in results]

    def _commit(self, items: Sequence[_Item]) -> list[StoreResult]:
        if not items:
            return []
        large = [i.upload for i in items if i.upload.size > INLINE_BYTES]
        try:
            if large:  # outside any lock: the record only refers to these
                sync_uploads(large, directory=self.data_dir.temp_str)
            return self._lane.submit(items, self._commit_group)
        except OSError as exc:
            raise_if_full(exc)
            raise

    def _commit_group(self, group: list[_Put]) -> None:
        nonces = [i.nonce for s in group for i in s.work]
        with self.nonces.lock(*nonces), self._lock:
            # who came while we waited for the lock, unless a nonce (its lock not held)
            self._lane.join(group, lambda s: all(i.nonce is None for i in s.work))
            wal, header, _ = self._log()
            placed: list[tuple[_Item, Path]] = []
            entries: list[Entry] = []
            seen: set[str] = set()
            budget = 16 << 20
            for submission in group:
                results = []
                for item in submission.work:
                    name = self._name_for(item, seen)
                    if name is None:
                        results.append(StoreResult(None, duplicate=item.name is None))
                        continue
                    target = self.path_of(name)
                    upload = item.upload
                    inline = upload.inline is not None and upload.size <= min(INLINE_BYTES, budget)
                    if inline:
                        budget -= upload.size
                    else:
                        sync_uploads([upload], directory=self.data_dir.temp_str)
                    content = bytes(upload.inline) if inline and upload.inline is not None else None
                    entries.append(
                        Entry(
                            path=os.path.relpath(target, self.data_dir.root),
                            size=upload.size,
                            data=content,
                            temp=os.path.relpath(upload.temp_path, self.data_dir.root),
                            nonce=item.nonce or "",
                        )
                    )
                    placed.append((item, target))
                    results.append(StoreResult(str(name)))
                submission.result = results
            if not entries:
                return
            record = Record("", entries)
            header = self._room(wal, header, record)
            logged = wal.append(header, record, relaxed=self.durability.relaxed)
            done: list[Path] = []
            marked: list[str] = []
            try:
                if not self.durability.relaxed:
                    wal.sync()
                for item, target in placed:
                    os.makedirs(target.parent, exist_ok=True)  # flushed by the checkpoint
                    os.rename(item.upload.temp_path, target)
                    item.upload.mark_committed()
                    done.append(target)
                marked = self.nonces.mark_many((i.nonce for i, _ in placed if i.nonce), sync=False)
            except Exception:
                for target in done:
                    unlink_quietly(target)
                self.nonces.unmark_many(marked)
                try:
                    wal.take_back(logged, record)
                except OSError:
                    log.exception("store: a failed commit could not be taken out of its log")
                raise
            position = (wal.ino, logged.tail_off, logged.tail_lsn)
            self.checkpointer.note(STORE_KEY, position, self._checkpoint_to)
            if self.durability.relaxed:
                self.flusher.note(str(self.data_dir.store_wal_path))

    def _name_for(self, item: _Item, seen: set[str]) -> MessageName | None:
        """The name ``item`` is stored under (nonce locks held), or None when its nonce
        was used or its given name (or its twin) exists."""
        if item.name is not None:
            if str(item.name) in seen or self.exists(item.name):
                return None
            seen.add(str(item.name))
            return item.name
        if item.nonce is not None:
            if item.nonce in seen or self.nonces.used(item.nonce):
                return None
            seen.add(item.nonce)
        return new_name(self.clock(), item.retention_days, unidentified=item.unidentified)

    def _log(self) -> tuple[WriteAheadLog, LogHeader, Report]:
        """The store's log (lock held), recovered first when the machine restarted."""
        path = str(self.data_dir.store_wal_path)
        wal = self._wal
        if wal is not None and not names_inode(path, wal.ino):
            wal.close()
            wal = None
        if wal is None:
            wal = self._wal = WriteAheadLog.open(path, create=True)
            assert wal is not None
        try:
            header = wal.header()
        except LogCorrupt:
            wal.close()
            self._wal = None
            raise OSError(f"{path}: not a write-ahead log") from None
        report = Report()
        if header.boot != walfile.boot_id():
            report = self._recover(wal, header)
            header = wal.header()
        return wal, header, report

    def _room(self, wal: WriteAheadLog, header: LogHeader, record: Record) -> LogHeader:
        ready = wal.room_for(header, record)
        if ready is not None:
            return ready
        sync_volumes(self._volume)
        header = wal.checkpointed(header, header.tail_off, header.tail_lsn, "")
        return wal.make_room(header, record, grow=True)

    def _checkpoint_to(self, position: object) -> None:
        assert isinstance(position, tuple)
        ino, offset, lsn = position
        with self._lock:
            wal = self._wal
            if (
                wal is None
                or wal.ino != ino
                or not names_inode(str(self.data_dir.store_wal_path), ino)
            ):
                return
            header = wal.header()
            if header.ckpt_lsn < lsn <= header.tail_lsn:
                wal.checkpointed(header, offset, lsn, "")

    def _recover(self, wal: WriteAheadLog, header: LogHeader) -> Report:
        """Redo the records after the checkpoint (lock held): the machine restarted."""
        report = Report()
        records = list(wal.records(header))
        for record in records:
            self._redo.record(record, report, None)
        end = (header.ckpt_off, header.ckpt_lsn)
        if records:
            end = (records[-1].end, records[-1].lsn + 1)
        sync_volumes(self._volume)
        wal.checkpointed(header.but(tail_off=end[0], tail_lsn=end[1]), end[0], end[1], "")
        if records:
            report.queues.append("(store)")
            log.warning(
                "store: recovered after a restart of the machine: %d record(s) redone, "
                "%d file(s) made again",
                report.records,
                len(report.rewritten),
            )
        return report

    def checkpoint(self) -> Callable[[str], bool]:
        """Checkpoint the store's log now (a flush of the volume), and return what a
        deleter (claireup) asks of each file it would delete: whether a record after the
        checkpoint still names it (then it must stay for now: a recovery would make it
        again). A file listed after this call existed before any record appended since,
        so its record, if any, is in the log when it is asked about."""
        path = self.data_dir.store_wal_path
        if path.exists():  # (no log: nothing ever committed here, nor a lock file made)
            with self._lock:
                wal, header, _ = self._log()
                if not header.empty:
                    sync_volumes(self._volume)
                    wal.checkpointed(header, header.tail_off, header.tail_lsn, "")
        seen: dict[str, object] = {"lsn": None, "paths": frozenset()}

        def logged(file: str) -> bool:
            if not path.exists():
                return False
            with self._lock:
                wal, header, _ = self._log()
                if seen["lsn"] != header.tail_lsn:
                    seen["lsn"] = header.tail_lsn
                    seen["paths"] = frozenset(
                        e.path for r in wal.records(header) for e in r.entries
                    )
            return os.path.relpath(file, self.data_dir.root) in seen["paths"]  # type: ignore[operator]

        return logged

    def recover_volume(self) -> Report:
        """Redo what a restart of the machine may have taken from the store (at start)."""
        if not self.data_dir.store_wal_path.exists():
            return Report()
        with self._lock:
            return self._log()[2]

    def exists(self, name: MessageName) -> bool:
        return (
            self.path_of(name.identified()).exists()
            or self.path_of(name.unidentified_variant()).exists()
        )

    def retrieve(self, raw_name: str) -> tuple[str, BinaryIO, int]:
        """Open a stored message by its exact name (with or without ``-u``): name, file, size."""
        name = parse_name(raw_name)
        try:
            file = open(self.path_of(name), "rb")  # noqa: SIM115 - the caller closes it
        except FileNotFoundError:
            raise MessageNotFound("Message not found.") from None
        return str(name), file, os.fstat(file.fileno()).st_size

    def scan(self) -> list[str]:
        """Every unidentified store name, sorted (a full walk: scan is a listing by nature)."""
        return sorted(name for name in self.iternames_inode() if is_unidentified(name))

    def identify(self, names: Iterable[MessageName]) -> list[str]:
        """Rename each existing ``-u`` file without the suffix; returns the new names."""
        renamed = []
        touched: set[Path] = set()
        for name in names:
            if not name.unidentified:
                continue
            source, target = self.path_of(name), self.path_of(name.identified())
            try:
                os.rename(source, target)
            except FileNotFoundError:
                continue
            renamed.append(str(name.identified()))
            touched.add(target.parent)
        for directory in touched:
            fsync_dir(directory)
        return renamed

    def iternames_inode(self) -> Iterator[str]:
        for _path, name in self.iter_files():
            yield name

    def iter_files(self) -> Iterator[tuple[Path, str]]:
        """(path, name) of every well-formed message file under store/."""
        for found in walk.iter_store_files(self.data_dir):
            if found.kind is walk.Kind.MESSAGE:
                yield Path(found.path), found.name


def fanout_roots(data_dir: DataDir) -> list[Path]:
    """The store's first-level fan-out directories (at most 36).

    They split a full walk of the store into independent pieces of work, so a parallel
    scanner (statissa's Spark job) lists only these and walks each one elsewhere.
    """
    return _subdirs(data_dir.store)


def _subdirs(path: Path) -> list[Path]:
    try:
        with os.scandir(path) as entries:
            return sorted(Path(e.path) for e in entries if e.is_dir(follow_symlinks=False))
    except FileNotFoundError:
        return []
