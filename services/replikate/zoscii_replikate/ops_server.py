"""The operations port (9101): ``/metrics`` for Prometheus and ``/healthz``.

Health is about this container: 503 when the data directory is missing or not
writable. A partner's server being down is not a reason to restart the replicator;
it shows in the job details of the reply and in the metrics.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

StartResponse = Callable[..., Any]


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # scrapes every few seconds would drown the useful log lines


def make_app(
    exposition: Callable[[], tuple[bytes, str]],
    health: Callable[[], tuple[bool, dict[str, Any]]],
) -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            body, content_type = exposition()
            start_response("200 OK", [("Content-Type", content_type)])
            return [body]
        if path == "/healthz":
            ok, details = health()
            body = (json.dumps(details, separators=(",", ":")) + "\n").encode()
            status = "200 OK" if ok else "503 Service Unavailable"
            start_response(status, [("Content-Type", "application/json")])
            return [body]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found: try /metrics or /healthz\n"]

    return app


class OpsServer:
    def __init__(self, host: str, port: int, app: Callable[..., Iterable[bytes]]) -> None:
        self.httpd = make_server(
            host, port, app, server_class=_ThreadingWSGIServer, handler_class=_QuietHandler
        )
        self.port = self.httpd.server_port
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, name="ops-http", daemon=True
        )

    def start(self) -> OpsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
