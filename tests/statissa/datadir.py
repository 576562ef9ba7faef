"""A data directory with known contents, written through the core with a settable clock.

Every name, size and time below is known exactly; ``NOW`` is the clock the statistics
are computed at.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.support.queues import publish_body
from zoscii_statissa.compute import Scanner, compute_snapshot
from zoscii_statissa.model import Snapshot
from zosciimq.core import DataDir, DataStore, QueueStore, Upload
from zosciimq.core.states import state_path, write_pointer

NOW = datetime(2026, 3, 10, 12, 0, 0, tzinfo=UTC)
HOUR = 3600.0
DAY = 86_400.0


class Clock:
    """A settable clock, injected wherever the code asks for the time."""

    def __init__(self, moment: datetime) -> None:
        self.moment = moment

    def __call__(self) -> datetime:
        return self.moment


def _publish(queues: QueueStore, clock: Clock, queue: str, at: datetime, size: int, days: int):
    clock.moment = at
    return publish_body(queues, queue, b"q" * size, days).name


def _store(store: DataStore, clock: Clock, at: datetime, size: int, days: int, u: bool) -> str:
    clock.moment = at
    with Upload(store.data_dir) as upload:
        upload.write(b"s" * size)
        return store.store(upload, retention_days=days, unidentified=u).name


def build_data_dir(root: Path) -> dict[str, str]:
    """The layout every figure test checks; returns a few names the tests refer to."""
    data_dir = DataDir(root)
    data_dir.ensure()
    clock = Clock(NOW)
    queues, store = QueueStore(data_dir, clock), DataStore(data_dir, clock)
    h = timedelta(hours=1)
    # orders: 3 x 100 B at NOW-30h, 1 day (expired 6 h ago); 10 B and 20 B at NOW-90min,
    # 1 day (expire in 22.5 h); 5 B at NOW-10min, 30 days.
    for _ in range(3):
        _publish(queues, clock, "orders", NOW - 30 * h, 100, 1)
    _publish(queues, clock, "orders", NOW - 1.5 * h, 10, 1)
    pointer = _publish(queues, clock, "orders", NOW - 1.5 * h, 20, 1)
    _publish(queues, clock, "orders", NOW - timedelta(minutes=10), 5, 30)
    # logs_2: one empty message two days old with retention 0, a malformed .bin, a stray file.
    _publish(queues, clock, "logs_2", NOW - 48 * h, 0, 0)
    (data_dir.queue_dir("logs_2") / "not-a-message-name.bin").write_bytes(b"??")
    (data_dir.queue_dir("logs_2") / "README.txt").write_bytes(b"ignored")
    # empty-q: a queue directory without messages.
    data_dir.queue_dir("empty-q").mkdir()
    # store: 40 B and 60 B at NOW-5h (7 days), 50 B unidentified at NOW-3d (2 days: expired).
    _store(store, clock, NOW - 5 * h, 40, 7, False)
    _store(store, clock, NOW - 5 * h + timedelta(seconds=17), 60, 7, False)
    unidentified = _store(store, clock, NOW - 72 * h + timedelta(seconds=41), 50, 2, True)
    # replikate pointers: one 90 minutes behind, one that never ran, one corrupt.
    write_pointer(state_path(data_dir, "remote", "orders"), pointer)
    write_pointer(state_path(data_dir, "fresh", None), "")
    state_path(data_dir, "broken", "x").write_text("not a pointer\n")
    return {"pointer": pointer, "unidentified": unidentified}


def compute(scan: Scanner, root: Path, now: float | None = None) -> Snapshot:
    """The snapshot of the data directory at ``root`` by ``scan``, at NOW unless given."""
    when = NOW.timestamp() if now is None else now
    return compute_snapshot(scan, DataDir(root), when)
