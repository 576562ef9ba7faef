"""The api's log lines, through gunicorn: the shared set-up (text, or JSON lines with
``ZOSCII_LOG_FORMAT=json``) and an access line without the query string.

gunicorn's own access line is built from a dictionary of every request and response
header and environ variable (about 60 us per request here) and records the whole query
string, which for a GET publish is the message itself, and for any request may hold a
nonce or a credential. This line has the client, method, path, the action and queue the
endpoint recognised, status, bytes sent, duration and the request id; in JSON each of
those is a field of its own. Health checks and scrapes are not logged. The client is the
peer, or behind a proxy in ``ZOSCII_TRUSTED_PROXIES`` the address it forwarded (the one
the rate limit and the admin check use, ``zosciimq.addresses``): a proxy's own
address in every line would say nothing.
"""

from __future__ import annotations

import logging
import os
from datetime import timedelta
from typing import Any

from gunicorn import glogging

from zoscii_api.context import KEY as CONTEXT
from zoscii_api.settings import ApiSettings
from zosciimq.addresses import ClientAddress
from zosciimq.service.logs import formatter_for, log_settings, setup_logging
from zosciimq.settings import read_env

SERVICE = "api"
QUIET_PATHS = frozenset({"/healthz", "/metrics"})  # polled every few seconds: noise
ACCESS_LINE = (
    '%(client)s "%(method)s %(path)s" %(action)s %(queue)s %(status)s %(bytes)s'
    " %(duration_ms).1fms %(request_id)s"
)


class ApiLogger(glogging.Logger):
    addresses: ClientAddress  # set up by setup(), which gunicorn's Logger.__init__ calls
    written_by_app: bool

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        # The api's own variables only: its access and policy files are the app's to read.
        settings = read_env(ApiSettings, os.environ)
        self.addresses = ClientAddress(settings.trusted_proxies)
        # Under the asgi worker gunicorn's environ is not the app's (no endpoint
        # context): the app writes the lines itself (zoscii_api.asgi).
        self.written_by_app = settings.server == "loop"
        level, log_format = log_settings(os.environ)
        setup_logging(SERVICE, level=level, log_format=log_format)  # the app's own loggers
        formatter = formatter_for(SERVICE, log_format)
        for log in (self.error_log, self.access_log):
            for handler in log.handlers:
                handler.setFormatter(formatter)

    def access(self, resp: Any, req: Any, environ: dict[str, Any], request_time: timedelta) -> None:
        if not self.access_log_enabled or self.written_by_app:
            return
        status = resp.status.split(None, 1)[0] if isinstance(resp.status, str) else resp.status
        write_access(
            self.access_log,
            self.addresses,
            environ,
            int(status) if str(status).isdigit() else status,
            getattr(resp, "sent", None) or 0,
            request_time.total_seconds(),
        )


def access_logger() -> logging.Logger:
    """The logger of access lines: gunicorn's, which its ``accesslog`` setting routes."""
    return logging.getLogger("gunicorn.access")


def write_access(
    log: logging.Logger,
    addresses: ClientAddress,
    environ: dict[str, Any],
    status: int | str,
    sent: int,
    seconds: float,
) -> None:
    """One access line for the request ``environ`` describes (its endpoint context, when
    the protocol endpoint saw it)."""
    if environ.get("PATH_INFO") in QUIET_PATHS or not log.isEnabledFor(logging.INFO):
        return
    context = environ.get(CONTEXT)  # None: not the protocol endpoint's (/openapi.yaml)
    fields = {
        "client": addresses.of_environ(environ) or "-",
        "method": environ.get("REQUEST_METHOD", "-"),
        "path": environ.get("PATH_INFO", "-"),
        "action": context.action if context else "-",
        "queue": (context.queue if context else None) or "-",
        "status": status,
        "bytes": sent,
        "duration_ms": round(seconds * 1000, 1),
        "request_id": context.request_id if context else "-",
    }
    try:
        # Made here rather than by log.info(): that walks the stack for the caller's
        # file and line on every request, which an access line never shows.
        record = log.makeRecord(
            log.name, logging.INFO, __file__, 0, ACCESS_LINE, (fields,), None, extra=fields
        )
        log.handle(record)
    except Exception:
        log.exception("cannot write the access log")
