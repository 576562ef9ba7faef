"""``python -m tests.support.claireup_served``: claireup's service exactly as
``python -m zoscii_claireup`` runs it (settings from the environment, the ops port with
``/metrics``, the cron schedule, SIGTERM), plus one run as soon as it starts.

The schedule is a 5-field cron expression, a minute apart at best: too coarse for a test
that needs the metrics of a run within seconds.
"""

from __future__ import annotations

import sys

from zoscii_claireup.service import Service
from zoscii_claireup.settings import Settings
from zosciimq.service import StopSignal, settings_or_exit, setup_logging


def main() -> int:
    settings = settings_or_exit(Settings.from_env)
    level, log_format = settings.log
    setup_logging("claireup", level=level, log_format=log_format)
    stop = StopSignal().install()
    service = Service(settings, stop)
    # No trigger: a one-off job, due as soon as serve() starts the scheduler.
    service.scheduler.add_job(service.run_job, id="claireup-at-start", max_instances=1)
    return service.serve()


if __name__ == "__main__":
    sys.exit(main())
