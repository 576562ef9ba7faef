"""statissa as a long-running service: gunicorn (``server.py``) serves the page,
/stats.json, /refresh, /metrics and /healthz, and its one worker computes the figures
every interval (the first at once), until SIGTERM.

Spark, the scheduler and the served figures share the worker process on purpose: the
figures live in memory and are served as they were computed, never recomputed per
request.
"""

from __future__ import annotations

import logging

from zoscii_statissa.server import StatissaApplication
from zoscii_statissa.settings import Settings
from zosciimq.service import EXIT_FAILED, EXIT_OK

log = logging.getLogger(__name__)


def serve(settings: Settings) -> int:
    """Run gunicorn until SIGTERM or SIGINT (exit 0); 1 when it cannot serve (the port
    is taken, the worker cannot boot)."""
    log.info("statissa serving on %s:%d", settings.host, settings.port)
    try:
        StatissaApplication(settings).run()
    except SystemExit as stopped:
        if stopped.code in (0, None):
            return EXIT_OK
        log.error("statissa stopped: gunicorn exited with %s", stopped.code)
        return EXIT_FAILED
    return EXIT_OK
