"""What one run did, per area and queue: the source of the log summary and the metrics.

Counters only, never lists of paths, so a run over millions of files stays small; the
unparsable files are kept as a short sample for the log.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

# The parts of the data directory a run cleans; ``queue`` is the only one with a queue label.
AREA_QUEUE = "queue"
AREA_STORE = "store"
AREA_NONCE = "nonce"
AREA_TEMP = "temp"
AREA_INDEX = "index"
AREA_GROUP = "group"  # consumer-group state: .zoscii/groups/<q>/<g>.log
AREAS = (AREA_QUEUE, AREA_STORE, AREA_NONCE, AREA_TEMP, AREA_INDEX, AREA_GROUP)


@dataclass
class Tally:
    scanned: int = 0
    deleted: int = 0  # or, in a dry run, would be deleted
    deleted_bytes: int = 0
    unparsable: int = 0
    errors: int = 0


@dataclass
class GroupUpkeep:
    """What a run did to the logs of live consumer groups (removals of vanished queues'
    state are deleted files of the ``group`` area's tally)."""

    compacted: int = 0  # logs rewritten (dry run: that would be)
    lines_dropped: int = 0
    bytes_reclaimed: int = 0
    waiting_dropped: int = 0  # entries waiting for a message retention deleted
    acks_dropped: int = 0  # remembered acks of messages retention deleted
    dirs_removed: int = 0  # empty state directories of vanished queues


@dataclass
class RunReport:
    started_at: datetime
    dry_run: bool = False
    tallies: dict[tuple[str, str], Tally] = field(default_factory=dict)
    groups: GroupUpkeep = field(default_factory=GroupUpkeep)
    unparsable_sample: list[str] = field(default_factory=list)
    finished_at: datetime | None = None
    duration_seconds: float = 0.0
    interrupted: bool = False
    failure: str = ""  # why the run stopped early, "" when it did not

    def tally(self, area: str, queue: str = "") -> Tally:
        key = (area, queue)
        found = self.tallies.get(key)
        if found is None:
            found = self.tallies[key] = Tally()
        return found

    def total(self, area: str | None = None) -> Tally:
        total = Tally()
        for (tally_area, _queue), tally in self.tallies.items():
            if area is None or tally_area == area:
                total.scanned += tally.scanned
                total.deleted += tally.deleted
                total.deleted_bytes += tally.deleted_bytes
                total.unparsable += tally.unparsable
                total.errors += tally.errors
        return total

    @property
    def outcome(self) -> str:
        """success, interrupted, or failed (a run that hit errors but went on is failed)."""
        if self.interrupted:
            return "interrupted"
        if self.failure or self.total().errors:
            return "failed"
        return "success"

    def summary_lines(self) -> list[str]:
        """The run as a few log lines: the metrics of a ``--once`` run, readable."""
        verb = "would delete" if self.dry_run else "deleted"
        total = self.total()
        lines = [
            f"claireup run {self.outcome}{' (dry run)' if self.dry_run else ''} in "
            f"{self.duration_seconds:.1f}s: {total.scanned} files scanned, {verb} "
            f"{total.deleted} files ({format_bytes(total.deleted_bytes)}), "
            f"{total.unparsable} unparsable, {total.errors} errors"
            + (f"; stopped by: {self.failure}" if self.failure else "")
        ]
        for (area, queue), tally in sorted(self.tallies.items()):
            where = f"{area} {queue}" if queue else area
            lines.append(
                f"  {where}: scanned={tally.scanned} {verb.replace(' ', '_')}={tally.deleted} "
                f"bytes={tally.deleted_bytes} unparsable={tally.unparsable} errors={tally.errors}"
            )
        upkeep = self.groups
        if upkeep.compacted or upkeep.dirs_removed:
            lines.append(
                f"  group logs: {'would compact' if self.dry_run else 'compacted'}="
                f"{upkeep.compacted} lines_dropped={upkeep.lines_dropped} "
                f"bytes_reclaimed={upkeep.bytes_reclaimed} acks_dropped={upkeep.acks_dropped} "
                f"waiting_dropped={upkeep.waiting_dropped} dirs_removed={upkeep.dirs_removed}"
            )
        return lines


def log_summary(report: RunReport, log: logging.Logger) -> None:
    """The summary in the log: INFO after a clean run, WARNING otherwise."""
    level = logging.INFO if report.outcome == "success" else logging.WARNING
    for line in report.summary_lines():
        log.log(level, "%s", line)


def format_bytes(count: int) -> str:
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{count} B"
