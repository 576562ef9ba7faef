"""The gateway as a long-running service: the PHPMQ port and the ops port (/healthz,
/metrics) until the stop event is set (SIGTERM), then a clean stop.

The event loop runs in the main thread; ``StopSignal`` (a threading event set by the
signal handler) is bridged into it by a small thread that waits for it.
"""

from __future__ import annotations

import asyncio
import logging
import threading

from zoscii_phpmq.gateway import Gateway
from zoscii_phpmq.metrics import PhpmqMetrics
from zoscii_phpmq.settings import Settings
from zosciimq.core import DataDir
from zosciimq.service import EXIT_FAILED, EXIT_OK, Health
from zosciimq.service.ops import serve_async

log = logging.getLogger(__name__)


class Service:
    def __init__(self, settings: Settings, stop: threading.Event) -> None:
        self.settings = settings
        self.stop = stop
        self.data_dir = DataDir(settings.data_dir)
        self.metrics = PhpmqMetrics()
        self.gateway: Gateway | None = None

    def health(self) -> Health:
        gateway = self.gateway
        details = gateway.details() if gateway is not None else {}
        problem = self.data_dir.check_writable()
        if problem is None and (gateway is None or not gateway.serving):
            problem = "not listening for PHPMQ clients"
        return Health(problem, details)

    def serve(self) -> int:
        ops = (self.settings.host, self.settings.metrics_port, self.health, self.metrics.registry)
        return serve_async(self.data_dir, ops, self._main)

    async def _main(self) -> int:
        self.gateway = Gateway(self.settings, self.metrics)
        try:
            await self.gateway.start()
        except OSError as exc:
            log.error("cannot listen on %s:%d: %s", self.settings.host, self.settings.port, exc)
            self.gateway.pool.shutdown()
            return EXIT_FAILED
        stopped = asyncio.Event()
        loop = asyncio.get_running_loop()

        def bridge() -> None:
            self.stop.wait()
            try:
                loop.call_soon_threadsafe(stopped.set)
            except RuntimeError:  # the loop ended on its own
                pass

        threading.Thread(target=bridge, name="phpmq-stop", daemon=True).start()
        await stopped.wait()
        await self.gateway.stop()
        return EXIT_OK
