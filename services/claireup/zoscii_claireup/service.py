"""claireup as a long-running service: runs on a cron schedule in UTC, the ops port
(/healthz, /metrics) meanwhile, until the stop event is set.

One run at a time: a run still going when the next is due skips that one.
"""

from __future__ import annotations

import logging
import os
import threading
from datetime import UTC

from apscheduler.schedulers.background import BackgroundScheduler
from prometheus_client import CollectorRegistry

from zoscii_claireup.cleaner import Clock, build_cleaner
from zoscii_claireup.metrics import ClaireupMetrics
from zoscii_claireup.report import RunReport, log_summary
from zoscii_claireup.settings import Settings, cron_trigger
from zosciimq.core import DataDir
from zosciimq.core.clock import utc_now
from zosciimq.service import EXIT_OK, Health, OpsServer
from zosciimq.service.ops import ops_app

log = logging.getLogger(__name__)

JOB_ID = "claireup"


class Service:
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
        self.server: OpsServer | None = None

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
        log_summary(report, log)
        self._log_next_run()
        return report

    def health(self) -> Health:
        return Health(health_problem(self.data_dir))

    def serve(self) -> int:
        """Run until ``stop`` is set (SIGTERM); a run in progress stops within one file."""
        try:
            self.data_dir.ensure()
        except OSError as exc:  # /healthz says why; runs will log their own errors
            log.error("cannot prepare %s: %s", self.data_dir.root, exc)
        app = ops_app(self.health, self.registry)
        self.server = OpsServer(self.settings.host, self.settings.port, app).start()
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


def health_problem(data_dir: DataDir) -> str | None:
    """Why a run could not do its work, or None. Deleting needs write access to the
    directories that hold the files, on top of what every service checks."""
    problem = data_dir.check_writable()
    if problem:
        return problem
    for path in (data_dir.queues, data_dir.store):
        if path.exists() and not os.access(path, os.W_OK):
            return f"{path} is not writable"
    return None
