"""``python -m zoscii_live [--data-dir PATH] [--port N]``: the live service.

Settings (a bad one: exit 2), logging, signals, then the service (``service.py``) until
SIGTERM or SIGINT; exit 0 after a clean stop, 1 when the port cannot be bound.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from zoscii_live.service import Service
from zoscii_live.settings import LiveSettings
from zosciimq.service import StopSignal, settings_or_exit, setup_logging, version


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m zoscii_live",
        description="Serve waiting fetches and consumes, Server-Sent Events and WebSocket "
        "streams of ZOSCII MQ queues from one event loop.",
    )
    parser.add_argument("--version", action="version", version=f"zoscii-live {version()}")
    parser.add_argument(
        "--data-dir", metavar="PATH", type=Path, help="data directory (default: $ZOSCII_DATA_DIR)"
    )
    parser.add_argument(
        "--port", type=int, metavar="N", help="port (default: $ZOSCII_LIVE_PORT or 8081)"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    settings = settings_or_exit(
        lambda: LiveSettings.from_env().with_overrides(data_dir=args.data_dir, port=args.port)
    )
    level, log_format = settings.log
    setup_logging("live", level=level, log_format=log_format)
    stop = StopSignal().install()
    return Service(settings, stop).serve()


if __name__ == "__main__":
    sys.exit(main())
