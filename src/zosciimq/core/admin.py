"""Operators' work on whole queues: list them, purge them, delete them, replay them.

The disk work of the api's admin actions (PROTOCOL.md, "Admin actions"), kept here so
the format stays the core's alone: messages are found with ``walk``, indexes are kept
by ``QueueStore`` and group state by ``ConsumerGroups``.

* ``list_queues``: every queue with what its directory holds (messages, bytes, oldest
  and newest) and its consumer groups' lag, read lock-free (``stats(lock=False)``), so
  an operator's look never delays a publisher or a consumer.
* ``purge``: delete the messages visible when it starts (or those before a time or a
  name), then rebuild the index as claireup does, so pointers keep working; messages
  published meanwhile stay.
* ``delete``: remove the queue with its index, log, expiries and group state. The
  directory is renamed away under the queue lock (and the group locks), the lock every
  publisher's commit takes: a publish commits wholly before (and is deleted) or wholly
  after, into a new queue of that name; nobody ever sees half a queue.
* ``replay_pointer``: the pointer that makes a fetch start at a point in time.
"""

from __future__ import annotations

import errno
import os
import shutil
import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from stat import S_ISDIR

from zosciimq.core import walk
from zosciimq.core.durable import ensure_dir, fsync_dir, unlink_quietly
from zosciimq.core.groups import ConsumerGroups
from zosciimq.core.layout import DataDir
from zosciimq.core.locking import FileLock
from zosciimq.core.names import clean_queue, format_stamp, is_message_name, parse_name
from zosciimq.core.queues import QueueStore
from zosciimq.errors import InvalidInput, QueueNotFound

TRASH_MAX_AGE_SECONDS = 3600  # older entries are a crashed delete's: swept by the next


@dataclass(frozen=True)
class GroupInfo:
    name: str
    lag: int  # waiting + leased: what the group has not finished
    waiting: int
    leased: int
    acked: int
    dead_lettered: int
    oldest_unacked: str | None


@dataclass(frozen=True)
class QueueInfo:
    name: str
    messages: int  # message files in the directory now
    bytes: int
    oldest: str | None
    newest: str | None
    groups: list[GroupInfo] = field(default_factory=list)

    @property
    def oldest_at(self) -> str | None:
        return _published(self.oldest)

    @property
    def newest_at(self) -> str | None:
        return _published(self.newest)


@dataclass(frozen=True)
class Removed:
    """What a purge or a delete removed."""

    queue: str
    messages: int
    bytes: int
    groups: list[str] = field(default_factory=list)  # delete: the groups whose state went


@dataclass(frozen=True)
class Replay:
    """Where a pointer reader restarts: fetch after ``pointer`` gives ``first`` next."""

    queue: str
    since: str  # the 14-digit UTC stamp the time was taken to (whole seconds)
    pointer: str  # "" when nothing before the time is left: start at the beginning
    first: str | None  # the first name at or after the time (None: none yet)
    waiting: int  # names after the pointer now


def parse_utc(text: str) -> datetime:
    """An ISO-8601 time with its zone (``Z`` or ``+hh:mm``), in UTC.

    A time without a zone is refused, not guessed: a purge cut at the wrong hour
    deletes the wrong messages.
    """
    raw = text.strip()
    try:
        moment = datetime.fromisoformat(raw[:-1] + "+00:00" if raw[-1:] in "zZ" else raw)
        # A time near year 1 or 9999 whose zone moves it past the calendar's end
        # (0001-01-01T00:00:00+23:59) overflows here.
        utc = moment.astimezone(UTC) if moment.tzinfo is not None and raw else None
    except (ValueError, OverflowError):
        utc = None
    if utc is None:
        raise InvalidInput(
            f"Invalid time '{text[:60]}': ISO-8601 with a zone, e.g. 2024-05-01T14:00:00Z."
        )
    return utc


def cut_of(before: str) -> str:
    """The bound of a purge's ``before``: a message name as it is, a time as its
    14-digit stamp (every name of that second or later sorts after it)."""
    if is_message_name(before):
        return str(parse_name(before))
    return format_stamp(parse_utc(before))


class QueueAdmin:
    def __init__(self, data_dir: DataDir, queues: QueueStore, groups: ConsumerGroups) -> None:
        self.data_dir = data_dir
        self.queues = queues
        self.groups = groups

    # --- looking ---------------------------------------------------------------------------
    def list_queues(self, only: str | None = None) -> list[QueueInfo]:
        """Every queue (or ``only``), by name; one removed meanwhile is left out."""
        if only is not None:
            only = clean_queue(only)
            self._check_dir(only)
            names = [only]
        else:
            names = sorted(self.data_dir.iter_queue_names())
        found = []
        for name in names:
            try:
                found.append(self._info(name))
            except QueueNotFound:
                if only is not None:
                    raise
        return found

    def _info(self, queue: str) -> QueueInfo:
        count = size = 0
        oldest = newest = None
        for entry in walk.iter_queue_files(self.data_dir, queue):
            if entry.kind is not walk.Kind.MESSAGE:
                continue
            try:
                size += entry.entry.stat(follow_symlinks=False).st_size
            except FileNotFoundError:
                continue  # deleted while listing
            count += 1
            if oldest is None or entry.name < oldest:
                oldest = entry.name
            if newest is None or entry.name > newest:
                newest = entry.name
        groups = []
        for group in self.groups.groups_of(queue):
            try:
                stats = self.groups.stats(queue, group, lock=False)
            except InvalidInput:
                continue  # a file name the core would not have written
            groups.append(
                GroupInfo(
                    name=group,
                    lag=stats.waiting + stats.leased,
                    waiting=stats.waiting,
                    leased=stats.leased,
                    acked=stats.acked,
                    dead_lettered=stats.dead_lettered,
                    oldest_unacked=stats.oldest_unacked,
                )
            )
        self._check_dir(queue)
        return QueueInfo(queue, count, size, oldest, newest, groups)

    def replay_pointer(self, queue: str, since: datetime) -> Replay:
        """The pointer to fetch after so the next message is the first published at or
        after ``since`` (taken to its whole second): the last name before that second,
        or "" when none is left."""
        queue = clean_queue(queue)
        stamp = format_stamp(since)
        pointer = self.queues.last_before(queue, stamp)
        first = self.queues.names_after(queue, pointer, 1)
        waiting = self.queues.count_after(queue, pointer)
        return Replay(queue, stamp, pointer, first[0] if first else None, waiting)

    # --- removing --------------------------------------------------------------------------
    def purge(self, queue: str, before: str | None = None) -> Removed:
        """Delete the queue's messages: those visible now, or those sorting before
        ``before`` (a time or a name, see ``cut_of``). Later messages stay, and names keep
        rising (the rebuilt index keeps its floor), so pointers stay valid."""
        queue = clean_queue(queue)
        self._check_dir(queue)
        # Only what the queue's log checkpoint covers: a recovery never makes those
        # again (it redoes only records after the checkpoint, core.recovery).
        last = self.queues.checkpoint(queue)
        if before is None:

            def doomed(name: str) -> bool:
                return name <= last

        else:
            bound = cut_of(before)

            def doomed(name: str) -> bool:
                return name < bound and name <= last

        count = size = 0
        for entry in walk.iter_queue_files(self.data_dir, queue):
            if entry.kind is not walk.Kind.MESSAGE or not doomed(entry.name):
                continue
            try:
                length = entry.entry.stat(follow_symlinks=False).st_size
                os.unlink(entry.path)
            except FileNotFoundError:
                continue  # claireup was quicker
            count += 1
            size += length
        if count:
            fsync_dir(self.data_dir.queue_dir(queue))
            self.queues.rebuild_index(queue)
            for group in self.groups.groups_of(queue):
                try:  # the history of what is gone; leases stay for their holders
                    self.groups.tidy(queue, group)
                except (InvalidInput, QueueNotFound):
                    continue
        return Removed(queue, count, size)

    def delete(self, queue: str) -> Removed:
        """Remove the queue whole; a publish waiting for the lock makes it anew.

        Lock order as a consumer's (group, then queue): a consumer holds its group lock
        when it may need the queue lock, never the other way round.
        """
        queue = clean_queue(queue)
        self._check_dir(queue)
        groups = self.groups.groups_of(queue)
        trash = self.data_dir.trash
        ensure_dir(trash)
        target = str(trash / f"{queue}.{uuid.uuid4().hex}")
        count = size = 0
        with ExitStack() as held:
            for group in groups:
                held.enter_context(FileLock(self.data_dir.group_lock_path(queue, group)))
            held.enter_context(FileLock(self.data_dir.queue_lock_path(queue)))
            self._check_dir(queue)
            source = str(self.data_dir.queue_dir(queue))
            try:
                os.rename(source, target)
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
                target = source  # another file system: removed in place, under the lock
            else:
                fsync_dir(self.data_dir.queues)
            for path in (
                self.data_dir.index_path(queue),
                self.data_dir.wal_path(queue),  # nothing of the queue is redone
                self.data_dir.journal_path(queue),
                self.data_dir.ttl_path(queue),
                self.data_dir.usage_path(queue),
            ):
                unlink_quietly(path)
            for group in groups:
                self.groups.discard_locked(queue, group)
            if target == source:
                count, size = _remove_tree(target)
        for group in self.groups.groups_of(queue):  # begun before the locks were taken
            if group not in groups:
                self.groups.forget(queue, group)
                groups.append(group)
        self.groups.drop_queue_dir(queue)
        if target != source:
            count, size = _remove_tree(target)
        _sweep(trash)
        return Removed(queue, count, size, sorted(groups))

    def _check_dir(self, queue: str) -> None:
        try:
            stat = os.lstat(self.data_dir.queue_dir(queue))
        except FileNotFoundError:
            stat = None
        if stat is None or not S_ISDIR(stat.st_mode):
            raise QueueNotFound(f"Queue '{queue}' not found.")


def _remove_tree(path: str) -> tuple[int, int]:
    """Delete a queue directory; the messages and bytes it held."""
    count = size = 0
    for entry in walk.iter_message_files(path):
        if entry.kind is walk.Kind.MESSAGE:
            try:
                size += entry.entry.stat(follow_symlinks=False).st_size
            except FileNotFoundError:
                continue
            count += 1
    shutil.rmtree(path, ignore_errors=True)
    return count, size


def _sweep(trash: os.PathLike[str]) -> None:
    """What a delete that crashed half-way left in the trash (old enough not to be a
    running delete's)."""
    deadline = time.time() - TRASH_MAX_AGE_SECONDS
    try:
        entries = list(os.scandir(trash))
    except FileNotFoundError:
        return
    for entry in entries:
        try:
            if entry.stat(follow_symlinks=False).st_mtime < deadline:
                shutil.rmtree(entry.path, ignore_errors=True)
        except FileNotFoundError:
            continue


def _published(name: str | None) -> str | None:
    if name is None:
        return None
    return parse_name(name).published_at.strftime("%Y-%m-%dT%H:%M:%SZ")
