"""One computation: scan (with Spark or a plain loop), read pointers, build the snapshot."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from zoscii_statissa.consumer_groups import read_groups
from zoscii_statissa.model import Snapshot, build_snapshot
from zoscii_statissa.pointers import read_pointers
from zoscii_statissa.scan import GroupKey, Partial
from zosciimq.core.layout import DataDir

log = logging.getLogger(__name__)

Scanner = Callable[[DataDir, float], dict[GroupKey, Partial]]


def compute_snapshot(scanner: Scanner, data_dir: DataDir, now: float) -> Snapshot:
    """Everything is measured from ``now`` (an injected clock), so tests can fix it."""
    if not data_dir.root.is_dir():
        raise FileNotFoundError(f"data directory {data_dir.root} does not exist")
    started = time.monotonic()
    partials = scanner(data_dir, now)
    states = read_pointers(data_dir, now)
    queues = sorted(data_dir.iter_queue_names())
    groups = read_groups(data_dir, queues, now)  # on the driver: see consumer_groups.py
    snapshot = build_snapshot(
        partials,
        queues,
        states,
        groups=groups,
        now=now,
        duration_seconds=time.monotonic() - started,
        data_dir=str(data_dir.root),
    )
    log.info(
        "statistics computed in %.2fs: %d queues, %d consumer groups, %d queue messages, "
        "%d store messages",
        snapshot.duration_seconds,
        len(snapshot.queues),
        len(snapshot.groups),
        sum(q.messages for q in snapshot.queues),
        snapshot.store.messages,
    )
    return snapshot
