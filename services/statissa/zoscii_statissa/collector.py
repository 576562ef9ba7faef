"""Prometheus exposition of the last snapshot: a custom Collector, read at scrape time.

Figures come from the snapshot as computed (never recomputed per scrape), so a scrape
is cheap and always consistent; ``zoscii_statissa_*`` says how fresh they are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from zoscii_statissa.model import ConsumerGroupStats, GroupStats, Snapshot
from zoscii_statissa.snapshots import SnapshotKeeper

_GroupValue = Callable[[GroupStats], float | None]

# (suffix, help, value): exposed as zoscii_queue_<suffix>{queue} and zoscii_store_<suffix>.
_GROUP_METRICS: tuple[tuple[str, str, _GroupValue], ...] = (
    ("messages", "Messages present (well-formed .bin files).", lambda g: g.messages),
    ("bytes", "Bytes of the messages present.", lambda g: g.bytes),
    (
        "oldest_message_timestamp_seconds",
        "Name time of the oldest message, Unix seconds (UTC).",
        lambda g: g.oldest_timestamp,
    ),
    (
        "newest_message_timestamp_seconds",
        "Name time of the newest message, Unix seconds (UTC).",
        lambda g: g.newest_timestamp,
    ),
    (
        "oldest_message_age_seconds",
        "Age of the oldest message when the statistics were computed.",
        lambda g: g.oldest_age_seconds,
    ),
    (
        "storage_share_ratio",
        "Share of all message bytes (queues and store), 0 to 1.",
        lambda g: g.storage_share,
    ),
    (
        "messages_expiring_within_24h",
        "Messages whose retention ends within 24 hours (including already expired ones).",
        lambda g: g.expiring_24h,
    ),
    (
        "messages_expired",
        "Messages past their retention, waiting for the next cleanup run.",
        lambda g: g.expired,
    ),
    (
        "messages_published_last_hour",
        "Messages present whose name time lies in the last hour.",
        lambda g: g.published_last_hour,
    ),
    (
        "messages_published_last_24h",
        "Messages present whose name time lies in the last 24 hours.",
        lambda g: g.published_last_24h,
    ),
    (
        "unrecognised_files",
        "*.bin files whose names do not parse (left alone by every service).",
        lambda g: g.unrecognised_files,
    ),
)


class StatissaCollector(Collector):
    def __init__(self, keeper: SnapshotKeeper) -> None:
        self._keeper = keeper

    def collect(self) -> Iterator[Metric]:
        yield from self._run_metrics()
        snapshot = self._keeper.snapshot
        if snapshot is not None:
            yield from _snapshot_metrics(snapshot)

    def _run_metrics(self) -> Iterator[Metric]:
        status = self._keeper.status
        runs = CounterMetricFamily("zoscii_statissa_runs", "Statistics computations attempted.")
        runs.add_metric([], status.runs_total)
        yield runs
        failed = CounterMetricFamily(
            "zoscii_statissa_runs_failed", "Statistics computations that failed."
        )
        failed.add_metric([], status.runs_failed_total)
        yield failed
        gauges = (
            (
                "zoscii_statissa_last_run_success",
                "1 if the last computation succeeded, 0 if it failed (figures are then older).",
                None if status.last_run_success is None else float(status.last_run_success),
            ),
            (
                "zoscii_statissa_last_run_timestamp_seconds",
                "When the last computation (successful or not) finished, Unix seconds.",
                status.last_run_finished_at,
            ),
            (
                "zoscii_statissa_last_run_duration_seconds",
                "How long the last computation took.",
                status.last_run_duration_seconds,
            ),
            (
                "zoscii_statissa_last_success_timestamp_seconds",
                "When the figures being served were computed, Unix seconds.",
                status.last_success_at,
            ),
        )
        for name, help_text, value in gauges:
            if value is not None:
                yield GaugeMetricFamily(name, help_text, value=value)


def _snapshot_metrics(snapshot: Snapshot) -> Iterator[Metric]:
    for suffix, help_text, value_of in _GROUP_METRICS:
        queue_family = GaugeMetricFamily(
            f"zoscii_queue_{suffix}", f"Per queue: {help_text}", labels=["queue"]
        )
        for queue in snapshot.queues:
            value = value_of(queue)
            if value is not None:
                queue_family.add_metric([queue.name], value)
        yield queue_family
        store_value = value_of(snapshot.store)
        if store_value is not None:
            yield GaugeMetricFamily(
                f"zoscii_store_{suffix}", f"Data store: {help_text}", value=store_value
            )
    yield GaugeMetricFamily(
        "zoscii_store_unidentified_messages",
        "Store messages still marked -u (waiting for a consumer's scan and identify).",
        value=snapshot.store.unidentified,
    )
    yield GaugeMetricFamily(
        "zoscii_queues", "Queues in the data directory.", value=len(snapshot.queues)
    )
    yield GaugeMetricFamily(
        "zoscii_storage_bytes",
        "Bytes of all messages, queues and store.",
        value=snapshot.total_bytes,
    )
    yield from _pointer_metrics(snapshot)
    yield from _group_metrics(snapshot)


def _pointer_metrics(snapshot: Snapshot) -> Iterator[Metric]:
    valid = GaugeMetricFamily(
        "zoscii_replikate_pointer_valid",
        "1 if the replikate state file holds a readable pointer (or none yet), 0 if corrupt.",
        labels=["state"],
    )
    stamp = GaugeMetricFamily(
        "zoscii_replikate_pointer_timestamp_seconds",
        "Name time of the last message a replicator copied, Unix seconds.",
        labels=["state"],
    )
    age = GaugeMetricFamily(
        "zoscii_replikate_pointer_age_seconds",
        "How old the last message a replicator copied was when the statistics were computed.",
        labels=["state"],
    )
    for state in snapshot.states:
        valid.add_metric([state.state], 0.0 if state.error else 1.0)
        if state.pointer_timestamp is not None:
            stamp.add_metric([state.state], state.pointer_timestamp)
        if state.age_seconds is not None:
            age.add_metric([state.state], state.age_seconds)
    yield valid
    yield stamp
    yield age


_GroupFigure = Callable[[ConsumerGroupStats], float | None]

# (name, help, value, counter): zoscii_group_<...>{queue, group}; a counter's name gets
# its _total suffix from prometheus-client.
_CONSUMER_GROUP_METRICS: tuple[tuple[str, str, _GroupFigure, bool], ...] = (
    (
        "zoscii_group_messages_waiting",
        "Messages waiting for the group: not delivered yet, or back for another delivery.",
        lambda g: g.waiting,
        False,
    ),
    (
        "zoscii_group_messages_leased",
        "Messages leased to a consumer now.",
        lambda g: g.leased,
        False,
    ),
    (
        "zoscii_group_messages_acked",
        "Messages acked since the group began.",
        lambda g: g.acked,
        True,
    ),
    (
        "zoscii_group_messages_redelivered",
        "Deliveries after the first (a lease ran out, or a requeue).",
        lambda g: g.redelivered,
        True,
    ),
    (
        "zoscii_group_messages_dead_lettered",
        "Messages the group moved to its dead-letter queue.",
        lambda g: g.dead_lettered,
        True,
    ),
    (
        "zoscii_group_oldest_unacked_timestamp_seconds",
        "Name time of the oldest message the group has not acked, Unix seconds.",
        lambda g: g.oldest_unacked_timestamp,
        False,
    ),
    (
        "zoscii_group_oldest_unacked_age_seconds",
        "Age of the oldest message the group has not acked (absent when none is left).",
        lambda g: g.oldest_unacked_age_seconds,
        False,
    ),
)


def _group_metrics(snapshot: Snapshot) -> Iterator[Metric]:
    labels = ["queue", "group"]
    readable = [g for g in snapshot.groups if not g.error]
    for name, help_text, value_of, counter in _CONSUMER_GROUP_METRICS:
        family_type = CounterMetricFamily if counter else GaugeMetricFamily
        family = family_type(name, f"Per consumer group: {help_text}", labels=labels)
        for group in readable:
            value = value_of(group)
            if value is not None:
                family.add_metric([group.queue, group.group], value)
        yield family
    valid = GaugeMetricFamily(
        "zoscii_group_state_valid",
        "1 if the consumer group's state could be read, 0 if not (its figures are absent).",
        labels=labels,
    )
    for group in snapshot.groups:
        valid.add_metric([group.queue, group.group], 0.0 if group.error else 1.0)
    yield valid
    yield GaugeMetricFamily(
        "zoscii_consumer_groups", "Consumer groups of existing queues.", value=len(snapshot.groups)
    )
