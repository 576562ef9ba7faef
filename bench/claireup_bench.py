#!/usr/bin/env python3
"""How long one claireup run takes over N message files, and how much memory it needs.

Fills a temporary data directory (under /tmp) with N message files written straight to
disk, spread over queues and the store, a given share of them expired; builds the queue
indexes as a live system would have them; then runs ``python -m zoscii_claireup --once``
as a child process and reports its wall time and peak RSS (getrusage of the child), next
to the peak RSS of a run over an empty directory (the interpreter and imports alone).
Prints one JSON line on stdout; progress goes to stderr. The directory is removed after.

    .venv/bin/python -m bench.claireup_bench --files 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from zosciimq.core import DataDir, MessageName, QueueStore
from zosciimq.core.names import format_stamp

BODY = b"z" * 32


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=100_000, help="message files to create")
    parser.add_argument("--queues", type=int, default=8, help="queues to spread them over")
    parser.add_argument("--store-share", type=float, default=0.2, help="share in the store")
    parser.add_argument("--expired-share", type=float, default=0.5, help="share already expired")
    parser.add_argument("--dry-run", action="store_true", help="time a dry run instead")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the data directory")
    return parser.parse_args()


def fill(data_dir: DataDir, args: argparse.Namespace, now: datetime) -> int:
    """Write the files; returns how many are expired. Streams: no list of names is kept."""
    rng = random.Random(args.seed)
    queues = [f"bench-{number:02d}" for number in range(args.queues)]
    for queue in queues:
        data_dir.queue_dir(queue).mkdir(parents=True, exist_ok=True)
    made_dirs: set[Path] = set()  # at most 36**3 store directories
    expired = 0
    started = time.monotonic()
    for number in range(args.files):
        if rng.random() < args.expired_share:
            published = now - timedelta(days=rng.randint(2, 400), seconds=rng.randint(0, 86_399))
            retention = rng.randint(0, 1)
            expired += 1
        else:
            published = now - timedelta(seconds=rng.randint(0, 20 * 86_400))
            retention = rng.randint(30, 9999)
        name = MessageName(
            format_stamp(published),
            0,
            retention,
            str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        )
        if rng.random() < args.store_share:
            path = data_dir.store_path(str(name), name.store_dirs)
            if path.parent not in made_dirs:
                path.parent.mkdir(parents=True, exist_ok=True)
                made_dirs.add(path.parent)
        else:
            path = data_dir.queue_dir(queues[number % len(queues)]) / str(name)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, BODY)
        os.close(fd)
        if (number + 1) % 100_000 == 0:
            rate = (number + 1) / (time.monotonic() - started)
            print(f"filled {number + 1} files ({rate:.0f}/s)", file=sys.stderr)
    store = QueueStore(data_dir)
    for queue in queues:
        store.rebuild_index(queue)
    return expired


def count_messages(root: Path) -> int:
    count = 0
    stack = [root]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                elif entry.name.endswith(".bin"):
                    count += 1
    return count


def run_claireup(data_dir: Path, dry_run: bool, log_path: Path) -> float:
    env = {
        **os.environ,
        "ZOSCII_DATA_DIR": str(data_dir),
        "ZOSCII_CLAIREUP_PROGRESS_EVERY_SECONDS": "10",
    }
    command = [sys.executable, "-m", "zoscii_claireup", "--once"]
    if dry_run:
        command.append("--dry-run")
    started = time.monotonic()
    with open(log_path, "w") as log, open(os.devnull, "w") as devnull:
        subprocess.run(command, env=env, stdout=devnull, stderr=log, check=True)
    return time.monotonic() - started


def peak_child_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB on Linux


def child_cpu_seconds() -> float:
    """CPU time of the children so far: on a shared machine, steadier than wall time."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    args = parse_args()
    root = Path(tempfile.mkdtemp(prefix="zoscii-claireup-bench-", dir="/tmp"))
    try:
        empty = root / "empty"
        DataDir(empty).ensure()
        run_claireup(empty, args.dry_run, root / "empty.log")
        baseline_rss = peak_child_rss_mib()

        data_dir = DataDir(root / "data")
        data_dir.ensure()
        now = datetime.now(UTC)
        fill_started = time.monotonic()
        expired = fill(data_dir, args, now)
        fill_seconds = time.monotonic() - fill_started
        print(
            f"filled {args.files} files in {fill_seconds:.0f}s; running claireup", file=sys.stderr
        )

        log_path = root / "run.log"
        cpu_before = child_cpu_seconds()
        seconds = run_claireup(data_dir.root, args.dry_run, log_path)
        cpu_seconds = child_cpu_seconds() - cpu_before
        peak_rss = peak_child_rss_mib()
        remaining = count_messages(data_dir.queues) + count_messages(data_dir.store)
        summary = next(
            (line for line in log_path.read_text().splitlines() if "files scanned" in line), ""
        )
        print(summary, file=sys.stderr)
        result = {
            "bench": "claireup",
            "files": args.files,
            "queues": args.queues,
            "expired": expired,
            "remaining": remaining,
            "correct": remaining == (args.files if args.dry_run else args.files - expired),
            "dry_run": args.dry_run,
            "fill_seconds": round(fill_seconds, 1),
            "run_seconds": round(seconds, 2),
            "files_per_second": round(args.files / seconds),
            "cpu_seconds": round(cpu_seconds, 1),
            "cpu_us_per_file": round(cpu_seconds / args.files * 1e6, 1),
            "peak_rss_mib": round(peak_rss, 1),
            "baseline_rss_mib": round(baseline_rss, 1),
        }
        print(json.dumps(result))
        return 0 if result["correct"] else 1
    finally:
        if args.keep:
            print(f"kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
