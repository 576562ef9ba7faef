"""``python -m zoscii_zmq [--data-dir PATH]``: the ZeroMQ gateway.

Settings (a bad one: exit 2), logging, signals, then the service (``service.py``) until
SIGTERM or SIGINT; exit 0 after a clean stop, 1 when an endpoint cannot be bound.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from zoscii_zmq.service import Service
from zoscii_zmq.settings import Settings
from zosciimq.service import StopSignal, settings_or_exit, setup_logging, version


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m zoscii_zmq",
        description="Serve zbroker's zpipes clients and ØMQ sockets from ZOSCII MQ queues.",
    )
    parser.add_argument("--version", action="version", version=f"zoscii-zmq {version()}")
    parser.add_argument(
        "--data-dir", metavar="PATH", type=Path, help="data directory (default: $ZOSCII_DATA_DIR)"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    settings = settings_or_exit(lambda: Settings.from_env().with_overrides(data_dir=args.data_dir))
    level, log_format = settings.log
    setup_logging("zmq", level=level, log_format=log_format)
    stop = StopSignal().install()
    return Service(settings, stop).serve()


if __name__ == "__main__":
    sys.exit(main())
