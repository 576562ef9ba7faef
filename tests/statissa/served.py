"""``python -m tests.statissa.served``: statissa's gunicorn server exactly as
``python -m zoscii_statissa`` runs it, settings from the environment, but computing with
the plain scan instead of Spark, so tests of the HTTP side need no JVM."""

from __future__ import annotations

import sys
from functools import partial

from zoscii_statissa.scan import scan_locally
from zoscii_statissa.server import Runtime, StatissaApplication
from zoscii_statissa.settings import Settings
from zosciimq.service import setup_logging


def main() -> int:
    settings = Settings.from_env()
    setup_logging("statissa", level=settings.log[0], log_format=settings.log[1])
    StatissaApplication(settings, partial(Runtime, scanner=scan_locally)).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
