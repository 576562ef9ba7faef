"""A consumer group's log: the on-disk format of its state, its replay and its compaction.

``core.groups`` decides what a lease, an ack or a requeue means; this module decides
every byte of how that is recorded, as diskcache's ``Disk`` does for its ``Cache``. One
append-only file per group (``.zoscii/groups/<queue>/<group>.log``), written under the
group's lock file; each line is space-separated fields and a CRC-32 of them::

    D <name> <token> <lease_until_ms> <deliveries> <expires_ms|-> <consumer>   delivered
    A <name> <token>                                                          acked
    Q <name> <token> <available_ms> <behind|-> <expires_ms|->                 requeued
    X <name> <reason> [<token>]                                               dead-lettered
    G <name>                                                                  gone (deleted)
    L <name> <token> <lease_until_ms>                                         lease extended

A compacted log starts with the state it replaces: ``S`` (frontier and counts), one
``O`` per open message, one ``K`` per remembered settled receipt. A torn last line (a
crash mid-append) fails its CRC: it and anything after it are ignored, and cut off by
the next writer so the next line starts clean.
"""

from __future__ import annotations

import logging
import os
import zlib
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from zosciimq.core.durable import atomic_write, ensure_dir
from zosciimq.core.layout import LEFTOVER_PREFIX, LEFTOVER_SUFFIX

log = logging.getLogger(__name__)

RECENT_ACKS = 10_000  # settled receipts remembered: a retried ack, requeue or dead letter
# (its reply lost) is answered as the first one, never applied twice
COMPACT_AFTER_LINES = 20_000
_HEAD = 64  # bytes of the first line kept to recognise the log file (see GroupState.head)


@dataclass
class OpenEntry:
    """A message delivered at least once and not finished (acked or dead-lettered)."""

    name: str
    token: str = ""  # the current delivery; "" while it waits (requeued or expired)
    deliveries: int = 0
    lease_until: float = 0.0
    available_at: float = 0.0  # a requeue's delay
    behind: str = ""  # requeued: deliverable once the frontier passed this name
    expires_at: float | None = None  # a requeue's new TTL; else the message's own
    consumer: str = "-"


@dataclass
class GroupState:
    """What a group's log describes, and how far this process has read it."""

    frontier: str = ""  # the highest name ever delivered: everything after is new
    open: dict[str, OpenEntry] = field(default_factory=dict)
    acked: int = 0
    redelivered: int = 0
    dead: int = 0
    # settled receipts -> how: "A" acked, "Q" requeued, "X" dead-lettered
    recent: OrderedDict[str, str] = field(default_factory=OrderedDict)
    ino: int = 0
    offset: int = 0
    lines: int = 0
    # The log's first line as read: with ``ino`` it tells this file from a later one
    # that got the same inode number (a log rewritten or deleted and made anew).
    head: bytes = b""

    def reset(self, ino: int = 0) -> None:
        """Forget everything: the log is read again from its start."""
        self.__init__(ino=ino)  # type: ignore[misc]

    def remember(self, receipt: str, how: str = "A") -> None:
        self.recent[receipt] = how
        while len(self.recent) > RECENT_ACKS:
            self.recent.popitem(last=False)


class LogWriter:
    """Lines of one operation, written together at the end (one write, one flush)."""

    def __init__(self, path: str, enabled: bool) -> None:
        self.path, self.enabled = path, enabled
        self.pending: list[str] = []
        self.written = 0
        self.bytes = 0
        self.must_sync = False

    def delivered(self, entry: OpenEntry, expires_at: float | None) -> None:
        self._line(
            "D",
            entry.name,
            entry.token,
            _ms(entry.lease_until),
            str(entry.deliveries),
            _ms_or(expires_at),
            entry.consumer,
        )

    def acked(self, name: str, token: str) -> None:
        self._line("A", name, token)

    def requeued(self, entry: OpenEntry, token: str) -> None:
        self._line(
            "Q",
            entry.name,
            token,
            _ms(entry.available_at),
            entry.behind or "-",
            _ms_or(entry.expires_at),
        )

    def dead_lettered(self, name: str, reason: str, token: str = "") -> None:
        if token:
            self._line("X", name, reason, token)
        else:
            self._line("X", name, reason)

    def gone(self, name: str) -> None:
        self._line("G", name)

    def extended(self, name: str, token: str, lease_until: float) -> None:
        self._line("L", name, token, _ms(lease_until))

    def _line(self, *fields: str) -> None:
        self.pending.append(_framed(" ".join(fields)))

    def flush(self, *, sync: bool) -> None:
        if not self.pending or not self.enabled:
            return
        data = "".join(self.pending).encode("ascii")
        self.pending.clear()
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW
        for attempt in range(3):
            ensure_dir(os.path.dirname(self.path))
            try:
                fd = os.open(self.path, flags, 0o644)
                break
            except FileNotFoundError:  # a cleaner removed the empty directory meanwhile
                if attempt == 2:
                    raise
        try:
            os.write(fd, data)
            if sync:
                os.fdatasync(fd)
        finally:
            os.close(fd)
        self.written += data.count(b"\n")
        self.bytes += len(data)

    def close(self) -> None:
        self.pending.clear()


def replay(path: str, state: GroupState, *, repair: bool = True) -> None:
    """Bring ``state`` up to the end of the log (group lock held). ``repair=False``
    (an observer without the lock): a torn or unfinished last line is left as it is."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        state.reset()
        return
    try:
        stat = os.fstat(fd)
        if (
            stat.st_ino != state.ino
            or stat.st_size < state.offset
            or (state.offset and os.pread(fd, len(state.head), 0) != state.head)
        ):
            state.reset(stat.st_ino)
        data = b""
        while chunk := os.pread(fd, 1 << 20, state.offset + len(data)):
            data += chunk
    finally:
        os.close(fd)
    good = 0
    for raw in data.split(b"\n")[:-1]:
        text, _, crc = raw.decode("ascii", "replace").rpartition(" ")
        if not text or crc != f"{zlib.crc32(text.encode()):08x}":
            log.warning("%s: a torn line at %d; the rest is ignored", path, state.offset + good)
            break
        _apply(state, text.split(" "))
        if not state.offset and not good:
            state.head = raw[:_HEAD]
        good += len(raw) + 1
        state.lines += 1
    state.offset += good
    if good != len(data) and repair:  # cut the torn tail, so the next line starts clean
        os.truncate(path, state.offset)


def _apply(state: GroupState, fields: list[str]) -> None:
    op, name = fields[0], fields[1] if len(fields) > 1 else ""
    if op == "D":
        token, lease_ms, count, expires = fields[2], fields[3], fields[4], fields[5]
        entry = state.open.setdefault(name, OpenEntry(name))
        if entry.deliveries and int(count) > entry.deliveries:
            state.redelivered += 1
        entry.token, entry.lease_until, entry.deliveries = token, int(lease_ms) / 1000, int(count)
        entry.available_at, entry.behind = 0.0, ""
        entry.expires_at = None if expires == "-" else int(expires) / 1000
        entry.consumer = fields[6] if len(fields) > 6 else "-"
        state.frontier = max(state.frontier, name)
    elif op == "A":
        state.open.pop(name, None)
        state.acked += 1
        state.remember(f"{name}:{fields[2]}", "A")
    elif op == "Q":
        entry = state.open.setdefault(name, OpenEntry(name))
        state.remember(f"{name}:{fields[2]}", "Q")
        entry.token, entry.lease_until = "", 0.0
        entry.available_at = int(fields[3]) / 1000
        entry.behind = "" if fields[4] == "-" else fields[4]
        entry.expires_at = None if fields[5] == "-" else int(fields[5]) / 1000
    elif op == "X":
        state.open.pop(name, None)
        state.dead += 1
        if len(fields) > 3:
            state.remember(f"{name}:{fields[3]}", "X")
    elif op == "G":
        state.open.pop(name, None)
    elif op == "L":
        leased = state.open.get(name)
        if leased is not None and leased.token == fields[2]:
            leased.lease_until = int(fields[3]) / 1000
    elif op == "S":
        state.frontier = "" if name == "-" else name
        state.acked, state.redelivered, state.dead = int(fields[2]), int(fields[3]), int(fields[4])
    elif op == "O":
        state.open[name] = OpenEntry(
            name=name,
            token="" if fields[2] == "-" else fields[2],
            deliveries=int(fields[3]),
            lease_until=int(fields[4]) / 1000,
            available_at=int(fields[5]) / 1000,
            behind="" if fields[6] == "-" else fields[6],
            expires_at=None if fields[7] == "-" else int(fields[7]) / 1000,
        )
    elif op == "K":  # "K receipt [how]": older logs remembered acks only
        state.remember(name, fields[2] if len(fields) > 2 else "A")


def grown_past(state: GroupState) -> bool:
    """Whether the log has grown well past the snapshot of the state it describes."""
    snapshot = 1 + len(state.open) + len(state.recent)
    return state.lines > max(COMPACT_AFTER_LINES, 2 * snapshot)


def compact(path: str, state: GroupState) -> None:
    """Rewrite the log as the state it describes (group lock held), so it stays small."""
    lines = [
        f"S {state.frontier or '-'} {state.acked} {state.redelivered} {state.dead}",
        *(
            f"O {e.name} {e.token or '-'} {e.deliveries} {_ms(e.lease_until)} "
            f"{_ms(e.available_at)} {e.behind or '-'} {_ms_or(e.expires_at)}"
            for e in state.open.values()
        ),
        *(f"K {receipt} {how}" for receipt, how in state.recent.items()),
    ]
    data = "".join(_framed(t) for t in lines).encode("ascii")
    atomic_write(Path(path), data)
    state.ino, state.offset, state.lines = os.stat(path).st_ino, len(data), len(lines)
    state.head = data[: min(data.index(b"\n"), _HEAD)]


def names_per_line(path: str, length: int) -> Iterator[str]:
    """The message each line of the log's first ``length`` bytes is about (a snapshot's
    ``S`` line, about none, is left out)."""
    try:
        with open(path, "rb") as file:
            data = file.read(length)
    except FileNotFoundError:
        return
    for raw in data.split(b"\n")[:-1]:
        fields = raw.decode("ascii", "replace").split(" ")
        if len(fields) < 3 or fields[0] == "S":
            continue
        yield fields[1].partition(":")[0] if fields[0] == "K" else fields[1]


def leftovers(path: str) -> list[tuple[str, int]]:
    """(path, bytes) of what crashed rewrites of the log at ``path`` left beside it."""
    directory, base = os.path.split(path)
    prefix = f"{LEFTOVER_PREFIX}{base}."
    found = []
    try:
        entries = os.scandir(directory)
    except FileNotFoundError:
        return []
    with entries:
        for entry in entries:
            if entry.name.startswith(prefix) and entry.name.endswith(LEFTOVER_SUFFIX):
                try:
                    found.append((entry.path, entry.stat(follow_symlinks=False).st_size))
                except FileNotFoundError:
                    continue
    return found


def files_of(path: str) -> list[tuple[str, int]]:
    """The log at ``path`` and its leftovers, as (path, bytes)."""
    try:
        files = [(path, os.lstat(path).st_size)]
    except FileNotFoundError:
        files = []
    return files + leftovers(path)


def _framed(text: str) -> str:
    return f"{text} {zlib.crc32(text.encode()):08x}\n"


def _ms(seconds: float) -> str:
    return str(int(seconds * 1000))


def _ms_or(seconds: float | None) -> str:
    return "-" if seconds is None else _ms(seconds)
