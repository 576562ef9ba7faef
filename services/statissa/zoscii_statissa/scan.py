"""The per-directory scan: runs inside Spark executors (and in the Python-only baseline).

Only names and sizes are read, never message contents: a name carries the publish time,
the retention and the ``-u`` flag, and a directory entry gives the size. Each directory
is folded into one ``Partial`` where it is listed, so a million file names never travel
as rows: only one small aggregate per directory leaves the executor.

Which entries are messages is the core's call (``zosciimq.core.walk`` and
``names.parse_name``), but asking it per file costs a regex, a ``datetime`` and a
``MessageName`` each, twice what the ``lstat`` the size needs costs. So the hot loop
(``_fold_directory``) takes a name it can vouch for itself: one that matches
``_PLAIN_NAME`` (a strict subset of the core's pattern) with a valid time stamp (checked
once per distinct stamp). Every other regular file goes to ``parse_name``, which
decides; tests/statissa/test_scan.py checks the two agree name by name.

This module imports nothing from Spark, so executors need only ``zosciimq`` and this
package on their path.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from zosciimq.core.layout import DataDir
from zosciimq.core.names import MessageName, is_unidentified, parse_name, stamp_datetime
from zosciimq.core.store import fanout_roots
from zosciimq.core.walk import MESSAGE_SUFFIX, STORE_DEPTH
from zosciimq.errors import InvalidInput

HOURS = 24
DAY_SECONDS = 86_400
QUEUE = "queue"
STORE = "store"

# A unit of work: (kind, group, directory). Kind QUEUE: one queue directory, group = the
# queue. Kind STORE: one first-level fan-out directory, group = "store".
Task = tuple[str, str, str]
GroupKey = tuple[str, str]

# YYYYMMDDHHNNSS CCCC - RRRR - guid [.bin] [-u] .bin: the core's name pattern
# (names.parse_name) without its named groups; fields are read by position.
_PLAIN_NAME = re.compile(
    r"[0-9]{18}-[0-9]{4}-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    r"(?:\.bin)?(?:-u)?\.bin",
    re.ASCII,
)
_STAMP = slice(0, 14)
_RETENTION = slice(19, 23)
_STAMP_CACHE_LIMIT = 1 << 16  # distinct stamps remembered per directory (~6 MB at most)
# A stamp that is no real time: the name goes to parse_name (so does 19691231235959, whose
# Unix time is -1 too: parse_name then counts it, only slower).
_INVALID = -1


@dataclass(slots=True)
class Partial:
    """Figures of some of a group's files; ``merge`` makes them figures of more files."""

    messages: int = 0
    bytes: int = 0
    oldest: int | None = None  # Unix seconds of the oldest name time
    newest: int | None = None
    expired: int = 0  # expiry <= now: waiting for claireup
    expiring_24h: int = 0  # expiry <= now + 24 h (includes the expired ones)
    unidentified: int = 0  # store names ending -u.bin
    unrecognised: int = 0  # *.bin files whose names do not parse: left alone, reported
    hourly: list[int] = field(default_factory=lambda: [0] * HOURS)  # [0] = the last hour

    def add(self, message: MessageName, size: int, now: float) -> None:
        """One message the core parsed (the slow path of ``_fold_directory``)."""
        published, expires = message.published_timestamp, message.expires_timestamp
        self.messages += 1
        self.bytes += size
        if self.oldest is None or published < self.oldest:
            self.oldest = published
        if self.newest is None or published > self.newest:
            self.newest = published
        if expires <= now:
            self.expired += 1
        if expires <= now + DAY_SECONDS:
            self.expiring_24h += 1
        if message.unidentified:
            self.unidentified += 1
        age = now - published
        if age < DAY_SECONDS:
            # A name slightly ahead of this clock (another host's clock) counts as just now.
            self.hourly[max(0, int(age // 3600))] += 1

    def merge(self, other: Partial) -> Partial:
        return Partial(
            messages=self.messages + other.messages,
            bytes=self.bytes + other.bytes,
            oldest=_pick(min, self.oldest, other.oldest),
            newest=_pick(max, self.newest, other.newest),
            expired=self.expired + other.expired,
            expiring_24h=self.expiring_24h + other.expiring_24h,
            unidentified=self.unidentified + other.unidentified,
            unrecognised=self.unrecognised + other.unrecognised,
            hourly=[a + b for a, b in zip(self.hourly, other.hourly, strict=True)],
        )


def merge_into(totals: dict[GroupKey, Partial], more: Iterable[tuple[GroupKey, Partial]]) -> None:
    """Fold (group, partial) pairs into ``totals``: aggregates only, one per group."""
    for key, partial in more:
        totals[key] = totals[key].merge(partial) if key in totals else partial


def _pick(choose: Callable[[int, int], int], a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return choose(a, b)


def list_tasks(data_dir: DataDir) -> list[Task]:
    """The driver's only listing: queue directories and the store's first-level fan-out."""
    tasks: list[Task] = [
        (QUEUE, queue, str(data_dir.queue_dir(queue))) for queue in data_dir.iter_queue_names()
    ]
    tasks.extend((STORE, STORE, str(root)) for root in fanout_roots(data_dir))
    return tasks


def scan_directory(kind: str, directory: str, now: float) -> Partial:
    """A queue directory, or every leaf under one first-level fan-out directory."""
    partial = Partial()
    stamps: dict[str, int] = {}
    if kind == STORE:
        for leaf in _leaf_dirs(directory, STORE_DEPTH - 1):
            _fold_directory(leaf, now, partial, stamps)
    else:
        _fold_directory(directory, now, partial, stamps)
    return partial


def scan_tasks(tasks: Iterable[Task], now: float) -> Iterator[tuple[GroupKey, Partial]]:
    """One aggregate per directory."""
    for kind, group, directory in tasks:
        yield (kind, group), scan_directory(kind, directory, now)


def scan_partition(tasks: Iterable[Task], now: float) -> Iterator[dict[GroupKey, Partial]]:
    """Spark ``mapPartitions`` body: one dict per partition (one aggregate per group), so
    the job is a single stage with no shuffle and the driver merges a few small dicts."""
    totals: dict[GroupKey, Partial] = {}
    merge_into(totals, scan_tasks(tasks, now))
    yield totals


def scan_locally(data_dir: DataDir, now: float) -> dict[GroupKey, Partial]:
    """The same figures with a plain loop in this process (the benchmark's baseline)."""
    totals: dict[GroupKey, Partial] = {}
    merge_into(totals, scan_tasks(list_tasks(data_dir), now))
    return totals


def _leaf_dirs(directory: str, depth: int) -> Iterator[str]:
    """The directories ``depth`` levels below ``directory``, as ``walk.iter_fanout_files``
    walks them: non-directories above the leaves are strays, a missing directory is empty."""
    if depth == 0:
        yield directory
        return
    try:
        entries = os.scandir(directory)
    except FileNotFoundError:
        return
    with entries:
        subdirs = [entry.path for entry in entries if entry.is_dir(follow_symlinks=False)]
    for subdir in subdirs:
        yield from _leaf_dirs(subdir, depth - 1)


def _fold_directory(directory: str, now: float, partial: Partial, stamps: dict[str, int]) -> None:
    """Add the messages of one directory to ``partial``; hot, hence locals and no objects.

    Listed through a directory descriptor, so each ``lstat`` is an ``fstatat`` of a bare
    name instead of a walk of the whole path. ``stamps`` maps a name's time stamp to its
    Unix time (``_INVALID`` if it is none), shared by the directories of one task.
    """
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return  # removed while we looked (walk: a missing directory is empty)
    match = _PLAIN_NAME.fullmatch
    soon = now + DAY_SECONDS
    hourly = partial.hourly
    messages = size_sum = expired = expiring = unidentified = 0
    oldest = newest = None
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                if not entry.is_file(follow_symlinks=False):
                    continue  # a stray: directories, links, devices
                name = entry.name
                published = _INVALID
                if match(name) is not None:
                    stamp = name[_STAMP]
                    known = stamps.get(stamp)
                    published = _remember(stamps, stamp) if known is None else known
                if published == _INVALID:
                    _slow_path(entry, now, partial)
                    continue
                try:
                    size = entry.stat(follow_symlinks=False).st_size
                except FileNotFoundError:
                    continue  # deleted (claireup) or renamed (identify) while we looked
                messages += 1
                size_sum += size
                if oldest is None or published < oldest:
                    oldest = published
                if newest is None or published > newest:
                    newest = published
                expires = published + int(name[_RETENTION]) * DAY_SECONDS
                if expires <= now:
                    expired += 1
                if expires <= soon:
                    expiring += 1
                if is_unidentified(name):
                    unidentified += 1
                age = now - published
                if age < DAY_SECONDS:
                    # A name slightly ahead of this clock (another host's) counts as just now.
                    hourly[max(0, int(age // 3600))] += 1
    finally:
        os.close(fd)
    partial.messages += messages
    partial.bytes += size_sum
    partial.oldest = _pick(min, partial.oldest, oldest)
    partial.newest = _pick(max, partial.newest, newest)
    partial.expired += expired
    partial.expiring_24h += expiring
    partial.unidentified += unidentified


def _remember(stamps: dict[str, int], stamp: str) -> int:
    """The Unix time of ``YYYYMMDDHHNNSS`` (UTC), or ``_INVALID``: the core's
    ``stamp_datetime`` decides, once per distinct stamp."""
    if len(stamps) >= _STAMP_CACHE_LIMIT:
        stamps.clear()
    try:
        published = int(stamp_datetime(stamp).timestamp())
    except ValueError:
        published = _INVALID
    stamps[stamp] = published
    return published


def _slow_path(entry: os.DirEntry[str], now: float, partial: Partial) -> None:
    """A regular file the fast check did not vouch for: the core decides (walk's rule: a
    name that does not parse is MALFORMED if it ends in .bin, else a stray)."""
    try:
        message = parse_name(entry.name)
    except InvalidInput:
        if entry.name.endswith(MESSAGE_SUFFIX):
            partial.unrecognised += 1
        return
    try:
        size = entry.stat(follow_symlinks=False).st_size
    except FileNotFoundError:
        return
    partial.add(message, size, now)
