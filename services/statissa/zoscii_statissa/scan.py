"""The per-directory scan: runs inside Spark executors (and in the Python-only baseline).

Only names and sizes are read, never message contents: a name carries the publish time,
the retention and the ``-u`` flag, and a directory entry gives the size. Which entries
are messages is the core's call (``zosciimq.core.walk``). Each directory is folded into
one ``Partial`` where it is listed, so a million file names never travel as rows: only
one small aggregate per directory leaves the executor.

This module imports nothing from Spark, so executors need only ``zosciimq`` and this
package on their path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from zosciimq.core import walk
from zosciimq.core.layout import DataDir
from zosciimq.core.names import MessageName
from zosciimq.core.store import fanout_roots
from zosciimq.core.walk import Kind

HOURS = 24
DAY_SECONDS = 86_400
QUEUE = "queue"
STORE = "store"

# A unit of work: (kind, group, directory). Kind QUEUE: one queue directory, group = the
# queue. Kind STORE: one first-level fan-out directory, group = "store".
Task = tuple[str, str, str]
GroupKey = tuple[str, str]


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


def merge_partials(a: Partial, b: Partial) -> Partial:
    return a.merge(b)


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
    partial = Partial()
    if kind == STORE:
        files = walk.iter_fanout_files(directory)
    else:
        files = walk.iter_message_files(directory)
    for found in files:
        if found.kind is Kind.MALFORMED:
            partial.unrecognised += 1
        elif found.message is not None:
            try:
                size = found.entry.stat(follow_symlinks=False).st_size
            except FileNotFoundError:
                continue  # deleted (claireup) or renamed (identify) while we looked
            partial.add(found.message, size, now)
    return partial


def scan_tasks(tasks: Iterable[Task], now: float) -> Iterator[tuple[GroupKey, Partial]]:
    """Spark ``mapPartitions`` body: one aggregate per directory in the partition."""
    for kind, group, directory in tasks:
        yield (kind, group), scan_directory(kind, directory, now)


def scan_locally(data_dir: DataDir, now: float) -> dict[GroupKey, Partial]:
    """The same figures with a plain loop in this process (the benchmark's baseline)."""
    totals: dict[GroupKey, Partial] = {}
    for key, partial in scan_tasks(list_tasks(data_dir), now):
        totals[key] = totals[key].merge(partial) if key in totals else partial
    return totals
