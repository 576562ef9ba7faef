"""The computed statistics: one immutable snapshot, served until a newer one replaces it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from zoscii_statissa.scan import HOURS, QUEUE, STORE, GroupKey, Partial


@dataclass(frozen=True)
class GroupStats:
    """Figures of one queue, or of the store."""

    name: str
    messages: int = 0
    bytes: int = 0
    oldest_timestamp: int | None = None
    newest_timestamp: int | None = None
    oldest_age_seconds: float | None = None
    storage_share: float = 0.0  # of queues + store bytes, 0..1
    expired: int = 0
    expiring_24h: int = 0
    unidentified: int = 0
    unrecognised_files: int = 0
    published_hourly: tuple[int, ...] = (0,) * HOURS  # [0] = the last hour

    @property
    def published_last_hour(self) -> int:
        return self.published_hourly[0]

    @property
    def published_last_24h(self) -> int:
        return sum(self.published_hourly)


@dataclass(frozen=True)
class PointerStats:
    """One replicator's pointer file (``states/replikate_state_<key>.txt``)."""

    state: str
    pointer: str = ""
    pointer_timestamp: int | None = None
    age_seconds: float | None = None
    error: str = ""


@dataclass(frozen=True)
class ConsumerGroupStats:
    """One consumer group of one queue (``zosciimq.core.groups``)."""

    queue: str
    group: str
    waiting: int = 0  # not delivered yet, or back for another delivery
    leased: int = 0  # delivered, lease running
    acked: int = 0  # totals since the group began
    redelivered: int = 0
    dead_lettered: int = 0
    oldest_unacked: str | None = None  # the name of the oldest message not acked
    oldest_unacked_timestamp: int | None = None  # its name time, Unix seconds
    oldest_unacked_age_seconds: float | None = None
    dead_letter_queue: str = ""  # where its dead letters go
    error: str = ""  # why its state could not be read ("" when it could)


@dataclass(frozen=True)
class Snapshot:
    generated_at: float  # the "now" every age is measured from, Unix seconds
    duration_seconds: float
    data_dir: str
    queues: tuple[GroupStats, ...]
    store: GroupStats
    states: tuple[PointerStats, ...] = field(default=())
    groups: tuple[ConsumerGroupStats, ...] = field(default=())

    @property
    def total_bytes(self) -> int:
        return sum(q.bytes for q in self.queues) + self.store.bytes

    @property
    def total_messages(self) -> int:
        return sum(q.messages for q in self.queues) + self.store.messages

    def queue(self, name: str) -> GroupStats:
        for stats in self.queues:
            if stats.name == name:
                return stats
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        """The JSON document of ``/stats.json`` and ``--once``."""
        return {
            "generated_at": self.generated_at,
            "generated_at_iso": iso(self.generated_at),
            "duration_seconds": round(self.duration_seconds, 3),
            "data_dir": self.data_dir,
            "totals": {"messages": self.total_messages, "bytes": self.total_bytes},
            "queues": [_group_dict(q) for q in self.queues],
            "store": _group_dict(self.store),
            "replikate_states": [asdict(s) for s in self.states],
            "consumer_groups": [
                {**asdict(g), "oldest_unacked_iso": iso(g.oldest_unacked_timestamp)}
                for g in self.groups
            ],
        }


def _group_dict(stats: GroupStats) -> dict[str, Any]:
    data = asdict(stats)
    data["published_hourly"] = list(stats.published_hourly)
    data["published_last_hour"] = stats.published_last_hour
    data["published_last_24h"] = stats.published_last_24h
    data["oldest_iso"] = iso(stats.oldest_timestamp)
    data["newest_iso"] = iso(stats.newest_timestamp)
    return data


def iso(timestamp: float | None) -> str | None:
    if timestamp is None:
        return None
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def build_snapshot(
    partials: Mapping[GroupKey, Partial],
    queue_names: Iterable[str],
    states: Iterable[PointerStats],
    *,
    groups: Iterable[ConsumerGroupStats] = (),
    now: float,
    duration_seconds: float,
    data_dir: str,
) -> Snapshot:
    """Turn merged aggregates into a snapshot; listed queues without files show as empty."""
    names = sorted(set(queue_names) | {group for kind, group in partials if kind == QUEUE})
    raw = {name: partials.get((QUEUE, name), Partial()) for name in names}
    store_raw = partials.get((STORE, STORE), Partial())
    total = sum(p.bytes for p in raw.values()) + store_raw.bytes
    return Snapshot(
        generated_at=now,
        duration_seconds=duration_seconds,
        data_dir=data_dir,
        queues=tuple(_group(name, p, now, total) for name, p in raw.items()),
        store=_group(STORE, store_raw, now, total),
        states=tuple(states),
        groups=tuple(groups),
    )


def _group(name: str, partial: Partial, now: float, total_bytes: int) -> GroupStats:
    return GroupStats(
        name=name,
        messages=partial.messages,
        bytes=partial.bytes,
        oldest_timestamp=partial.oldest,
        newest_timestamp=partial.newest,
        oldest_age_seconds=None if partial.oldest is None else max(0.0, now - partial.oldest),
        storage_share=partial.bytes / total_bytes if total_bytes else 0.0,
        expired=partial.expired,
        expiring_24h=partial.expiring_24h,
        unidentified=partial.unidentified,
        unrecognised_files=partial.unrecognised,
        published_hourly=tuple(partial.hourly),
    )
