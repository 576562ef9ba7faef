"""The operations port of the scheduled services: ``/healthz`` (JSON) and ``/metrics``.

Two read-only endpoints, polled every few seconds by an orchestrator and Prometheus,
need no framework: a threaded standard-library WSGI server in a daemon thread, with
prometheus-client's exposition. Requests are logged at DEBUG only, or the scrapes would
drown the lines that matter. Anything but GET/HEAD is 405; unknown paths are 404.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from zosciimq.core.layout import DataDir

log = logging.getLogger(__name__)

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


@dataclass(frozen=True)
class Health:
    """What /healthz answers: 200 when ``problem`` is None, else 503 with the reason."""

    problem: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    def document(self) -> dict[str, Any]:
        status = (
            {"status": "ok"}
            if self.problem is None
            else {
                "status": "unavailable",
                "reason": self.problem,
            }
        )
        return {**status, **self.details}


def ops_app(
    health: Callable[[], Health],
    registry: CollectorRegistry,
    routes: Mapping[str, WsgiApp] | None = None,
) -> WsgiApp:
    """The WSGI app: /healthz, /metrics, and any extra read-only ``routes``."""
    extra = dict(routes or {})

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if environ.get("REQUEST_METHOD", "GET") not in ("GET", "HEAD"):
            return _reply(start_response, "405 Method Not Allowed", b"use GET\n", allow="GET, HEAD")
        if path == "/healthz":
            report = health()
            status = "200 OK" if report.problem is None else "503 Service Unavailable"
            body = (json.dumps(report.document(), default=str) + "\n").encode()
            return _reply(start_response, status, body, "application/json")
        if path == "/metrics":
            return _reply(start_response, "200 OK", generate_latest(registry), CONTENT_TYPE_LATEST)
        if path in extra:
            return extra[path](environ, start_response)
        return _reply(start_response, "404 Not Found", b"try /healthz or /metrics\n")

    return app


def _reply(
    start_response: StartResponse,
    status: str,
    body: bytes,
    content_type: str = "text/plain; charset=utf-8",
    allow: str | None = None,
) -> list[bytes]:
    headers = [("Content-Type", content_type), ("Content-Length", str(len(body)))]
    if allow:
        headers.append(("Allow", allow))
    start_response(status, headers)
    return [body]


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s %s", self.address_string(), format % args)


class OpsServer:
    """Serves ``app`` in a daemon thread; ``port`` is the bound one (useful with port 0)."""

    def __init__(self, host: str, port: int, app: WsgiApp) -> None:
        self._server = make_server(
            host, port, app, server_class=_ThreadingServer, handler_class=_QuietHandler
        )
        self.port: int = self._server.server_port
        # stop() waits for the loop to look at its flag: every 0.05 s, not socketserver's
        # 0.5 s, so that a service stops (SIGTERM, a test's end) without that wait.
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="ops-http",
            daemon=True,
        )

    def start(self) -> OpsServer:
        self._thread.start()
        log.info("serving /healthz and /metrics on port %d", self.port)
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve_async(
    data_dir: DataDir,
    ops: tuple[str, int, Callable[[], Health], CollectorRegistry],
    main: Callable[[], Coroutine[Any, Any, int]],
) -> int:
    """An asyncio service's life (the gateways): its data directory prepared (a failure
    is for /healthz to tell, not a reason not to start), /healthz and /metrics served on
    ``ops`` = (host, port, health, registry) beside it, and ``main`` run to its exit code."""
    try:
        data_dir.ensure()
    except OSError as exc:
        log.error("cannot prepare %s: %s", data_dir.root, exc)
    host, port, health, registry = ops
    server = OpsServer(host, port, ops_app(health, registry)).start()
    try:
        return asyncio.run(main())
    finally:
        server.stop()
