"""gunicorn configuration for the api, driven by the same typed settings as the app.

``ZOSCII_API_SERVER=threads`` (the default): gthread workers, a thread per request, so a
slow 1 GB upload never stalls the worker's heartbeat. ``loop``: gunicorn's asgi worker,
publishes gathered on its event loop and everything else in a pool of threads
(``zoscii_api.asgi``). Several processes either way, so one crash costs only its own
requests.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

from zoscii_api.balance import Spread
from zoscii_api.settings import ApiSettings

_settings = ApiSettings.from_env()

# prometheus-client picks its multiprocess mode from this variable at import time, so it
# must be set here, before any worker imports the app.
_metrics_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR") or tempfile.mkdtemp(
    prefix="zoscii-api-metrics-"
)
os.environ["PROMETHEUS_MULTIPROC_DIR"] = _metrics_dir

# The workers' connection counts, shared with them by fork: the least busy takes the next
# connection (zoscii_api.balance).
_spread = Spread(slots=max(8, 2 * _settings.workers))

bind = [_settings.bind]
workers = _settings.workers
threads = _settings.threads
if _settings.server == "loop":
    worker_class = "zoscii_api.gunicorn_worker.LoopWorker"  # asgi + a head deadline
    wsgi_app = "zoscii_api.app:create_asgi_app()"
    worker_connections = 1000  # a connection costs the loop a socket, not a thread
    asgi_lifespan = "on"  # the app stops its thread pools on shutdown
else:
    worker_class = "zoscii_api.gunicorn_worker.ThreadWorker"  # gthread + a head deadline
    wsgi_app = "zoscii_api.app:create_app()"
timeout = _settings.timeout_seconds
graceful_timeout = 30
keepalive = 5
limit_request_line = 8190  # the most gunicorn allows: GET publishes carry msg in the URL
limit_request_fields = 100
limit_request_field_size = 8190
accesslog = "-"
errorlog = "-"
loglevel = _settings.log[0].lower()  # ZOSCII_LOG_LEVEL, checked
logger_class = "zoscii_api.logs.ApiLogger"  # shared format; no query strings (messages)
http_parser = "auto"  # gunicorn's C parser (gunicorn[fast]) when installed, else Python
# The loop server's event loop: asyncio's own, even where uvloop is installed (gunicorn's
# "auto" would take it). Under uvloop, gunicorn's C parser cut keep-alive connections: a
# request of more than 64 KiB that arrived before the previous one's bookkeeping ended
# was taken for a pipelined tail too long to keep, and the connection closed (wrk, 100 KB
# bodies: 47-118 resets in 3 s; none on asyncio's loop). docs/benchmarks.md.
asgi_loop = "asyncio"
control_socket_disable = True  # no runtime-control socket in $HOME: unused, one less door
if _settings.tls_cert:  # HTTPS served by gunicorn itself; a reverse proxy is the other way
    certfile, keyfile = _settings.tls_cert, _settings.tls_key or None


def on_starting(server: object) -> None:
    """Start with empty metrics files: stale ones from a previous run would add up."""
    shutil.rmtree(_metrics_dir, ignore_errors=True)
    os.makedirs(_metrics_dir, exist_ok=True)


def pre_fork(server: object, worker: Any) -> None:
    """Give the worker about to be forked its slot of the shared connection counts."""
    worker.spread, worker.spread_slot = _spread, _spread.claim()


def child_exit(server: object, worker: Any) -> None:
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)
    _spread.release(getattr(worker, "spread_slot", -1))
