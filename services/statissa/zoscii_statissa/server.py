"""statissa served by gunicorn, embedded: ``python -m zoscii_statissa`` is the master.

One gthread worker, on purpose: Spark, the scheduler and the figures live in that one
process (built after the fork, in ``StatissaApplication.load``, started once the worker
is up), so the figures are computed once and served from memory by a few threads; more
workers would each start a JVM and compute the same figures. gunicorn brings what the
standard library's development server lacks: a master that replaces a worker that died
or hangs (heartbeat ``timeout``), HTTP/1.1 keep-alive and request parsing limits, and a
graceful stop (SIGTERM: the worker cancels a computation in progress, lets requests end
within the graceful timeout, and stops Spark).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger
from gunicorn import glogging
from gunicorn.app.base import BaseApplication
from gunicorn.workers.gthread import ThreadWorker

from zoscii_statissa.compute import Scanner, compute_snapshot
from zoscii_statissa.fetch_counts import FetchCounts
from zoscii_statissa.history import History, recording
from zoscii_statissa.hosts import KnownHosts
from zoscii_statissa.settings import Settings
from zoscii_statissa.snapshots import SnapshotKeeper
from zoscii_statissa.spark import SparkScanner
from zoscii_statissa.web import admin_panel, create_app
from zosciimq.core.clock import Clock, utc_now
from zosciimq.core.layout import DataDir
from zosciimq.service.logs import formatter_for
from zosciimq.service.ops import WsgiApp

log = logging.getLogger(__name__)

JOB_ID = "statistics"
SERVICE = "statissa"


class Runtime:
    """What lives in the serving process: the scanner (Spark), the figures, the
    schedule that refreshes them, and the WSGI app that serves them."""

    def __init__(
        self, settings: Settings, scanner: Scanner | None = None, *, clock: Clock = utc_now
    ) -> None:
        self.settings = settings
        self.data_dir = DataDir(settings.data_dir)
        self.scanner = scanner if scanner is not None else SparkScanner(settings)
        # each computation's figures also go to the history on the volume (history.py),
        # with the api's fetch counts read at the same time (fetch_counts.py)
        self.history = History(self.data_dir)
        self.fetch_counts = FetchCounts(settings.fetch_count_urls, settings.api_metrics_token)
        compute = recording(
            partial(compute_snapshot, self.scanner, self.data_dir),
            self.history,
            self.fetch_counts.read,
        )
        self.keeper = SnapshotKeeper(compute, clock)
        # the console's admin buttons relay to the api (relay.py says why not the core)
        self.app: WsgiApp = create_app(
            self.keeper,
            self.data_dir,
            settings.access,
            history=self.history,
            admin=admin_panel(settings.api_url, settings.api_timeout_seconds),
            live_url=settings.live_url,
            hosts=KnownHosts(settings.public_origins),
        )
        self.scheduler = BackgroundScheduler(timezone=UTC)
        self.scheduler.add_job(
            self.keeper.refresh_quietly,
            IntervalTrigger(seconds=settings.interval_seconds, timezone=UTC),
            id=JOB_ID,
            next_run_time=datetime.now(UTC),  # the first run starts at once
            max_instances=1,
            coalesce=True,
        )
        self._stopping = threading.Lock()

    def start(self) -> None:
        self.scheduler.start()
        log.info(
            "statissa computing every %ds from %s, Spark master %s, access control %s, "
            "admin actions %s, fetch counts from %s",
            self.settings.interval_seconds,
            self.data_dir.root,
            self.settings.spark_master,
            "on" if self.settings.access.enabled else "off",
            f"relayed to {self.settings.api_url}" if self.settings.api_url else "off",
            ", ".join(self.fetch_counts.urls) or "nowhere",
        )

    def stopping(self) -> None:
        """SIGTERM: no new runs, and the one in progress fails fast (its request ends)."""
        with self._stopping:
            if self.scheduler.running:
                self.scheduler.shutdown(wait=False)
        cancel = getattr(self.scanner, "cancel", None)
        if cancel is not None:
            cancel()

    def stop(self) -> None:
        """The worker is leaving: Spark stops with it."""
        self.stopping()
        stop = getattr(self.scanner, "stop", None)
        if stop is not None:
            stop()
        self.fetch_counts.close()


class StatissaWorker(ThreadWorker):
    """gthread, which on SIGTERM first tells the runtime, so a computation that may run
    for minutes is cancelled instead of holding the graceful stop to its end."""

    def handle_exit(self, sig: int, frame: Any) -> None:
        super().handle_exit(sig, frame)
        runtime = getattr(self.app, "runtime", None)
        if runtime is not None:  # py4j calls: not in a signal handler
            threading.Thread(target=runtime.stopping, name="stopping", daemon=True).start()


class StatissaLogger(glogging.Logger):
    """gunicorn's own lines in the service's format (text, or JSON lines)."""

    log_format = "text"

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        formatter = formatter_for(SERVICE, self.log_format)
        for logger in (self.error_log, self.access_log):
            for handler in logger.handlers:
                handler.setFormatter(formatter)


class StatissaApplication(BaseApplication):
    """The embedded gunicorn: configuration from the settings, never from a file or
    the command line (``python -m zoscii_statissa`` has its own flags)."""

    def __init__(
        self, settings: Settings, runtime_factory: Callable[[Settings], Runtime] = Runtime
    ) -> None:
        self.settings = settings
        self.runtime_factory = runtime_factory
        self.runtime: Runtime | None = None
        super().__init__(prog="zoscii_statissa")

    def load_config(self) -> None:
        settings = self.settings
        level, log_format = settings.log
        StatissaLogger.log_format = log_format
        host = f"[{settings.host}]" if ":" in settings.host else settings.host
        options: dict[str, Any] = {
            "bind": [f"{host}:{settings.port}"],
            "workers": 1,  # see the module's docstring
            "worker_class": StatissaWorker,
            "threads": settings.threads,
            "timeout": settings.timeout_seconds,
            "graceful_timeout": settings.graceful_timeout_seconds,
            "keepalive": 5,
            "limit_request_line": 4094,
            "limit_request_fields": 50,
            "limit_request_field_size": 8190,
            "errorlog": "-",
            "accesslog": None,  # scrapes every few seconds would drown the log
            "loglevel": level.lower(),
            "logger_class": StatissaLogger,
            "proc_name": "zoscii-statissa",
            "control_socket_disable": True,  # no runtime-control socket: one less door
            "post_worker_init": _post_worker_init,
            "worker_exit": _worker_exit,
        }
        for key, value in options.items():
            self.cfg.set(key, value)

    def load(self) -> WsgiApp:
        """Called in the worker, after the fork: Spark never starts in the master."""
        self.runtime = self.runtime_factory(self.settings)
        return self.runtime.app


def _post_worker_init(worker: Any) -> None:
    runtime = getattr(worker.app, "runtime", None)
    if runtime is not None:
        runtime.start()


def _worker_exit(server: Any, worker: Any) -> None:
    runtime = getattr(worker.app, "runtime", None)
    if runtime is not None:
        runtime.stop()
