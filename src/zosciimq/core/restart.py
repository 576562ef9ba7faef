"""What a service that commits does before it answers: make good what a crash left.

Every queue's and the store's write-ahead log is looked at; one written under another
boot of the machine (a power loss, a reboot) is redone (``core.recovery``). A queue not
looked at here recovers when it is next used, so this is about answering from a
consistent volume from the first request, not about correctness.
"""

from __future__ import annotations

import logging
import time

from zosciimq.core.queues import QueueStore
from zosciimq.core.recovery import Report
from zosciimq.core.store import DataStore

log = logging.getLogger(__name__)


def recover_at_start(queues: QueueStore, store: DataStore | None = None) -> Report:
    """Recover the volume; logs what was done (at WARNING when anything was)."""
    started = time.monotonic()
    report = queues.recover_volume()
    if store is not None:
        report.add(store.recover_volume())
    seconds = time.monotonic() - started
    if report:
        log.warning(
            "recovered %d queue(s) after a restart of the machine in %.1f s: %d record(s) "
            "redone, %d file(s) made again, %d moved aside into .zoscii/suspect, %d lost",
            len(report.queues),
            seconds,
            report.records,
            len(report.rewritten),
            len(report.suspects),
            len(report.lost),
        )
    else:
        log.info("write-ahead logs checked in %.2f s: nothing to recover", seconds)
    return report
