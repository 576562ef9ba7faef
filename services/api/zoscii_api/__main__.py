"""``python -m zoscii_api [--version]``: the api under gunicorn, as its image runs it.

The api is a WSGI app served by gunicorn with its own configuration file
(``gunicorn.conf.py``: the image's /app/gunicorn.conf.py, or services/api/ in a
checkout), so this is that command with the flag every service has.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from zosciimq.service import version

IMAGE_CONFIG = Path("/app/gunicorn.conf.py")


def gunicorn_config() -> Path | None:
    """The image's configuration, else the one beside the package in a checkout."""
    checkout = Path(__file__).resolve().parents[1] / "gunicorn.conf.py"
    return next((p for p in (IMAGE_CONFIG, checkout) if p.is_file()), None)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m zoscii_api",
        description="The ZOSCII MQ HTTP api (index.php compatible) under gunicorn; "
        "settings from ZOSCII_* variables (.env.example).",
    )
    parser.add_argument("--version", action="version", version=f"zoscii-api {version()}")
    parser.parse_args(argv)
    config = gunicorn_config()
    if config is None:
        print("zoscii_api: gunicorn.conf.py not found (/app, or services/api)", file=sys.stderr)
        return 2
    os.execv(sys.executable, [sys.executable, "-m", "gunicorn", "--config", str(config)])
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
