"""Prometheus metrics of the daemon, fed from each run's RunReport.

Built on a registry the caller owns (no import-time global registry), so tests and a
second instance in one process do not collide.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from zoscii_claireup.report import AREAS, RunReport
from zosciimq.service.build_info import register_build_info


class ClaireupMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        register_build_info(registry, "claireup")
        labels = ["area", "queue"]
        self.deleted_files = Counter(
            "zoscii_claireup_deleted_files_total",
            "Files deleted because their retention, nonce window or safe age had passed "
            "(queue is empty outside area=queue).",
            labels,
            registry=registry,
        )
        self.deleted_bytes = Counter(
            "zoscii_claireup_deleted_bytes_total",
            "Bytes of the files deleted.",
            labels,
            registry=registry,
        )
        self.scanned_files = Counter(
            "zoscii_claireup_scanned_files_total",
            "Files looked at by runs.",
            ["area"],
            registry=registry,
        )
        self.errors = Counter(
            "zoscii_claireup_errors_total",
            "Files or directories a run could not list, stat or delete.",
            ["area"],
            registry=registry,
        )
        self.unparsable = Gauge(
            "zoscii_claireup_unparsable_files",
            "Files left alone in the last run because their name does not parse.",
            ["area"],
            registry=registry,
        )
        self.runs = Counter(
            "zoscii_claireup_runs_total",
            "Runs by outcome (success, failed, interrupted).",
            ["outcome"],
            registry=registry,
        )
        self.last_duration = Gauge(
            "zoscii_claireup_last_run_duration_seconds",
            "Wall time of the last run.",
            registry=registry,
        )
        self.last_success = Gauge(
            "zoscii_claireup_last_success_timestamp_seconds",
            "When the last run that completed without errors finished (Unix time; "
            "dry runs do not count).",
            registry=registry,
        )
        self.group_logs_compacted = Counter(
            "zoscii_claireup_group_logs_compacted_total",
            "Consumer-group logs rewritten without the history of messages retention deleted.",
            registry=registry,
        )
        self.group_log_lines_dropped = Counter(
            "zoscii_claireup_group_log_lines_dropped_total",
            "Lines those rewrites dropped from consumer-group logs.",
            registry=registry,
        )
        self.group_log_bytes_reclaimed = Counter(
            "zoscii_claireup_group_log_bytes_reclaimed_total",
            "Bytes those rewrites saved (log size before minus after).",
            registry=registry,
        )
        self.group_entries_dropped = Counter(
            "zoscii_claireup_group_entries_dropped_total",
            "Group state about messages retention deleted: kind=ack (remembered acks), "
            "kind=waiting (entries waiting for a redelivery). Leases are never dropped.",
            ["kind"],
            registry=registry,
        )
        self.running = Gauge(
            "zoscii_claireup_running", "1 while a run is in progress.", registry=registry
        )
        for area in AREAS:  # so every series exists from the start, at 0
            self.scanned_files.labels(area)
            self.errors.labels(area)
            self.unparsable.labels(area)
        for outcome in ("success", "failed", "interrupted"):
            self.runs.labels(outcome)
        for kind in ("ack", "waiting"):
            self.group_entries_dropped.labels(kind)

    def record(self, report: RunReport) -> None:
        self.runs.labels(report.outcome).inc()
        self.last_duration.set(report.duration_seconds)
        unparsable = dict.fromkeys(AREAS, 0)
        for (area, queue), tally in report.tallies.items():
            self.scanned_files.labels(area).inc(tally.scanned)
            self.errors.labels(area).inc(tally.errors)
            unparsable[area] = unparsable.get(area, 0) + tally.unparsable
            if not report.dry_run and tally.deleted:
                self.deleted_files.labels(area, queue).inc(tally.deleted)
                self.deleted_bytes.labels(area, queue).inc(tally.deleted_bytes)
        if not report.dry_run:
            upkeep = report.groups
            self.group_logs_compacted.inc(upkeep.compacted)
            self.group_log_lines_dropped.inc(upkeep.lines_dropped)
            self.group_log_bytes_reclaimed.inc(upkeep.bytes_reclaimed)
            self.group_entries_dropped.labels("ack").inc(upkeep.acks_dropped)
            self.group_entries_dropped.labels("waiting").inc(upkeep.waiting_dropped)
        if not report.interrupted:  # a partial count would read as files having vanished
            for area, count in unparsable.items():
                self.unparsable.labels(area).set(count)
        ok = report.outcome == "success" and not report.dry_run
        if ok and report.finished_at is not None:
            self.last_success.set(report.finished_at.timestamp())
