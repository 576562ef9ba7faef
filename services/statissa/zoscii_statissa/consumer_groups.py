"""Consumer groups: per group of each queue, what waits, what is leased, what was done.

Read on the driver through the core (``ConsumerGroups.groups_of`` and ``stats``), in the
same computation as the Spark scan, not in executors: a deployment has a handful of
groups, each one small log to replay, and the figures need the core's reading of the
log and of the queue's index, not a listing that Spark could spread. ``stats`` runs
with ``lock=False``: statissa never takes a consumer's lock nor writes a byte for it
(its volume may be mounted read-only), and a line being appended at that moment simply
counts at the next run.
"""

from __future__ import annotations

import logging

from zoscii_statissa.model import ConsumerGroupStats
from zosciimq.core.groups import ConsumerGroups, dead_letter_queue
from zosciimq.core.layout import DataDir
from zosciimq.core.names import parse_name
from zosciimq.core.queues import QueueStore
from zosciimq.errors import InvalidInput, ZosciiError

log = logging.getLogger(__name__)


def read_groups(data_dir: DataDir, queues: list[str], now: float) -> list[ConsumerGroupStats]:
    """Every group of every queue in ``queues``; an unreadable one is reported, not fatal.

    Groups of queues that no longer exist are left out (claireup deletes their state).
    """
    store = QueueStore(data_dir)
    groups = ConsumerGroups(data_dir, store, clock=lambda: now)
    result = []
    try:
        for queue in queues:
            for group in groups.groups_of(queue):
                result.append(_one(groups, queue, group, now))
    finally:
        store.close()
    return result


def _one(groups: ConsumerGroups, queue: str, group: str, now: float) -> ConsumerGroupStats:
    try:
        dead = dead_letter_queue(queue, group)
    except InvalidInput:
        dead = ""
    try:
        stats = groups.stats(queue, group, lock=False)
    except (OSError, ZosciiError) as exc:
        log.warning("consumer group %s/%s is unreadable: %s", queue, group, exc)
        return ConsumerGroupStats(queue=queue, group=group, dead_letter_queue=dead, error=str(exc))
    oldest = stats.oldest_unacked
    stamp = None
    if oldest is not None:
        try:
            stamp = parse_name(oldest).published_timestamp
        except InvalidInput:
            stamp = None
    return ConsumerGroupStats(
        queue=queue,
        group=group,
        waiting=stats.waiting,
        leased=stats.leased,
        acked=stats.acked,
        redelivered=stats.redelivered,
        dead_lettered=stats.dead_lettered,
        oldest_unacked=oldest,
        oldest_unacked_timestamp=stamp,
        oldest_unacked_age_seconds=None if stamp is None else max(0.0, now - stamp),
        dead_letter_queue=dead,
    )
