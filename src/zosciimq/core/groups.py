"""Consumer groups: a queue shared by competing consumers, each message to one at a time.

A pointer reader follows a queue alone. A group is many consumers that split it: each
message is leased to one consumer for a while; it is acked (done for the group),
requeued (behind the messages waiting at that moment, as PHPMQ's "pop from queue,
append to queue"), dead-lettered (copied to the group's dead-letter queue, see
``dead_letter_queue``), or its lease runs out and it is delivered again. After
``max_deliveries`` deliveries (the queue policy's ``dead_letter_max_deliveries`` where it
sets one), or past its TTL, it goes to the dead letters by itself.
Groups are independent of each other and of pointer readers: they only read the queue.

State: one append-only log per group (``.zoscii/groups/<queue>/<group>.log``), every
line checksummed, written under the group's lock file (an fcntl lock: shared by every
worker and container on the volume). Each process replays it into memory and reads
only what others appended since. A line about an ack, a requeue or a dead letter is
flushed before the answer: an ack that was answered is never lost. A delivery is
written before it is answered but not flushed: after a power loss it may be delivered
again, which leases allow anyway (at least once). The log is rewritten as a snapshot
when it has grown well past the state it describes (its format, replay and compaction:
``core.group_log``; here, what the operations mean). Services keep it tidy and observe it
through this module only: claireup with ``forget`` (the state of a vanished queue) and
``tidy`` (the history of deleted messages), statissa with ``stats(lock=False)``.

Receipts (``<name>:<token>``) fence the work: only the holder of the current delivery
of a message can ack, requeue or dead-letter it; a receipt whose lease went to another
consumer is refused (``Fenced``), never applied to the new delivery.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, BinaryIO, TypeVar

from zosciimq.core import group_log
from zosciimq.core.durable import raise_if_full
from zosciimq.core.group_commit import Lane, Submission
from zosciimq.core.group_log import GroupState, LogWriter, OpenEntry
from zosciimq.core.layout import GROUP_SUFFIX, DataDir
from zosciimq.core.locking import FileLock
from zosciimq.core.names import (
    MAX_TOKEN_LENGTH,
    clean_queue,
    is_message_name,
    is_queue_name,
    parse_name,
)
from zosciimq.core.outgoing import Outgoing
from zosciimq.core.queues import QueueStore
from zosciimq.core.upload import Upload
from zosciimq.errors import Fenced, InvalidInput, QueueNotFound, ZosciiError

log = logging.getLogger(__name__)

R = TypeVar("R")

DEFAULT_MAX_DELIVERIES = 5
DEAD_SUFFIX = "--dead"
MAX_LANES = 4096  # groups whose waiting operations this process tracks (core.group_commit)
_CONSUMER = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass
class Delivery:
    """A message leased to a consumer; the caller closes ``file``."""

    name: str
    receipt: str
    file: BinaryIO
    size: int
    deliveries: int  # 1 the first time
    lease_until: float  # Unix seconds
    ttl_left: float | None  # seconds, None: no TTL


@dataclass(frozen=True)
class Outcome:
    """What became of one receipt: ``ok``, or why not (``fenced``, ``unknown``)."""

    receipt: str
    result: str
    name: str = ""


@dataclass
class GroupStats:
    waiting: int  # not delivered yet, or back for another delivery
    leased: int
    acked: int  # totals since the group began
    redelivered: int
    dead_lettered: int
    oldest_unacked: str | None  # the name (its time is the age)


@dataclass
class Tidied:
    """What ``tidy`` did to a group's log (with ``dry_run``: would do)."""

    compacted: bool = False
    waiting_dropped: int = 0  # waiting entries of gone messages
    acks_dropped: int = 0  # remembered acks of gone messages
    lines_dropped: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    leftovers: list[tuple[str, int]] = field(default_factory=list)  # (path, bytes) deleted


@dataclass
class _Stale:
    waiting: list[str]
    acks: list[str]
    lines: int  # log lines about gone messages that are not open
    size: int  # the log's bytes

    @property
    def worth_it(self) -> bool:
        return bool(self.waiting or self.acks or self.lines)


def clean_group(raw: str | None) -> str:
    """A group name: the rules of a queue name (it becomes part of file names)."""
    if not raw:
        raise InvalidInput("Missing consumer group (group).")
    try:
        return clean_queue(raw)
    except InvalidInput:
        raise InvalidInput(
            f"Invalid group '{raw[:100]}': use 1 to {MAX_TOKEN_LENGTH} of a-z 0-9 _ -."
        ) from None


def dead_letter_queue(queue: str, group: str) -> str:
    """Where a group's dead letters go: a queue of their own, fetched, consumed and
    replayed like any other."""
    name = f"{queue}--{group}{DEAD_SUFFIX}"
    if len(name) > MAX_TOKEN_LENGTH:
        raise InvalidInput(f"Queue and group names too long for a dead-letter queue: {name}.")
    return name


def dead_letter_owners(name: str) -> list[tuple[str, str]]:
    """Every (queue, group) whose dead-letter queue is called ``name`` (a clean queue
    name); [] when it is no dead-letter queue. Names may hold ``--`` themselves, so one
    name can be the dead letters of several pairs (the same queue on disk for all)."""
    if not name.endswith(DEAD_SUFFIX):
        return []
    stem = name[: -len(DEAD_SUFFIX)]
    owners = []
    at = stem.find("--")
    while at >= 0:
        queue, group = stem[:at], stem[at + 2 :]
        if queue and group:
            owners.append((queue, group))
        at = stem.find("--", at + 1)
    return owners


def parse_receipt(receipt: str) -> tuple[str, str]:
    name, sep, token = receipt.partition(":")
    if not sep or not token.isalnum() or len(name) > 80:
        raise InvalidInput(f"Invalid receipt '{receipt[:120]}'.")
    return name, token


class ConsumerGroups:
    def __init__(
        self,
        data_dir: DataDir,
        queues: QueueStore,
        *,
        max_deliveries: int = DEFAULT_MAX_DELIVERIES,
        max_deliveries_for: Callable[[str, int], int] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``max_deliveries``: the server's default; ``max_deliveries_for(queue, default)``
        a queue's own (``PolicySource.max_deliveries_for``), asked at each lease so an
        edited policy file applies without a restart."""
        self.data_dir = data_dir
        self.queues = queues
        self.max_deliveries = max_deliveries
        self.max_deliveries_for = max_deliveries_for
        self.clock = clock
        self._states: dict[tuple[str, str], GroupState] = {}
        self._lanes: dict[tuple[str, str], Lane[Any, Any]] = {}
        self._mutex = threading.Lock()

    # --- the operations -------------------------------------------------------------------
    def consume(
        self, queue: str, group: str, *, count: int, lease: float, consumer: str = "-"
    ) -> list[Delivery]:
        """Lease up to ``count`` messages: redeliveries first, then new ones in name
        order, then requeued ones whose turn came. Expired or worn-out messages found on
        the way go to the dead letters."""
        limit = self.deliveries_limit(queue)
        directory = str(self.data_dir.queue_dir(clean_queue(queue)))
        consumer = consumer if _CONSUMER.fullmatch(consumer) else "-"

        def lease_some(state: GroupState, writer: LogWriter) -> list[Delivery]:
            deliveries: list[Delivery] = []
            now = self.clock()
            for name, entry, expires_at in self._candidates(queue, state, now, count):
                if len(deliveries) >= count:
                    break
                delivery = self._lease(
                    queue,
                    group,
                    directory,
                    state,
                    writer,
                    name,
                    entry,
                    expires_at,
                    now,
                    lease,
                    consumer,
                    limit,
                )
                if delivery is not None:
                    deliveries.append(delivery)
            return deliveries

        return self._together(queue, group, lease_some)

    def ack(self, queue: str, group: str, receipts: Sequence[str]) -> list[Outcome]:
        """Finish each receipt's message for the group. Repeating an ack that succeeded
        answers ``ok`` again (a retry after a lost reply)."""

        def acks(state: GroupState, writer: LogWriter) -> list[Outcome]:
            def finish(receipt: str, name: str, token: str, entry: OpenEntry) -> None:
                del state.open[name]
                state.acked += 1
                state.remember(receipt, "A")
                writer.acked(name, token)

            writer.must_sync = True
            return _settle(state, receipts, "A", finish)

        return self._together(queue, group, acks)

    def requeue(
        self,
        queue: str,
        group: str,
        receipts: Sequence[str],
        *,
        delay: float = 0.0,
        ttl: float | None = None,
    ) -> list[Outcome]:
        """End the lease now; the message waits ``delay`` seconds and its turn behind the
        messages waiting now. ``ttl``: a new time to live from now (0: none)."""

        def requeues(state: GroupState, writer: LogWriter) -> list[Outcome]:
            now = self.clock()
            behind = self.queues.last_name(queue)  # the queue's end now: it waits behind it

            def put_back(receipt: str, name: str, token: str, entry: OpenEntry) -> None:
                state.remember(receipt, "Q")
                entry.token, entry.lease_until = "", 0.0
                entry.available_at = now + max(0.0, delay)
                entry.behind = behind
                if ttl is not None:
                    entry.expires_at = now + ttl if ttl > 0 else None
                writer.requeued(entry, token)

            writer.must_sync = True
            return _settle(state, receipts, "Q", put_back)

        return self._together(queue, group, requeues)

    def dead_letter(
        self, queue: str, group: str, receipts: Sequence[str], *, reason: str = "rejected"
    ) -> list[Outcome]:
        """Move each receipt's message out of the group's way into its dead letters."""

        def buries(state: GroupState, writer: LogWriter) -> list[Outcome]:
            def bury(receipt: str, name: str, token: str, entry: OpenEntry) -> None:
                self._bury(queue, group, state, writer, name, reason, token)

            writer.must_sync = True
            return _settle(state, receipts, "X", bury)

        return self._together(queue, group, buries)

    def extend(self, queue: str, group: str, receipt: str, lease: float) -> float:
        """Give the holder of ``receipt`` ``lease`` more seconds from now: long work."""

        def extends(state: GroupState, writer: LogWriter) -> float:
            name, token = parse_receipt(receipt)
            entry = state.open.get(name)
            if entry is None or entry.token != token:
                raise Fenced(f"Receipt no longer holds {name}: {_why_not(entry)}.")
            entry.lease_until = self.clock() + lease
            writer.extended(name, token, entry.lease_until)
            writer.must_sync = True
            return entry.lease_until

        return self._together(queue, group, extends)

    def _together(self, queue: str, group: str, operate: _Operation[R]) -> R:
        """Run ``operate(state, writer)`` under the group's lock, sharing the lock, the
        read of the log and its one flush with the other operations on this group that
        this process's threads want at the same moment (core.group_commit): eight
        consumers acking at once pay one flush, not eight.

        An operation refused (a bad receipt, a fenced one: a ZosciiError, raised before it
        changed anything) fails alone; any other error fails the whole group, none of
        whose lines is then written."""
        queue, group = clean_queue(queue), clean_group(group)
        key = (queue, group)
        with self._mutex:
            lane = self._lanes.get(key)
            if lane is None:
                if len(self._lanes) >= MAX_LANES:
                    self._lanes = {k: v for k, v in self._lanes.items() if v.waiting}
                lane = self._lanes[key] = Lane()

        def run(batch: list[Submission[_Operation[Any], Any]]) -> None:
            with self._locked(queue, group) as (state, writer):
                lane.join(batch)  # who came while we waited for the lock
                for submission in batch:
                    try:
                        submission.result = submission.work(state, writer)
                    except ZosciiError as exc:
                        submission.fail(exc)

        return lane.submit(operate, run)  # type: ignore[no-any-return]

    def deliveries_limit(self, queue: str) -> int:
        """Deliveries of a message of ``queue`` before it goes to the dead letters."""
        if self.max_deliveries_for is None:
            return self.max_deliveries
        return self.max_deliveries_for(clean_queue(queue), self.max_deliveries)

    def stats(self, queue: str, group: str, *, lock: bool = True) -> GroupStats:
        """The group's figures. ``lock=False`` is for observers (statissa): the log is
        read without the group lock and nothing is written (no lock file, no repair, no
        compaction), so it works on a read-only mount and never delays a consumer; a
        line being appended at that moment is simply not counted yet."""
        if lock:
            with self._locked(queue, group, write=False) as (state, _):
                return self._figures(queue, state)
        queue, state = self._read_only(queue, group)
        return self._figures(queue, state)

    def _figures(self, queue: str, state: GroupState) -> GroupStats:
        now = self.clock()
        leased = sum(1 for e in state.open.values() if e.token and e.lease_until > now)
        new = self.queues.count_after(queue, state.frontier)
        oldest = min(state.open, default=None)
        if oldest is None:
            first = self.queues.names_after(queue, state.frontier, 1)
            oldest = first[0] if first else None
        return GroupStats(
            waiting=len(state.open) - leased + new,
            leased=leased,
            acked=state.acked,
            redelivered=state.redelivered,
            dead_lettered=state.dead,
            oldest_unacked=oldest,
        )

    def _read_only(self, queue: str, group: str) -> tuple[str, GroupState]:
        """The group's state read from its log now, lock-free and writing nothing."""
        queue, group = clean_queue(queue), clean_group(group)
        if not os.path.isdir(self.data_dir.queue_dir(queue)):
            raise QueueNotFound(f"Queue '{queue}' not found.")
        state = GroupState()
        group_log.replay(str(self.data_dir.group_log_path(queue, group)), state, repair=False)
        return queue, state

    def groups_of(self, queue: str) -> list[str]:
        try:
            return sorted(
                p.name.removesuffix(GROUP_SUFFIX)
                for p in self.data_dir.group_dir(queue).iterdir()
                if p.name.endswith(GROUP_SUFFIX)
            )
        except FileNotFoundError:
            return []

    # --- upkeep (claireup) ------------------------------------------------------------------
    def queues_with_groups(self) -> list[str]:
        """Every queue name that has a directory of group state, existing or not."""
        try:
            entries = os.scandir(self.data_dir.groups)
        except FileNotFoundError:
            return []
        with entries:
            return sorted(
                e.name for e in entries if e.is_dir(follow_symlinks=False) and is_queue_name(e.name)
            )

    def tidy(self, queue: str, group: str, *, dry_run: bool = False) -> Tidied:
        """Rewrite the log of a live group without what only concerns messages that are
        gone from the queue (deleted by retention), so it does not keep their history.

        Dropped: lines about such messages that are not open any more (acked, dead-
        lettered, given up), the remembered acks of such messages (a retried ack of a
        message that no longer exists then answers "unknown" instead of "ok": it can
        never be delivered again either way, it lies behind the frontier), and entries
        waiting for a redelivery of such a message (what ``consume`` would drop with a
        "G" line). Kept: every lease, expired or not, whatever its message (its holder
        may still ack it), and every count. Under the group lock, as every operation,
        then written with the same atomic rewrite as the automatic compaction; crash
        leftovers of earlier rewrites are deleted too (under the lock none can be in
        progress). ``dry_run``: the same figures, read lock-free, nothing written.
        """
        queue, group = clean_queue(queue), clean_group(group)
        path = str(self.data_dir.group_log_path(queue, group))
        if dry_run:
            queue, state = self._read_only(queue, group)
            plan = self._stale(queue, path, state)
            return Tidied(
                compacted=plan.worth_it,
                waiting_dropped=len(plan.waiting),
                acks_dropped=len(plan.acks),
                lines_dropped=plan.lines,
                bytes_before=plan.size,
                leftovers=group_log.leftovers(path),
            )
        with self._locked(queue, group, write=False) as (state, _):
            leftovers = group_log.leftovers(path)
            for leftover, _size in leftovers:
                os.unlink(leftover)
            plan = self._stale(queue, path, state)
            if not plan.worth_it:
                return Tidied(bytes_before=plan.size, bytes_after=plan.size, leftovers=leftovers)
            for name in plan.waiting:
                del state.open[name]
            for receipt in plan.acks:
                del state.recent[receipt]
            lines_before = state.lines
            group_log.compact(path, state)  # on an error, _locked has the log read anew
            log.info("%s/%s: group log compacted (%d lines dropped)", queue, group, plan.lines)
            return Tidied(
                compacted=True,
                waiting_dropped=len(plan.waiting),
                acks_dropped=len(plan.acks),
                lines_dropped=lines_before - state.lines,
                bytes_before=plan.size,
                bytes_after=state.offset,
                leftovers=leftovers,
            )

    def forget(self, queue: str, group: str, *, dry_run: bool = False) -> list[tuple[str, int]]:
        """Delete the log (and rewrite leftovers) of a group whose queue no longer exists:
        the (path, bytes) deleted, or that would be with ``dry_run``; [] and nothing
        touched while the queue exists.

        Decided under the group lock: an operation takes it only after seeing the queue
        directory, so one that waits meanwhile finds no log and starts the group afresh,
        as it should for a queue made anew. The lock file stays: every process keeps its
        descriptor open (``locking.py``), so a new file at that path would be a second,
        independent lock."""
        queue, group = clean_queue(queue), clean_group(group)
        path = str(self.data_dir.group_log_path(queue, group))
        if os.path.isdir(self.data_dir.queue_dir(queue)):
            return []
        if dry_run:
            return group_log.files_of(path)
        with FileLock(self.data_dir.group_lock_path(queue, group)):
            if os.path.isdir(self.data_dir.queue_dir(queue)):
                return []
            found = group_log.files_of(path)
            for name, _size in found:
                os.unlink(name)
            with self._mutex:
                self._states.pop((queue, group), None)
        return found

    def discard_locked(self, queue: str, group: str) -> list[tuple[str, int]]:
        """Delete a group's log and leftovers while the caller holds its group lock
        (``core.admin.QueueAdmin.delete`` holds them with the queue lock, so no consumer can
        write between the queue's removal and its groups'); (path, bytes) deleted."""
        queue, group = clean_queue(queue), clean_group(group)
        found = group_log.files_of(str(self.data_dir.group_log_path(queue, group)))
        for name, _size in found:
            os.unlink(name)
        with self._mutex:
            self._states.pop((queue, group), None)
        return found

    def drop_queue_dir(self, queue: str) -> bool:
        """Remove the empty state directory of a queue that no longer exists (True when
        removed). A writer that loses the race makes it again (``LogWriter.flush``)."""
        queue = clean_queue(queue)
        if os.path.isdir(self.data_dir.queue_dir(queue)):
            return False
        try:
            os.rmdir(self.data_dir.group_dir(queue))
        except FileNotFoundError:
            return False
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                return False  # state of a group made since, or a file not ours: kept
            raise
        return True

    def _stale(self, queue: str, path: str, state: GroupState) -> _Stale:
        """What of the log (read up to ``state.offset``) concerns only gone messages."""
        directory = self.data_dir.queue_dir(queue)
        gone: dict[str, bool] = {}

        def is_gone(name: str) -> bool:
            found = gone.get(name)
            if found is None:
                found = gone[name] = is_message_name(name) and not os.path.lexists(
                    os.path.join(directory, name)
                )
            return found

        waiting = [n for n, e in state.open.items() if not e.token and is_gone(n)]
        acks = [r for r in state.recent if is_gone(r.partition(":")[0])]
        still_open = state.open.keys() - set(waiting)
        lines = sum(
            1
            for name in group_log.names_per_line(path, state.offset)
            if name not in still_open and is_gone(name)
        )
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            size = 0
        return _Stale(waiting, acks, lines, size)

    # --- choosing and leasing ----------------------------------------------------------------
    def _candidates(
        self, queue: str, state: GroupState, now: float, count: int
    ) -> Iterator[tuple[str, OpenEntry | None, float | None]]:
        """Messages that may be delivered now, in the order they should be, with their
        expiry: expired leases (redeliveries), then new messages, then requeued ones
        once the messages that were waiting when they were requeued have gone."""
        for entry in sorted(state.open.values(), key=lambda e: e.name):
            if entry.token and entry.lease_until <= now:
                yield entry.name, entry, entry.expires_at
        limit = count * 2 + 16  # room for those dead-lettered on the way
        fresh = self.queues.names_after(queue, state.frontier, limit)
        expiries = self.queues.expiries(queue, fresh) if fresh else {}
        # Requeued ones ready by time, each in line behind the name that ended the queue
        # when it was requeued ("pop from queue, append to queue").
        requeued = sorted(
            (e for e in state.open.values() if not e.token and e.available_at <= now),
            key=lambda e: (e.behind, e.available_at, e.name),
        )
        turn = 0
        for name in fresh:
            while turn < len(requeued) and requeued[turn].behind < name:
                entry = requeued[turn]
                yield entry.name, entry, entry.expires_at
                turn += 1
            yield name, None, expiries.get(name)
        if len(fresh) < limit:  # the queue's end was reached: everyone's turn came
            for entry in requeued[turn:]:
                yield entry.name, entry, entry.expires_at

    def _lease(
        self,
        queue: str,
        group: str,
        directory: str,
        state: GroupState,
        writer: LogWriter,
        name: str,
        entry: OpenEntry | None,
        expires_at: float | None,
        now: float,
        lease: float,
        consumer: str,
        limit: int,
    ) -> Delivery | None:
        if entry is None:
            if name <= state.frontier:
                return None  # delivered before, and finished
            entry = state.open[name] = OpenEntry(name, expires_at=expires_at)
            state.frontier = name
        if expires_at is not None and expires_at <= now:
            self._bury(queue, group, state, writer, name, "ttl")
            return None
        if entry.deliveries >= limit:
            self._bury(queue, group, state, writer, name, "max_deliveries")
            return None
        try:
            fd = os.open(f"{directory}/{name}", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except (FileNotFoundError, ValueError):  # deleted by retention meanwhile (or a
            # record a power loss zeroed, as QueueStore._open_after): nothing to deliver
            del state.open[name]
            writer.gone(name)
            return None
        if entry.deliveries:
            state.redelivered += 1
        entry.deliveries += 1
        entry.token = secrets.token_hex(16)
        entry.lease_until = now + lease
        entry.available_at, entry.behind, entry.consumer = 0.0, "", consumer
        writer.delivered(entry, expires_at)
        return Delivery(
            name=name,
            receipt=f"{name}:{entry.token}",
            file=os.fdopen(fd, "rb"),
            size=os.fstat(fd).st_size,
            deliveries=entry.deliveries,
            lease_until=entry.lease_until,
            ttl_left=None if expires_at is None else max(0.0, expires_at - now),
        )

    def _bury(
        self,
        queue: str,
        group: str,
        state: GroupState,
        writer: LogWriter,
        name: str,
        reason: str,
        token: str = "",
    ) -> None:
        """Copy the message into the dead letters (durably), then mark it done here."""
        target = dead_letter_queue(queue, group)
        source = os.path.join(self.data_dir.queue_dir(queue), name)
        upload = Upload(self.data_dir)
        try:
            try:
                with open(source, "rb") as file:  # a copy: the queue keeps its message
                    while chunk := file.read(1 << 20):
                        upload.write(chunk)
            except FileNotFoundError:
                upload.discard()
                state.open.pop(name, None)
                writer.gone(name)
                return
            retention = parse_name(name).retention_days
            self.queues.publish_many(target, [Outgoing(upload, retention)])
        finally:
            upload.discard()
        state.open.pop(name, None)
        state.dead += 1
        if token:  # a consumer's dead letter: a retry of it answers ok
            state.remember(f"{name}:{token}", "X")
        writer.dead_lettered(name, reason, token)
        writer.must_sync = True
        log.info("%s/%s: %s dead-lettered into %s (%s)", queue, group, name, target, reason)

    # --- the lock and the log ----------------------------------------------------------------
    @contextmanager
    def _locked(
        self, queue: str, group: str, *, write: bool = True
    ) -> Iterator[tuple[GroupState, LogWriter]]:
        queue, group = clean_queue(queue), clean_group(group)
        if not os.path.isdir(self.data_dir.queue_dir(queue)):
            raise QueueNotFound(f"Queue '{queue}' not found.")
        path = str(self.data_dir.group_log_path(queue, group))
        with FileLock(self.data_dir.group_lock_path(queue, group)):
            key = (queue, group)
            with self._mutex:
                state = self._states.setdefault(key, GroupState())
            writer = LogWriter(path, write)
            try:
                group_log.replay(path, state)
                yield state, writer
                writer.flush(sync=writer.must_sync)
                state.offset += writer.bytes
                state.lines += writer.written
                if group_log.grown_past(state):
                    group_log.compact(path, state)
            except BaseException as exc:
                # Read it all again next time: what reached the file is unsure, and the
                # state may hold changes whose lines were never written.
                state.ino = 0
                if isinstance(exc, OSError):
                    raise_if_full(exc)
                raise
            finally:
                writer.close()


_Operation = Callable[["GroupState", "LogWriter"], R]  # one operation on a group's state


def _settle(
    state: GroupState,
    receipts: Sequence[str],
    how: str,
    apply: Callable[[str, str, str, OpenEntry], None],
) -> list[Outcome]:
    """Each receipt's outcome; ``apply(receipt, name, token, entry)`` settles (as ``how``:
    "A", "Q" or "X") those that hold their message's current delivery. Every receipt is
    checked first: one malformed receipt settles none of them."""
    outcomes = []
    for receipt, (name, token) in [(r, parse_receipt(r)) for r in receipts]:
        entry = state.open.get(name)
        if entry is None or entry.token != token:
            outcomes.append(_not_held(state, receipt, name, entry, how))
            continue
        apply(receipt, name, token, entry)
        outcomes.append(Outcome(receipt, "ok", name))
    return outcomes


def _not_held(
    state: GroupState, receipt: str, name: str, entry: OpenEntry | None, how: str
) -> Outcome:
    """The outcome for a receipt that holds no lease: ``ok`` when it is a retry of the
    same settlement (its reply was lost), else why not."""
    if state.recent.get(receipt) == how:
        return Outcome(receipt, "ok", name)
    return Outcome(receipt, _why_not(entry), name)


def _why_not(entry: OpenEntry | None) -> str:
    if entry is None:
        return "unknown"  # acked or dead-lettered already, or never delivered
    return "fenced"  # requeued, or leased again to someone else
