"""A compact history of the figures, kept on the volume: one point per computation.

Each successful computation appends one point, made from the snapshot the job just
computed (on the driver, from the job's own figures: no second scan, so it stays right
when the job runs on a Spark cluster), to ``.zoscii/statissa/history-YYYYMMDD.jsonl``
(the UTC day of the point). A point is one JSON line::

    {"v": 1, "at": 1773144000.0, "messages": 7, "bytes": 135,
     "queues": {"orders": [6, 135, 108000.0, 3, 42.0]},  # depth, bytes, oldest age,
                                                         # pub. 1 h, fetched (see below)
     "groups": {"orders": {"workers": [2, 1, 0]}}}         # waiting, leased, dead-lettered

A point made without the api's fetch counts (none configured, or the api did not answer)
has four figures per queue, as every line before fetch counts existed.

A day's file is replaced whole with ``zosciimq.core.durable.atomic_write`` (written
aside, fsynced, renamed, directory fsynced), so a reader or a crash sees the file with
or without the new point, never half a line. Files of days older than ``keep_days`` are
deleted after each append. Points closer than ``min_spacing`` seconds to the previous
one are not kept (a ``POST /refresh`` storm must not grow the file), which bounds a
day's file to ``86400 / min_spacing`` lines.

One writer per volume is assumed (one statissa per deployment, as the compose file
runs it). On a read-only volume the append fails; the computation does not (the
failure is logged once, and the console says history is unavailable).

Publish rates are derived from successive points: a point carries the messages present
whose name time lies in the hour before it (``published_last_hour``, what the scan
counts); between two points ``dt`` seconds apart (``dt`` < 1 h) the messages published
in between are estimated as ``P(b) - P(a) * (1 - dt / 3600)`` (the part of ``a``'s hour
that left the window is taken as evenly spread), which is exact for a steady rate and
catches a burst in full. Messages deleted before a computation saw them are not counted.

Fetch rates come from the api's own counter of messages served (``fetch_counts``), kept
in each point: the difference between two points over their distance, a counter that
went down (an api restarted) counting from zero, as Prometheus' ``rate()`` does.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from zoscii_statissa.model import Snapshot
from zosciimq.core.durable import atomic_write, ensure_dir
from zosciimq.core.layout import DataDir

log = logging.getLogger(__name__)

VERSION = 1
KEEP_DAYS = 8  # today and the 7 days before it
MIN_SPACING_SECONDS = 10.0
HOUR = 3600.0
_FILE_RE = re.compile(r"history-(\d{8})\.jsonl")


@dataclass(frozen=True)
class QueuePoint:
    """One queue's figures at one point."""

    messages: int
    bytes: int
    oldest_age_seconds: float | None
    published_last_hour: int
    fetched: float | None = None  # messages the api served since it started; None: unknown

    def figures(self) -> list[float | int | None]:
        """Its figures as a point's line lists them (fetched only when known)."""
        known = [self.messages, self.bytes, self.oldest_age_seconds, self.published_last_hour]
        return known if self.fetched is None else [*known, self.fetched]


@dataclass(frozen=True)
class GroupPoint:
    """One consumer group's figures at one point (its lag is ``waiting``)."""

    waiting: int
    leased: int
    dead_lettered: int


@dataclass(frozen=True)
class HistoryPoint:
    at: float  # the computation's "now", Unix seconds
    messages: int  # queues + store
    bytes: int
    queues: dict[str, QueuePoint] = field(default_factory=dict)
    groups: dict[str, dict[str, GroupPoint]] = field(default_factory=dict)  # queue -> group

    @property
    def fetch_counts_known(self) -> bool:
        """Whether the api's fetch counts were read for this point (all queues or none)."""
        return any(q.fetched is not None for q in self.queues.values())

    def to_dict(self) -> dict[str, object]:
        return {
            "v": VERSION,
            "at": self.at,
            "messages": self.messages,
            "bytes": self.bytes,
            "queues": {name: q.figures() for name, q in self.queues.items()},
            "groups": {
                queue: {name: [g.waiting, g.leased, g.dead_lettered] for name, g in groups.items()}
                for queue, groups in self.groups.items()
            },
        }


def point_of(snapshot: Snapshot, fetched: Mapping[str, float] | None = None) -> HistoryPoint:
    """The history point of a computed snapshot (its figures only: nothing is read) and
    of the api's fetch counts read with it (None: not known)."""
    groups: dict[str, dict[str, GroupPoint]] = {}
    for group in snapshot.groups:
        if not group.error:
            groups.setdefault(group.queue, {})[group.group] = GroupPoint(
                group.waiting, group.leased, group.dead_lettered
            )
    return HistoryPoint(
        at=snapshot.generated_at,
        messages=snapshot.total_messages,
        bytes=snapshot.total_bytes,
        queues={
            q.name: QueuePoint(
                q.messages,
                q.bytes,
                None if q.oldest_age_seconds is None else round(q.oldest_age_seconds, 1),
                q.published_last_hour,
                None if fetched is None else fetched.get(q.name, 0.0),
            )
            for q in snapshot.queues
        },
        groups=groups,
    )


def encode(point: HistoryPoint) -> bytes:
    return (json.dumps(point.to_dict(), separators=(",", ":")) + "\n").encode()


def decode(line: bytes | str) -> HistoryPoint | None:
    """A point from its line; None for anything else (a foreign or future line)."""
    try:
        raw = json.loads(line)
        if not isinstance(raw, dict) or raw.get("v") != VERSION:
            return None
        queues = {
            str(name): QueuePoint(
                int(v[0]),
                int(v[1]),
                None if v[2] is None else float(v[2]),
                int(v[3]),
                None if len(v) < 5 or v[4] is None else float(v[4]),
            )
            for name, v in dict(raw.get("queues") or {}).items()
        }
        groups = {
            str(queue): {
                str(name): GroupPoint(int(v[0]), int(v[1]), int(v[2]))
                for name, v in dict(members).items()
            }
            for queue, members in dict(raw.get("groups") or {}).items()
        }
        return HistoryPoint(
            float(raw["at"]), int(raw["messages"]), int(raw["bytes"]), queues, groups
        )
    except (ValueError, TypeError, KeyError, IndexError):
        return None


def day_of(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y%m%d")


class History:
    """The history files of one data directory: append, prune, read (thread-safe).

    Parsed files are cached by (size, mtime), so serving the console reads a day's file
    again only after it changed.
    """

    def __init__(
        self,
        data_dir: DataDir,
        *,
        keep_days: int = KEEP_DAYS,
        min_spacing: float = MIN_SPACING_SECONDS,
    ) -> None:
        if keep_days < 1:
            raise ValueError("keep_days must be at least 1")
        self.directory = data_dir.statissa_history
        self.keep_days = keep_days
        self.min_spacing = min_spacing
        self._lock = threading.Lock()
        self._cache: dict[Path, tuple[tuple[int, int], bytes, list[HistoryPoint]]] = {}
        self.last_error = ""  # why the last append failed ("" when it did not)

    def path_for(self, timestamp: float) -> Path:
        return self.directory / f"history-{day_of(timestamp)}.jsonl"

    def append(self, point: HistoryPoint) -> bool:
        """Add ``point`` to its day's file, then prune; False when it was too close to
        (or older than) the last point kept. Raises OSError when the volume refuses."""
        with self._lock:
            last = self._last_point()
            if last is not None and point.at - last.at < self.min_spacing:
                return False
            ensure_dir(self.directory)
            path = self.path_for(point.at)
            raw, points = self._read(path)
            if raw and not raw.endswith(b"\n"):
                raw += b"\n"
            line = encode(point)
            atomic_write(path, raw + line)
            self._remember(path, raw + line, [*points, point])
            self._prune_locked(point.at)
            return True

    def prune(self, now: float) -> list[Path]:
        """Delete the files of days before the kept ones; the paths deleted."""
        with self._lock:
            return self._prune_locked(now)

    def points(self, since: float | None = None, until: float | None = None) -> list[HistoryPoint]:
        """Points in time order, ``since <= at <= until`` (either bound optional)."""
        with self._lock:
            found: list[HistoryPoint] = []
            first_day = None if since is None else day_of(since)
            for path, day in self._files():
                if first_day is not None and day < first_day:
                    continue
                found.extend(self._read(path)[1])
        found.sort(key=lambda p: p.at)
        return [
            p
            for p in found
            if (since is None or p.at >= since) and (until is None or p.at <= until)
        ]

    def _files(self) -> list[tuple[Path, str]]:
        try:
            names = sorted(entry.name for entry in self.directory.iterdir())
        except FileNotFoundError:
            return []
        return [
            (self.directory / name, match.group(1))
            for name in names
            if (match := _FILE_RE.fullmatch(name))
        ]

    def _last_point(self) -> HistoryPoint | None:
        for path, _ in reversed(self._files()):
            points = self._read(path)[1]
            if points:
                return max(points, key=lambda p: p.at)
        return None

    def _read(self, path: Path) -> tuple[bytes, list[HistoryPoint]]:
        try:
            stat = path.stat()
        except FileNotFoundError:
            self._cache.pop(path, None)
            return b"", []
        key = (stat.st_size, stat.st_mtime_ns)
        cached = self._cache.get(path)
        if cached is not None and cached[0] == key:
            return cached[1], cached[2]
        raw = path.read_bytes()
        points = [p for line in raw.splitlines() if line and (p := decode(line)) is not None]
        self._cache[path] = (key, raw, points)
        return raw, points

    def _remember(self, path: Path, raw: bytes, points: list[HistoryPoint]) -> None:
        stat = path.stat()
        self._cache[path] = ((stat.st_size, stat.st_mtime_ns), raw, points)

    def _prune_locked(self, now: float) -> list[Path]:
        oldest_kept = day_of(
            (datetime.fromtimestamp(now, UTC) - timedelta(days=self.keep_days - 1)).timestamp()
        )
        deleted = []
        for path, day in self._files():
            if day < oldest_kept:
                path.unlink(missing_ok=True)
                self._cache.pop(path, None)
                deleted.append(path)
        return deleted


def record(
    history: History, snapshot: Snapshot, fetched: Mapping[str, float] | None = None
) -> None:
    """Append the snapshot's point; a refusal (read-only volume, full disk) is logged,
    once until it works again, and never fails the computation."""
    try:
        history.append(point_of(snapshot, fetched))
    except Exception as exc:  # history is best effort, the figures are not
        error = f"{type(exc).__name__}: {exc}"
        if history.last_error != error:
            log.warning("statistics history not written to %s: %s", history.directory, error)
        history.last_error = error
        return
    if history.last_error:
        log.info("statistics history written again to %s", history.directory)
    history.last_error = ""


def recording(
    compute: Callable[[float], Snapshot],
    history: History,
    fetch_counts: Callable[[], Mapping[str, float] | None] | None = None,
) -> Callable[[float], Snapshot]:
    """``compute`` that appends each snapshot it computes to ``history``, with the api's
    fetch counts read right after it (``fetch_counts``; None: no fetch rates)."""

    def compute_and_record(now: float) -> Snapshot:
        snapshot = compute(now)
        record(history, snapshot, fetch_counts() if fetch_counts is not None else None)
        return snapshot

    return compute_and_record


# --- series for the charts -----------------------------------------------------------
Series = list[tuple[float, float]]  # (Unix seconds, value)


def queue_series(points: Iterable[HistoryPoint], queue: str, figure: str) -> Series:
    """``messages``, ``bytes`` or ``oldest_age_seconds`` of one queue over the points
    (points where the queue is absent, or the figure is None, are left out)."""
    series: Series = []
    for point in points:
        stats = point.queues.get(queue)
        if stats is None:
            continue
        value = getattr(stats, figure)
        if value is not None:
            series.append((point.at, float(value)))
    return series


def publish_rates(points: Sequence[HistoryPoint], queue: str) -> Series:
    """Messages published per minute into ``queue`` between successive points, at the
    later point (see the module's docstring for the estimate)."""
    rates: Series = []
    for before, after in itertools.pairwise(points):
        now = after.queues.get(queue)
        if now is None:
            continue
        dt = after.at - before.at
        if dt <= 0:
            continue
        previous = before.queues.get(queue)
        then = previous.published_last_hour if previous is not None else 0
        if dt < HOUR:
            published = max(0.0, now.published_last_hour - then * (1.0 - dt / HOUR))
            rates.append((after.at, published / dt * 60.0))
        else:  # only the last hour before ``after`` is known
            rates.append((after.at, now.published_last_hour / HOUR * 60.0))
    return rates


def fetch_rates(points: Sequence[HistoryPoint], queue: str) -> Series:
    """Messages per minute the api served from ``queue`` between successive points that
    both read the api's counts, at the later point. A queue missing from the earlier
    point had served none then; a count that went down restarted from zero."""
    rates: Series = []
    for before, after in itertools.pairwise(points):
        now = after.queues.get(queue)
        dt = after.at - before.at
        if now is None or now.fetched is None or dt <= 0 or not before.fetch_counts_known:
            continue
        then = before.queues.get(queue)
        previous = then.fetched if then is not None and then.fetched is not None else 0.0
        served = now.fetched - previous if now.fetched >= previous else now.fetched
        rates.append((after.at, served / dt * 60.0))
    return rates


def group_series(points: Iterable[HistoryPoint], queue: str, group: str) -> Series:
    """A consumer group's lag (messages waiting) over the points."""
    series: Series = []
    for point in points:
        stats = point.groups.get(queue, {}).get(group)
        if stats is not None:
            series.append((point.at, float(stats.waiting)))
    return series
