"""``python -m zoscii_statissa [--once] [--data-dir PATH] [--port N]``.

The command line: settings (a bad one: exit 2), logging, signals, then either one
computation printed as JSON (``--once``) or the long-running service (``service.py``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from zoscii_statissa.compute import compute_snapshot
from zoscii_statissa.settings import Settings
from zoscii_statissa.spark import SparkScanner
from zosciimq.core.clock import utc_now
from zosciimq.core.layout import DataDir
from zosciimq.service import (
    EXIT_FAILED,
    EXIT_OK,
    settings_or_exit,
    setup_logging,
    version,
)
from zosciimq.settings import CoreSettings

log = logging.getLogger(__package__)  # run with -m, where __name__ is "__main__"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    port = {item.name: item.default for item in dataclasses.fields(Settings)}["port"]
    data_dir = {item.name: item.default for item in dataclasses.fields(CoreSettings)}["data_dir"]
    parser = argparse.ArgumentParser(
        prog="python -m zoscii_statissa",
        description="Queue, store and consumer-group statistics computed with Spark, "
        "served by gunicorn (page, JSON, Prometheus).",
    )
    parser.add_argument("--version", action="version", version=f"zoscii-statissa {version()}")
    parser.add_argument("--once", action="store_true", help="compute once, print the JSON, exit")
    parser.add_argument(
        "--data-dir", help=f"data directory (default: $ZOSCII_DATA_DIR or {data_dir})"
    )
    parser.add_argument(
        "--port", type=int, help=f"HTTP port (default: $ZOSCII_STATISSA_PORT or {port})"
    )
    return parser.parse_args(argv)


def apply_args(settings: Settings, args: argparse.Namespace) -> Settings:
    if args.data_dir:
        core = dataclasses.replace(settings.core, data_dir=Path(args.data_dir))
        settings = dataclasses.replace(settings, core=core)
    if args.port is not None:
        settings = dataclasses.replace(settings, port=args.port)
    return settings


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    settings = settings_or_exit(lambda: apply_args(Settings.from_env(), args))
    level, log_format = settings.log
    setup_logging("statissa", level=level, log_format=log_format)
    if not args.once:  # gunicorn's master; Spark starts in its worker (server.py)
        # Imported here: gunicorn and Flask cost a one-shot run (--once) time it never uses.
        from zoscii_statissa.service import serve

        return serve(settings)
    scanner = SparkScanner(settings)
    try:  # SIGTERM keeps its default: a one-shot computation simply ends
        return run_once(scanner, DataDir(settings.data_dir))
    finally:
        scanner.stop()


def run_once(scanner: SparkScanner, data_dir: DataDir) -> int:
    try:
        snapshot = compute_snapshot(scanner, data_dir, utc_now().timestamp())
    except Exception:
        log.exception("statistics run failed")
        return EXIT_FAILED
    json.dump(snapshot.to_dict(), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
