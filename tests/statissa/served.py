"""``python -m tests.statissa.served``: statissa's gunicorn server exactly as
``python -m zoscii_statissa`` runs it, settings from the environment, but computing with
the plain scan instead of Spark, so tests of the HTTP side need no JVM.

Imported, it gives the tests that start a statissa process (this one, or the real one
with Spark) what they share: a free port, the process started with a data directory,
and ``wait_until`` it answers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import requests

from tests.support.api_server import free_port
from zoscii_statissa.scan import scan_locally
from zoscii_statissa.server import Runtime, StatissaApplication
from zoscii_statissa.settings import Settings
from zosciimq.service import setup_logging

REPO = Path(__file__).resolve().parents[2]
__all__ = ["free_port", "start", "wait_until"]


def wait_until(
    condition: Callable[[], bool], seconds: float, what: str = "not ready", *, pause: float = 0.1
) -> None:
    """Call ``condition`` until it is true (a refused connection counts as false), or
    fail with ``what`` after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            if condition():
                return
        except requests.ConnectionError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not after {seconds}s")
        time.sleep(pause)


def start(data_root: Path, log: Path, **extra: str) -> tuple[subprocess.Popen[bytes], str]:
    """This module as a process on a free loopback port, serving ``data_root`` (the test
    run's own ZOSCII_* variables left out, ``extra`` added), output into ``log``; the
    process and its base URL. Its first computation starts at once, the next in an hour."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZOSCII_")}
    env.update(
        ZOSCII_DATA_DIR=str(data_root),
        ZOSCII_STATISSA_HOST="127.0.0.1",
        ZOSCII_STATISSA_PORT=str(port),
        ZOSCII_STATISSA_INTERVAL_SECONDS="3600",
        **extra,
    )
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.statissa.served"],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return process, f"http://127.0.0.1:{port}"


def main() -> int:
    settings = Settings.from_env()
    setup_logging("statissa", level=settings.log[0], log_format=settings.log[1])
    StatissaApplication(settings, partial(Runtime, scanner=scan_locally)).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
