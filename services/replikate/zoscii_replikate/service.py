"""The replicator service: every configured job on its schedule, or each once.

APScheduler runs each job on its interval or crontab in a thread pool, one instance of a
job at a time (``max_instances=1``, late runs coalesced). Across containers sharing the
volume, the job's lock file keeps a second copy from running it at the same time.
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime
from typing import Any

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from zoscii_replikate.metrics import ReplikateMetrics
from zoscii_replikate.ops_server import OpsServer, make_app
from zoscii_replikate.replicator import Clock, Replicator, RunResult, utc_now
from zoscii_replikate.settings import JobConfig, Settings
from zosciimq.core import DataDir

log = logging.getLogger("zoscii.replikate")

MAX_THREADS = 8


class Service:
    def __init__(self, settings: Settings, *, clock: Clock = utc_now) -> None:
        self.settings = settings
        self.data_dir = DataDir(settings.data_dir)
        self.metrics = ReplikateMetrics()
        self.stop = threading.Event()
        self.ops_server: OpsServer | None = None  # set by serve()
        self.replicators = {
            job.name: Replicator(job, self.data_dir, self.metrics, clock=clock, stop=self.stop)
            for job in settings.jobs
        }

    def prepare(self) -> str | None:
        """Create the data directory skeleton; the problem, if it cannot be used."""
        try:
            self.data_dir.ensure()
        except OSError as exc:
            return str(exc)
        return self.data_dir.check_writable()

    def close(self) -> None:
        for replicator in self.replicators.values():
            replicator.close()

    # --- one-shot ------------------------------------------------------------------------
    def run_once(self, names: list[str] | None = None) -> list[RunResult]:
        """Each job (or the named ones) once, one after the other, ignoring back-off."""
        results = []
        for name in names or list(self.replicators):
            if self.stop.is_set():
                break
            results.append(self.replicators[name].run(ignore_backoff=True))
        return results

    # --- the long-running service -----------------------------------------------------------
    def serve(self) -> None:
        """Schedule every job and serve /metrics and /healthz until ``stop`` is set."""
        ops = self.ops_server = OpsServer(
            self.settings.metrics_host,
            self.settings.metrics_port,
            make_app(self.metrics.exposition, self.health),
        ).start()
        log.info("metrics and health on port %d", ops.port)
        scheduler = BackgroundScheduler(
            timezone=UTC,
            executors={
                "default": ThreadPoolExecutor(max(1, min(len(self.replicators), MAX_THREADS)))
            },
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
        )
        for job in self.settings.jobs:
            scheduler.add_job(
                self.replicators[job.name].run,
                trigger=_trigger(job),
                id=job.name,
                name=f"replikate {job.name}",
                next_run_time=datetime.now(UTC) if job.cron is None else None,
            )
            log.info(
                "job %s: %s queue %s -> %s, %s",
                job.name,
                job.source_url,
                job.source_queue,
                job.target_label,
                f"cron '{job.cron}' (UTC)" if job.cron else f"every {job.interval_seconds:g} s",
            )
        if job_count := len(self.settings.jobs):
            scheduler.start()
        else:
            log.warning("no replication jobs configured: serving metrics and health only")
        try:
            self.stop.wait()
        finally:
            log.info("stopping: letting running jobs finish their current message")
            if job_count:
                scheduler.shutdown(wait=True)
            ops.stop()

    def health(self) -> tuple[bool, dict[str, Any]]:
        problem = self.data_dir.check_writable()
        jobs = {}
        for name, replicator in self.replicators.items():
            last = replicator.last_result
            jobs[name] = {
                "last_outcome": last.outcome if last else None,
                "last_error": last.error if last and last.outcome == "error" else None,
                "last_success": replicator.last_success.isoformat()
                if replicator.last_success
                else None,
                "failures": replicator.failures,
            }
        if problem:
            return False, {"status": "unavailable", "reason": problem, "jobs": jobs}
        return True, {"status": "ok", "jobs": jobs}


def _trigger(job: JobConfig) -> CronTrigger | IntervalTrigger:
    if job.cron:
        return CronTrigger.from_crontab(job.cron, timezone=UTC)
    return IntervalTrigger(seconds=job.interval_seconds, timezone=UTC)
