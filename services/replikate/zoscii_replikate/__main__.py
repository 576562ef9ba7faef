"""``python -m zoscii_replikate``: the service, a one-shot run, or the pointer commands.

python -m zoscii_replikate                 # scheduler + metrics on 9101
python -m zoscii_replikate --once [--job NAME]...   # each job once (cloud schedulers)
python -m zoscii_replikate pointer show JOB
python -m zoscii_replikate pointer reset JOB [--to NAME]
python -m zoscii_replikate check           # validate the configuration, list the jobs
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import sys
from collections.abc import Sequence

from zoscii_replikate import pointer
from zoscii_replikate.service import Service
from zoscii_replikate.settings import ENV_PREFIX, Settings
from zosciimq.core import DataDir
from zosciimq.core.errors import InvalidInput
from zosciimq.settings import SettingsError

EXIT_FAILED = 1
EXIT_CONFIG = 2
EXIT_BUSY = 3


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m zoscii_replikate",
        description="ZOSCII MQ replicator: pull queues from partner servers by pointer.",
    )
    parser.add_argument("--config", help=f"TOML file (default: ${ENV_PREFIX}CONFIG)")
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
        env[ENV_PREFIX + "CONFIG"] = args.config
    try:
        settings = Settings.from_env(env)
        for name in args.jobs or ():
            settings.job(name)
    except SettingsError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    logging.basicConfig(
        level=settings.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.command == "check":
        return _check(settings)
    if args.command == "pointer":
        return _pointer(settings, args)
    return _run(settings, args)


def _check(settings: Settings) -> int:
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
            f"{schedule}, {fetching}, pointer {pointer.state_file_name(job)}"
        )
    if not settings.jobs:
        print("no jobs configured", file=sys.stderr)
        return EXIT_CONFIG
    return 0


def _pointer(settings: Settings, args: argparse.Namespace) -> int:
    data_dir = DataDir(settings.data_dir)
    try:
        job = settings.job(args.job)
        if args.pointer_action == "show":
            print(pointer.show(data_dir, job))
        else:
            print(pointer.reset(data_dir, job, args.to))
    except SettingsError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except InvalidInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except pointer.JobBusy as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BUSY
    return 0


def _run(settings: Settings, args: argparse.Namespace) -> int:
    log = logging.getLogger("zoscii.replikate")
    if args.once and not settings.jobs:
        print("configuration error: no jobs configured", file=sys.stderr)
        return EXIT_CONFIG
    if args.jobs:
        settings = dataclasses.replace(
            settings, jobs=tuple(job for job in settings.jobs if job.name in args.jobs)
        )
    service = Service(settings)
    problem = service.prepare()
    if problem:
        log.error("data directory not usable: %s", problem)
        if args.once:
            return EXIT_FAILED

    def on_signal(signum: int, _frame: object) -> None:
        log.info("received %s", signal.Signals(signum).name)
        service.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        if args.once:
            results = service.run_once()
            return 0 if all(result.ok for result in results) else EXIT_FAILED
        service.serve()
        return 0
    finally:
        service.close()


if __name__ == "__main__":
    sys.exit(main())
