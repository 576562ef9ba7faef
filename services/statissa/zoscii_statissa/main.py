"""Process wiring: settings, Spark, the scheduler and the HTTP server in one process."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import signal
import sys
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from types import FrameType

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger
from werkzeug.serving import make_server

from zoscii_statissa.compute import compute_snapshot
from zoscii_statissa.service import StatsService
from zoscii_statissa.settings import Settings
from zoscii_statissa.spark import SparkScanner
from zoscii_statissa.web import create_app
from zosciimq.core.layout import DataDir
from zosciimq.core.queues import utc_now

log = logging.getLogger("zoscii_statissa")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m zoscii_statissa",
        description="Queue and store statistics computed with Spark, served to Prometheus.",
    )
    parser.add_argument("--once", action="store_true", help="compute once, print the JSON, exit")
    parser.add_argument("--data-dir", help="data directory (default: $ZOSCII_DATA_DIR or /data)")
    parser.add_argument(
        "--port", type=int, help="HTTP port (default: $ZOSCII_STATISSA_PORT or 9103)"
    )
    return parser.parse_args(argv)


def apply_args(settings: Settings, args: argparse.Namespace) -> Settings:
    if args.data_dir:
        core = dataclasses.replace(settings.core, data_dir=Path(args.data_dir))
        settings = dataclasses.replace(settings, core=core)
    if args.port is not None:
        settings = dataclasses.replace(settings, port=args.port)
    return settings


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no access log line per scrape
    args = parse_args(argv)
    settings = apply_args(Settings.from_env(), args)
    data_dir = DataDir(settings.data_dir)
    scanner = SparkScanner(settings)
    try:
        if args.once:
            return run_once(scanner, data_dir)
        return serve(settings, scanner, data_dir)
    finally:
        scanner.stop()


def run_once(scanner: SparkScanner, data_dir: DataDir) -> int:
    try:
        snapshot = compute_snapshot(scanner, data_dir, utc_now().timestamp())
    except Exception:
        log.exception("statistics run failed")
        return 1
    json.dump(snapshot.to_dict(), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


def serve(settings: Settings, scanner: SparkScanner, data_dir: DataDir) -> int:
    service = StatsService(partial(compute_snapshot, scanner, data_dir), utc_now)
    scheduler = BackgroundScheduler(timezone=UTC)
    scheduler.add_job(
        service.refresh_quietly,
        IntervalTrigger(seconds=settings.interval_seconds, timezone=UTC),
        id="statistics",
        next_run_time=datetime.now(UTC),  # the first run starts at once
        max_instances=1,
        coalesce=True,
    )
    server = make_server(settings.host, settings.port, create_app(service, data_dir), threaded=True)

    def stop(signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    scheduler.start()
    log.info(
        "statissa serving on %s:%d, data %s, every %ds, Spark master %s",
        settings.host,
        settings.port,
        data_dir.root,
        settings.interval_seconds,
        settings.spark_master,
    )
    try:
        server.serve_forever()
    except (KeyboardInterrupt, SystemExit):
        log.info("stopping")
    finally:
        server.server_close()
        scanner.cancel()  # the run in progress fails fast; its thread then ends
        scheduler.shutdown(wait=False)
    return 0
