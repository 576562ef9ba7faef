"""One logging set-up for every service: text on a terminal, JSON lines for collectors.

``ZOSCII_LOG_FORMAT=json`` (or ``text``; default: text) and ``ZOSCII_LOG_LEVEL`` choose.
Times are UTC, like the message names, whatever the container's TZ says. A JSON line
carries ``time``, ``level``, ``service``, ``logger``, ``message`` and any of the fields a
caller passes with ``extra=`` (``request_id``, ``action``, ``queue``, ``status``,
``duration_ms``, ``job``...), so a log pipeline can filter without parsing text.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
import time
from collections.abc import Mapping
from typing import Any

from zosciimq.settings import SettingsError, env_str

FORMATS = ("text", "json")
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
DEFAULT_LEVEL = "INFO"
DEFAULT_FORMAT = "text"
# The attributes every LogRecord has; anything else on a record came in through extra=.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}
_NOISY = ("apscheduler", "py4j", "urllib3")


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "time": _utc(record.created),
            "level": record.levelname,
            "service": self.service,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                document[key] = value
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        return json.dumps(document, default=str, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__(f"%(asctime)s %(levelname)s {service} %(name)s: %(message)s")
        self.converter = time.gmtime

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        return _utc(record.created)


def _utc(created: float) -> str:
    return f"{_utc_second(int(created))}.{int(created % 1 * 1000):03d}Z"


@functools.lru_cache(maxsize=4)
def _utc_second(second: int) -> str:
    """A second's text, made once: an access line each request (a few % of a publish)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))


def formatter_for(service: str, log_format: str) -> logging.Formatter:
    return JsonFormatter(service) if log_format == "json" else TextFormatter(service)


def setup_logging(
    service: str, *, level: str = DEFAULT_LEVEL, log_format: str = DEFAULT_FORMAT
) -> None:
    """Configure the root logger once, at the start of a service's main (never on import)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter_for(service, log_format))
    logging.basicConfig(level=level, handlers=[handler], force=True)
    for name in _NOISY:
        logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLogger().level))


def log_settings(env: Mapping[str, str]) -> tuple[str, str]:
    """(level, format) from ``ZOSCII_LOG_LEVEL`` and ``ZOSCII_LOG_FORMAT``, checked."""
    level = env_str(env, "ZOSCII_LOG_LEVEL", DEFAULT_LEVEL).upper()
    if level not in LEVELS:
        raise SettingsError(f"ZOSCII_LOG_LEVEL={level!r}: use one of {', '.join(LEVELS)}")
    log_format = env_str(env, "ZOSCII_LOG_FORMAT", DEFAULT_FORMAT).lower()
    if log_format not in FORMATS:
        raise SettingsError(f"ZOSCII_LOG_FORMAT={log_format!r}: use text or json")
    return level, log_format
