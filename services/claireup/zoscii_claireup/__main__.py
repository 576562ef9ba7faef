"""``python -m zoscii_claireup [--once] [--dry-run] [--schedule CRON] [--data-dir PATH]``.

The command line: settings (a bad one: exit 2), logging, signals, then either one run
now (``--once``, for cloud schedulers) or the long-running service (``service.py``).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from zoscii_claireup.cleaner import Clock, build_cleaner
from zoscii_claireup.report import RunReport, log_summary
from zoscii_claireup.service import Service
from zoscii_claireup.settings import Settings
from zosciimq.core.clock import utc_now
from zosciimq.service import (
    EXIT_FAILED,
    EXIT_OK,
    StopSignal,
    settings_or_exit,
    setup_logging,
    version,
)

log = logging.getLogger(__package__)  # run with -m, where __name__ is "__main__"

EXIT_INTERRUPTED = 143  # 128 + SIGTERM, what a shell reports for a terminated job


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    defaults = {item.name: item.default for item in dataclasses.fields(Settings)}
    parser = argparse.ArgumentParser(
        prog="python -m zoscii_claireup",
        description="Delete messages whose retention has passed, old nonce markers and "
        "upload leftovers, and tidy consumer-group state (ZOSCII MQ retention cleaner).",
    )
    parser.add_argument("--version", action="version", version=f"zoscii-claireup {version()}")
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
        help="5-field cron expression in UTC "
        f"(default: $ZOSCII_CLAIREUP_SCHEDULE or {defaults['schedule']!r})",
    )
    parser.add_argument(
        "--data-dir", metavar="PATH", type=Path, help="data directory (default: $ZOSCII_DATA_DIR)"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    settings = settings_or_exit(
        lambda: Settings.from_env().with_overrides(
            schedule=args.schedule, data_dir=args.data_dir, dry_run=args.dry_run
        )
    )
    level, log_format = settings.log
    setup_logging("claireup", level=level, log_format=log_format)
    stop = StopSignal().install()
    if args.once:
        return run_once(settings, stop)
    return Service(settings, stop).serve()


def run_once(settings: Settings, stop: threading.Event, *, clock: Clock = utc_now) -> int:
    """One run; its metrics go to the log as a summary instead of being served."""
    report = build_cleaner(settings, stop, clock=clock).run(dry_run=settings.dry_run)
    log_summary(report, log)
    return exit_code(report)


def exit_code(report: RunReport) -> int:
    if report.interrupted:
        return EXIT_INTERRUPTED
    return EXIT_OK if report.outcome == "success" else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
