"""The gateway as a long-running service: its ØMQ sockets and the ops port (/healthz,
/metrics) until the stop event is set (SIGTERM), then a clean stop.

One asyncio event loop (pyzmq's asyncio sockets) serves every socket; the core's
blocking calls run in the storage's thread pool. ``StopSignal`` (a threading event set
by the signal handler) is bridged into the loop by a small thread that waits for it.
"""

from __future__ import annotations

import asyncio
import logging
import threading

import zmq
import zmq.asyncio

from zoscii_zmq.metrics import ZmqMetrics
from zoscii_zmq.patterns import Patterns
from zoscii_zmq.settings import Settings
from zoscii_zmq.storage import Storage
from zoscii_zmq.zpipes import Zpipes
from zosciimq.core import DataDir
from zosciimq.core.restart import recover_at_start
from zosciimq.service import EXIT_FAILED, EXIT_OK, Health
from zosciimq.service.ops import serve_async

log = logging.getLogger(__name__)


class Service:
    def __init__(self, settings: Settings, stop: threading.Event) -> None:
        self.settings = settings
        self.stop = stop
        self.data_dir = DataDir(settings.data_dir)
        self.metrics = ZmqMetrics()
        self.zpipes: Zpipes | None = None
        self.patterns: Patterns | None = None
        self.serving = False

    def health(self) -> Health:
        details: dict[str, object] = {}
        if self.zpipes is not None:
            details.update(self.zpipes.details())
        if self.patterns is not None:
            details["pub_feeds"] = len(self.patterns.feeds)
        problem = self.data_dir.check_writable()
        if problem is None and not self.serving:
            problem = "not serving its sockets"
        return Health(problem, details)

    def serve(self) -> int:
        ops = (self.settings.host, self.settings.metrics_port, self.health, self.metrics.registry)
        return serve_async(self.data_dir, ops, self._main)

    async def _main(self) -> int:
        context = zmq.asyncio.Context()
        storage = Storage(self.settings)
        if self.data_dir.check_writable() is None:
            await storage.run(recover_at_start, storage.queues)  # before serving
        self.zpipes = Zpipes(self.settings, storage, self.metrics, context)
        self.patterns = Patterns(self.settings, storage, self.metrics, context)
        try:
            self.zpipes.bind()
            self.patterns.bind()
        except zmq.ZMQError as exc:
            log.error("cannot bind: %s", exc)
            await self._close(storage, context)
            return EXIT_FAILED
        self.zpipes.start()
        self.patterns.start()
        self.serving = True
        log.info(
            "serving (data %s, access control %s)",
            self.data_dir.root,
            "on" if self.settings.access.enabled else "off",
        )
        stopped = asyncio.Event()
        loop = asyncio.get_running_loop()

        def bridge() -> None:
            self.stop.wait()
            try:
                loop.call_soon_threadsafe(stopped.set)
            except RuntimeError:  # the loop ended on its own
                pass

        threading.Thread(target=bridge, name="zmq-stop", daemon=True).start()
        await stopped.wait()
        self.serving = False
        await self._close(storage, context)
        log.info("stopped")
        return EXIT_OK

    async def _close(self, storage: Storage, context: zmq.asyncio.Context) -> None:
        if self.patterns is not None:
            await self.patterns.stop()
        if self.zpipes is not None:
            await self.zpipes.stop()
        storage.close()
        context.destroy(linger=0)
