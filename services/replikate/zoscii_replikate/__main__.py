"""``python -m zoscii_replikate``: the command line, around the service and the pointers.

python -m zoscii_replikate                 # scheduler + metrics on 9101 (service.py)
python -m zoscii_replikate --once [--job NAME]...   # each job once (cloud schedulers)
python -m zoscii_replikate pointer show JOB
python -m zoscii_replikate pointer reset JOB [--to NAME]
python -m zoscii_replikate check           # validate the configuration, list the jobs
python -m zoscii_replikate --version

Exit codes: 0 fine, 1 a job failed (``--once``), 2 a configuration or input error (one
line ``configuration error: ...`` on stderr for a setting), 3 the job is running (reset).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from zoscii_replikate import pointer
from zoscii_replikate.service import Service
from zoscii_replikate.settings import CONFIG_VAR, Settings
from zosciimq.core import DataDir
from zosciimq.errors import InvalidInput
from zosciimq.service import (
    EXIT_CONFIG,
    EXIT_FAILED,
    EXIT_OK,
    StopSignal,
    settings_or_exit,
    setup_logging,
    version,
)
from zosciimq.settings import SettingsError

EXIT_BUSY = 3  # pointer reset while the job runs somewhere

log = logging.getLogger(__package__)  # run with -m, where __name__ is "__main__"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m zoscii_replikate",
        description="ZOSCII MQ replicator: pull queues from partner servers by pointer.",
    )
    parser.add_argument("--version", action="version", version=f"zoscii-replikate {version()}")
    parser.add_argument("--config", help=f"TOML file (default: ${CONFIG_VAR})")
    parser.add_argument("--once", action="store_true", help="run each job once and exit")
    parser.add_argument(
        "--job", action="append", dest="jobs", metavar="NAME", help="only this job (repeatable)"
    )
    commands = parser.add_subparsers(dest="command")
    commands.add_parser("check", help="validate the configuration and list the jobs")
    pointer_parser = commands.add_parser("pointer", help="show or reset a job's pointer")
    actions = pointer_parser.add_subparsers(dest="pointer_action", required=True)
    show = actions.add_parser("show", help="print the job's pointer file and pointer")
    show.add_argument("job")
    reset = actions.add_parser("reset", help="set the pointer (empty: from the first message)")
    reset.add_argument("job")
    reset.add_argument("--to", default="", metavar="NAME", help="a message name (default: empty)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    env = dict(os.environ)
    if args.config:
        env[CONFIG_VAR] = args.config
    settings = settings_or_exit(lambda: _settings(env, args))
    level, log_format = settings.log
    setup_logging("replikate", level=level, log_format=log_format)
    if args.command == "check":
        return _check(settings)
    if args.command == "pointer":
        return _pointer(settings, args)
    return _run(settings, once=args.once)


def _settings(env: dict[str, str], args: argparse.Namespace) -> Settings:
    """The settings, with only the ``--job`` jobs; ``--once`` needs one at least."""
    settings = Settings.from_env(env).only(args.jobs)
    if args.once and not settings.jobs:
        raise SettingsError("no jobs configured")
    return settings


def _check(settings: Settings) -> int:
    data_dir = DataDir(settings.data_dir)
    print(f"config: {settings.config_path or '(none)'}; data dir: {settings.data_dir}")
    for job in settings.jobs:
        schedule = f"cron '{job.cron}'" if job.cron else f"every {job.interval_seconds:g} s"
        fetching = (
            "single fetches"
            if job.batch_count == 1 or job.mode == "original"
            else f"batches of up to {job.batch_count}"
        )
        if job.wait_seconds:
            fetching += f", waiting {job.wait_seconds:g} s when caught up"
        print(
            f"{job.name}: {job.source_url} queue {job.source_queue} -> {job.target_label}, "
            f"{schedule}, {fetching}, pointer {pointer.pointer_path(data_dir, job).name}"
        )
    if not settings.jobs:
        print("no jobs configured", file=sys.stderr)
        return EXIT_CONFIG
    return EXIT_OK


def _pointer(settings: Settings, args: argparse.Namespace) -> int:
    job = settings_or_exit(lambda: settings.job(args.job))
    data_dir = DataDir(settings.data_dir)
    try:
        if args.pointer_action == "show":
            print(pointer.show(data_dir, job))
        else:
            print(pointer.reset(data_dir, job, args.to))
    except InvalidInput as exc:  # a bad --to, or a damaged pointer file to show
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except pointer.JobBusy as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BUSY
    return EXIT_OK


def _run(settings: Settings, *, once: bool) -> int:
    service = Service(settings, stop=StopSignal().install())
    try:
        problem = service.prepare()
        if problem:
            log.error("data directory not usable: %s", problem)
            if once:
                return EXIT_FAILED
        if once:
            results = service.run_once()
            return EXIT_OK if all(result.ok for result in results) else EXIT_FAILED
        service.serve()
        return EXIT_OK
    finally:
        service.close()


if __name__ == "__main__":
    sys.exit(main())
