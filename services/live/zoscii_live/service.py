"""The live service as a long-running process: the port, the watch, until SIGTERM.

The event loop runs in the main thread; ``StopSignal`` (a threading event set by the
signal handler) is bridged into it by a small thread that waits for it. On stop the
listening socket closes, every stream is told why (so it resumes elsewhere or later),
waiting requests are answered "No new messages." (the reader asks again), and the
connections close.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import socket
import threading

from zoscii_live.app import LiveApp
from zoscii_live.metrics import LiveMetrics
from zoscii_live.settings import LiveSettings
from zosciimq.service import EXIT_FAILED, EXIT_OK

log = logging.getLogger(__name__)

BACKLOG = 4096
SPARE_FILES = 64  # open files besides the connections: the data directory, the watch...
STOP_GRACE = 2.0  # seconds the last writes get to leave before the connections are cut


def raise_open_files(wanted: int) -> int:
    """Raise this process's soft limit of open files towards ``wanted`` (each reader is
    a socket; the hard limit is the container's or the system's). Returns the limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open-file limit to %d: %s", target, exc)
    return soft


class Service:
    def __init__(self, settings: LiveSettings, stop: threading.Event) -> None:
        self.settings = settings
        self.stop = stop
        self.app: LiveApp | None = None
        self.port: int | None = None  # the bound port (useful with port 0)
        self.ready = threading.Event()

    def serve(self) -> int:
        return asyncio.run(self._main())

    async def _main(self) -> int:
        settings = self.settings
        limit = raise_open_files(settings.max_connections + 256)
        if limit < settings.max_connections + SPARE_FILES:
            log.warning(
                "open-file limit %d is below ZOSCII_LIVE_MAX_CONNECTIONS=%d: raise the "
                "container's nofile limit",
                limit,
                settings.max_connections,
            )
        app = self.app = LiveApp(settings, LiveMetrics())
        if not settings.read_only:
            try:  # the index directory is what inotify watches: there from the start
                app.data_dir.ensure()
            except OSError as exc:  # /healthz says why
                log.error("cannot prepare %s: %s", app.data_dir.root, exc)
        loop = asyncio.get_running_loop()
        try:
            sock = _listen(settings.host, settings.port)
            server = await loop.create_server(app.connection, sock=sock, backlog=BACKLOG)
        except OSError as exc:
            log.error("cannot listen on %s:%d: %s", settings.host, settings.port, exc)
            return EXIT_FAILED
        app.hub.start()
        heartbeats = app.hub.spawn(app.streams.heartbeats())
        self.port = server.sockets[0].getsockname()[1]
        log.info("live service on %s:%d (watch: %s)", settings.host, self.port, app.hub.mode)
        stopped = asyncio.Event()

        def bridge() -> None:
            self.stop.wait()
            try:
                loop.call_soon_threadsafe(stopped.set)
            except RuntimeError:  # the loop ended on its own
                pass

        threading.Thread(target=bridge, name="live-stop", daemon=True).start()
        self.ready.set()
        await stopped.wait()
        log.info("stopping: %d connections", len(app.limits.open))
        server.close()
        heartbeats.cancel()
        app.streams.stop()
        for conn in list(app.limits.open):
            if conn.on_close is not None and not conn.streaming:
                conn.on_close()  # a waiting request: answered below by its timer's answer
            conn.close()
        await asyncio.sleep(min(STOP_GRACE, 0.1) if not app.limits.open else STOP_GRACE)
        for conn in list(app.limits.open):
            conn.abort()
        await app.hub.stop()
        return EXIT_OK


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.setblocking(False)
    return sock
