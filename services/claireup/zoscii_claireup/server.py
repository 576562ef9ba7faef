"""``GET /healthz`` and ``GET /metrics`` on the daemon's port, in a background thread.

A WSGI app on the standard library's server: two read-only endpoints polled every few
seconds do not need a framework, and prometheus-client brings the metrics app.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from zosciimq.core import DataDir

log = logging.getLogger(__name__)

StartResponse = Callable[..., object]


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


def make_app(data_dir: DataDir, registry: CollectorRegistry) -> Callable[..., Iterable[bytes]]:
    metrics_app = make_wsgi_app(registry)

    def app(environ: dict, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            return _text(start_response, "405 Method Not Allowed", "use GET\n")
        if path == "/healthz":
            problem = health_problem(data_dir)
            if problem:
                return _text(start_response, "503 Service Unavailable", f"{problem}\n")
            return _text(start_response, "200 OK", "ok\n")
        if path == "/metrics":
            return metrics_app(environ, start_response)
        return _text(start_response, "404 Not Found", "try /healthz or /metrics\n")

    return app


def _text(start_response: StartResponse, status: str, body: str) -> list[bytes]:
    data = body.encode()
    start_response(
        status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(data)))]
    )
    return [data]


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s %s", self.address_string(), format % args)


class HttpServer:
    """The health and metrics server; ``port`` is the bound one (useful with port 0)."""

    def __init__(self, host: str, port: int, app: Callable[..., Iterable[bytes]]) -> None:
        self._server = make_server(
            host, port, app, server_class=_ThreadingServer, handler_class=_QuietHandler
        )
        self.port: int = self._server.server_port
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="claireup-http", daemon=True
        )

    def start(self) -> HttpServer:
        self._thread.start()
        log.info("serving /healthz and /metrics on port %d", self.port)
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
