"""The long-running replicator: every job on its schedule, the ops port, and a clean stop.

APScheduler runs each job on its interval or crontab in a thread pool, one instance of a
job at a time (``max_instances=1``, late runs coalesced). A run goes on until it has
caught up, however long that takes on a slow link, so its job is paused while it runs
and resumed after (its next run at the next tick from then): APScheduler's "maximum
number of running instances reached" warning then means something (it never fires
for a run that is merely long). Across containers sharing the volume, the job's lock
file keeps a second copy from running it at the same time.

Health is about this container: 503 when the data directory is missing or not writable.
A partner's server being down is no reason to restart the replicator (it would not
help); it shows in the jobs' details of ``/healthz`` and in the metrics.
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime
from typing import Any

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.schedulers.base import SchedulerNotRunningError
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from zoscii_replikate.metrics import ReplikateMetrics
from zoscii_replikate.replicator import Replicator, RunOutcome, RunResult
from zoscii_replikate.settings import JobConfig, Settings
from zosciimq.core import DataDir, DataStore, QueueStore
from zosciimq.core.clock import Clock, utc_now
from zosciimq.core.restart import recover_at_start
from zosciimq.service import Health, OpsServer
from zosciimq.service.ops import ops_app

log = logging.getLogger(__name__)

MAX_THREADS = 8


class Service:
    """The jobs of ``settings``; ``stop`` (a ``StopSignal`` from the command line) ends
    ``serve`` and ``run_once`` between two batches."""

    def __init__(
        self,
        settings: Settings,
        *,
        clock: Clock = utc_now,
        stop: threading.Event | None = None,
    ) -> None:
        self.settings = settings
        self.data_dir = DataDir(settings.data_dir)
        self.metrics = ReplikateMetrics()
        self.stop = stop or threading.Event()
        self.ops_server: OpsServer | None = None  # set by serve()
        # One queue store and one store for every job: their commits and checkpoints
        # are shared (core.group_commit, core.checkpoint).
        durability = settings.core.durability()
        self.queues = QueueStore(self.data_dir, clock=clock, durability=durability)
        self.store = DataStore(
            self.data_dir,
            clock=clock,
            durability=durability,
            checkpointer=self.queues.checkpointer,
            flusher=self.queues.flusher,
        )
        self._running = 0  # runs in progress (the stop waits for them)
        self._idle = threading.Condition()
        self.replicators = {
            job.name: Replicator(
                job,
                self.data_dir,
                self.metrics,
                clock=clock,
                stop=self.stop,
                queues=self.queues,
                store=self.store,
            )
            for job in settings.jobs
        }

    def prepare(self) -> str | None:
        """Create the data directory skeleton and recover what a crash left; the
        problem, if it cannot be used."""
        try:
            self.data_dir.ensure()
        except OSError as exc:
            return str(exc)
        problem = self.data_dir.check_writable()
        if problem is None:
            recover_at_start(self.queues, self.store)
        return problem

    def close(self) -> None:
        for replicator in self.replicators.values():
            replicator.close()
        self.queues.close()
        self.store.close()

    def run_once(self) -> list[RunResult]:
        """Each job once, one after the other, ignoring back-off (``--once``)."""
        results = []
        for replicator in self.replicators.values():
            if self.stop.is_set():
                break
            results.append(replicator.run(ignore_backoff=True))
        return results

    def serve(self) -> None:
        """Schedule every job and serve /metrics and /healthz until ``stop`` is set."""
        ops = self.ops_server = OpsServer(
            self.settings.metrics_host,
            self.settings.metrics_port,
            ops_app(self.health, self.metrics.registry),
        ).start()
        scheduler = self._scheduler()
        if scheduler is None:
            log.warning("no replication jobs configured: serving metrics and health only")
        else:
            scheduler.start()
        try:
            self.stop.wait()
        finally:
            log.info("stopping: letting running jobs finish their current batch")
            if scheduler is not None:
                # Not shutdown(wait=True): it holds the job store's lock while it waits,
                # and a run ending meanwhile needs that lock to resume its job.
                scheduler.shutdown(wait=False)
                with self._idle:
                    self._idle.wait_for(lambda: self._running == 0)
            ops.stop()

    def _scheduler(self) -> BackgroundScheduler | None:
        """Every job on its trigger (the interval's first run at once); None: no jobs."""
        if not self.settings.jobs:
            return None
        scheduler = BackgroundScheduler(
            timezone=UTC,
            executors={
                "default": ThreadPoolExecutor(max(1, min(len(self.replicators), MAX_THREADS)))
            },
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
        )
        for job in self.settings.jobs:
            scheduler.add_job(
                self._run_paused,
                args=(scheduler, job.name),
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
        return scheduler

    def _run_paused(self, scheduler: BackgroundScheduler, name: str) -> RunResult:
        """One run of job ``name``, its schedule paused meanwhile (no tick while it runs)."""
        with self._idle:
            self._running += 1
        try:
            scheduler.pause_job(name)
            try:
                return self.replicators[name].run()
            finally:
                try:
                    scheduler.resume_job(name)
                except (JobLookupError, SchedulerNotRunningError):  # shutting down
                    pass
        finally:
            with self._idle:
                self._running -= 1
                self._idle.notify_all()

    def health(self) -> Health:
        """The data directory's problem if any, and each job's last run."""
        return Health(
            self.data_dir.check_writable(),
            {"jobs": {name: _job_health(r) for name, r in self.replicators.items()}},
        )


def _job_health(replicator: Replicator) -> dict[str, Any]:
    last = replicator.last_result
    return {
        "last_outcome": last.outcome if last else None,
        "last_error": last.error if last and last.outcome is RunOutcome.ERROR else None,
        "last_success": replicator.last_success.isoformat() if replicator.last_success else None,
        "failures": replicator.failures,
    }


def _trigger(job: JobConfig) -> CronTrigger | IntervalTrigger:
    if job.cron:
        return CronTrigger.from_crontab(job.cron, timezone=UTC)
    return IntervalTrigger(seconds=job.interval_seconds, timezone=UTC)
