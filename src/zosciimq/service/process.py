"""Starting and stopping a service process the same way everywhere.

* A setting that cannot be used stops the service before it does anything, with one
  line ``configuration error: <variable>: <why>`` on stderr and exit code 2 (``EXIT_CONFIG``),
  whatever the service.
* SIGTERM and SIGINT only set an event (``StopSignal``): the service finishes what is in
  hand (a file, a message, a batch) and exits, as an orchestrator expects.
"""

from __future__ import annotations

import importlib.metadata
import logging
import signal
import sys
import threading
from collections.abc import Callable
from typing import NoReturn, TypeVar

from zosciimq.settings import SettingsError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_CONFIG = 2

T = TypeVar("T")
log = logging.getLogger(__name__)


def version() -> str:
    """The installed zosciimq's version (the source tree's when it is not installed)."""
    try:
        return importlib.metadata.version("zosciimq")
    except importlib.metadata.PackageNotFoundError:
        from zosciimq import __version__

        return __version__


def settings_or_exit(load: Callable[[], T]) -> T:
    """``load()``, or exit 2 with the reason on stderr (logging may not be set up yet)."""
    try:
        return load()
    except SettingsError as exc:
        _config_exit(exc)


def _config_exit(exc: SettingsError) -> NoReturn:
    print(f"configuration error: {exc}", file=sys.stderr)
    raise SystemExit(EXIT_CONFIG)


class StopSignal(threading.Event):
    """Set by SIGTERM or SIGINT once ``install()`` ran (in the main thread)."""

    def install(self) -> StopSignal:
        for number in (signal.SIGTERM, signal.SIGINT):
            signal.signal(number, self._on_signal)
        return self

    def _on_signal(self, number: int, frame: object) -> None:
        log.info("received %s: stopping", signal.Signals(number).name)
        self.set()
