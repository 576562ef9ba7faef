"""statissa as a long-running service: a computation every interval (the first at once),
the port with the page, /stats.json, /metrics and /healthz meanwhile, until the stop
event is set.

Spark, the scheduler and the HTTP server share one process on purpose: the figures live
in memory and are served as they were computed, never recomputed per request.
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime
from functools import partial

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from zoscii_statissa.compute import compute_snapshot
from zoscii_statissa.settings import Settings
from zoscii_statissa.snapshots import SnapshotKeeper
from zoscii_statissa.spark import SparkScanner
from zoscii_statissa.web import create_app
from zosciimq.core.layout import DataDir
from zosciimq.core.queues import utc_now
from zosciimq.service import EXIT_OK, OpsServer

log = logging.getLogger(__name__)

JOB_ID = "statistics"


class Service:
    def __init__(self, settings: Settings, scanner: SparkScanner, stop: threading.Event) -> None:
        self.settings = settings
        self.scanner = scanner
        self.stop = stop
        self.data_dir = DataDir(settings.data_dir)
        self.keeper = SnapshotKeeper(partial(compute_snapshot, scanner, self.data_dir), utc_now)
        self.scheduler = BackgroundScheduler(timezone=UTC)
        self.scheduler.add_job(
            self.keeper.refresh_quietly,
            IntervalTrigger(seconds=settings.interval_seconds, timezone=UTC),
            id=JOB_ID,
            next_run_time=datetime.now(UTC),  # the first run starts at once
            max_instances=1,
            coalesce=True,
        )
        self.server: OpsServer | None = None

    def serve(self) -> int:
        """Run until ``stop`` is set (SIGTERM); a computation in progress is cancelled."""
        app = create_app(self.keeper, self.data_dir)
        self.server = OpsServer(self.settings.host, self.settings.port, app).start()
        self.scheduler.start()
        log.info(
            "statissa serving on %s:%d, data %s, every %ds, Spark master %s",
            self.settings.host,
            self.server.port,
            self.data_dir.root,
            self.settings.interval_seconds,
            self.settings.spark_master,
        )
        try:
            while not self.stop.wait(timeout=1.0):
                pass
        finally:
            log.info("stopping")
            self.server.stop()
            self.scanner.cancel()  # the run in progress fails fast; its thread then ends
            self.scheduler.shutdown(wait=False)
        return EXIT_OK
