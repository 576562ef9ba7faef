"""The two ways claireup runs: one run and exit (cloud schedulers), or a daemon that
runs on a cron schedule in UTC and serves /healthz and /metrics meanwhile."""

from __future__ import annotations

import logging
import sys
import threading
from datetime import UTC

from apscheduler.schedulers.background import BackgroundScheduler
from prometheus_client import CollectorRegistry

from zoscii_claireup.cleaner import Cleaner, Clock, DryRunSink
from zoscii_claireup.metrics import ClaireupMetrics
from zoscii_claireup.report import RunReport
from zoscii_claireup.server import HttpServer, make_app
from zoscii_claireup.settings import Settings, cron_trigger
from zosciimq.core import DataDir
from zosciimq.core.queues import utc_now

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INTERRUPTED = 143  # 128 + SIGTERM, what a shell reports for a terminated job

JOB_ID = "claireup"


def print_would_delete(path: str, size: int) -> None:
    """A dry run's list on stdout, one ``<bytes>\\t<path>`` a line, ready for sort or awk."""
    sys.stdout.write(f"{size}\t{path}\n")


def build_cleaner(
    settings: Settings,
    stop: threading.Event,
    *,
    clock: Clock = utc_now,
    dry_run_sink: DryRunSink | None = print_would_delete,
) -> Cleaner:
    return Cleaner(
        DataDir(settings.data_dir),
        nonce_window_seconds=settings.core.nonce_window_seconds,
        temp_max_age_seconds=settings.temp_max_age_seconds,
        clock=clock,
        stop=stop,
        progress_every_files=settings.progress_every_files,
        progress_every_seconds=settings.progress_every_seconds,
        report_limit=settings.report_limit,
        dry_run_sink=dry_run_sink,
    )


def log_report(report: RunReport) -> None:
    level = logging.INFO if report.outcome == "success" else logging.WARNING
    for line in report.summary_lines():
        log.log(level, "%s", line)


def exit_code(report: RunReport) -> int:
    if report.interrupted:
        return EXIT_INTERRUPTED
    return EXIT_OK if report.outcome == "success" else EXIT_FAILED


def run_once(settings: Settings, stop: threading.Event, *, clock: Clock = utc_now) -> int:
    """One run; its metrics go to the log as a summary instead of being served."""
    report = build_cleaner(settings, stop, clock=clock).run(dry_run=settings.dry_run)
    log_report(report)
    return exit_code(report)


class Daemon:
    """Scheduled runs (one at a time; a run still going at the next time skips it)."""

    def __init__(self, settings: Settings, stop: threading.Event, *, clock: Clock = utc_now):
        self.settings = settings
        self.stop = stop
        self.data_dir = DataDir(settings.data_dir)
        self.registry = CollectorRegistry()
        self.metrics = ClaireupMetrics(self.registry)
        self.cleaner = build_cleaner(settings, stop, clock=clock)
        self.scheduler = BackgroundScheduler(timezone=UTC)
        self.scheduler.add_job(
            self.run_job,
            cron_trigger(settings.schedule),
            id=JOB_ID,
            max_instances=1,
            coalesce=True,
            misfire_grace_time=3600,
        )
        self.server: HttpServer | None = None

    def run_job(self) -> RunReport | None:
        self.metrics.running.set(1)
        try:
            report = self.cleaner.run(dry_run=self.settings.dry_run)
        except Exception:
            log.exception("claireup run failed")
            self.metrics.runs.labels("failed").inc()
            return None
        finally:
            self.metrics.running.set(0)
        self.metrics.record(report)
        log_report(report)
        self._log_next_run()
        return report

    def serve(self) -> int:
        """Run until ``stop`` is set (SIGTERM); a run in progress stops within one file."""
        try:
            self.data_dir.ensure()
        except OSError as exc:  # /healthz says why; runs will log their own errors
            log.error("cannot prepare %s: %s", self.data_dir.root, exc)
        self.server = HttpServer(
            self.settings.host, self.settings.port, make_app(self.data_dir, self.registry)
        ).start()
        self.scheduler.start()
        log.info(
            "claireup scheduled with %r (UTC)%s",
            self.settings.schedule,
            ", dry run" if self.settings.dry_run else "",
        )
        self._log_next_run()
        try:
            while not self.stop.wait(timeout=1.0):
                pass
        finally:
            log.info("stopping: waiting for a run in progress to end")
            self.scheduler.shutdown(wait=True)
            self.server.stop()
        log.info("claireup stopped")
        return EXIT_OK

    def _log_next_run(self) -> None:
        job = self.scheduler.get_job(JOB_ID)
        next_run = getattr(job, "next_run_time", None)
        if next_run is not None:
            log.info("next run at %s", next_run.astimezone(UTC).isoformat())
