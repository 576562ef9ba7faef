"""``python -m zoscii_claireup [--once] [--dry-run] [--schedule CRON] [--data-dir PATH]``."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from zoscii_claireup.service import EXIT_FAILED, Daemon, run_once
from zoscii_claireup.settings import Settings
from zosciimq.settings import SettingsError

log = logging.getLogger("zoscii_claireup")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m zoscii_claireup",
        description="Delete messages whose retention has passed, old nonce markers and "
        "upload leftovers (ZOSCII MQ retention cleaner).",
    )
    parser.add_argument(
        "--once", action="store_true", help="run once now and exit (for cloud schedulers)"
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="delete nothing; print '<bytes>\\t<path>' of what would be deleted on stdout",
    )
    parser.add_argument(
        "--schedule",
        metavar="CRON",
        help="5-field cron expression in UTC (default: $ZOSCII_CLAIREUP_SCHEDULE or '0 0 * * *')",
    )
    parser.add_argument(
        "--data-dir", metavar="PATH", type=Path, help="data directory (default: $ZOSCII_DATA_DIR)"
    )
    return parser.parse_args(argv)


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    formatter = logging.Formatter(
        "%(asctime)s.%(msecs)03dZ %(levelname)s %(name)s: %(message)s", "%Y-%m-%dT%H:%M:%S"
    )
    formatter.converter = time.gmtime  # log times in UTC like the names, whatever TZ says
    handler.setFormatter(formatter)
    logging.basicConfig(level=level, handlers=[handler], force=True)
    logging.getLogger("apscheduler").setLevel(logging.WARNING)


def install_stop_handlers(stop: threading.Event) -> None:
    """SIGTERM/SIGINT end a run within one file; the handler only sets the event."""

    def handler(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        settings = Settings.from_env().with_overrides(
            schedule=args.schedule, data_dir=args.data_dir, dry_run=args.dry_run
        )
    except SettingsError as exc:
        configure_logging("INFO")
        log.error("configuration error: %s", exc)
        return EXIT_FAILED
    configure_logging(settings.log_level)
    stop = threading.Event()
    install_stop_handlers(stop)
    if args.once:
        return run_once(settings, stop)
    return Daemon(settings, stop).serve()


if __name__ == "__main__":
    sys.exit(main())
