"""statissa at scale: one Spark computation vs. a plain os.scandir loop over 1M files.

Builds N empty-or-tiny message files across Q queues under $TMPDIR or /tmp (on disk, with
valid names spread over the last two days), then runs each way of computing the
statistics in its own child process, sampling the RSS of the child's whole process tree
(Python driver + JVM + Spark's Python workers) with psutil. Prints one JSON line and
deletes the files.

    .venv/bin/python -m bench.statissa_bench [--files 1000000] [--queues 100] [--keep]
    .venv/bin/python -m bench.statissa_bench --data DIR    # an existing tree, e.g. a kept
                                                            # bench.spark_scale one

The Spark child reports where its time goes: the context's start, the first computation
(which also starts Spark's Python workers) and a second one in the same context.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil

from zosciimq.core.layout import DataDir
from zosciimq.core.names import MessageName, format_stamp


def build(root: Path, files: int, queues: int, now: datetime) -> float:
    """Create the files (sizes 0..63 bytes, sparse) and return how long it took."""
    started = time.monotonic()
    data_dir = DataDir(root)
    data_dir.ensure()
    per_queue, extra = divmod(files, queues)
    span = 2 * 86_400  # name times spread over the last two days
    for q in range(queues):
        directory = data_dir.queue_dir(f"q{q:03d}")
        directory.mkdir()
        count = per_queue + (1 if q < extra else 0)
        for i in range(count):
            at = now - timedelta(seconds=span - (span * i) // max(count, 1))
            name = MessageName(
                stamp=format_stamp(at),
                counter=i % 10_000,
                retention_days=i % 4,
                guid=f"00000000-0000-4000-8000-{q:06d}{i:06d}",
            )
            fd = os.open(directory / str(name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                if i % 64:
                    os.ftruncate(fd, i % 64)
            finally:
                os.close(fd)
        if (q + 1) % 10 == 0:
            print(f"built {q + 1}/{queues} queues", file=sys.stderr, flush=True)
    return time.monotonic() - started


def run_child(mode: str, root: Path, now: float, work: Path) -> dict[str, object]:
    """Run one mode in a child process and sample its process tree's memory meanwhile."""
    command = [
        sys.executable,
        __file__,
        "--child",
        mode,
        "--root",
        str(root),
        "--now",
        str(now),
        "--work",
        str(work),
    ]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    tree = psutil.Process(child.pid)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            try:
                processes = [tree, *tree.children(recursive=True)]
                total = 0
                for process in processes:
                    try:
                        total += process.memory_info().rss
                    except psutil.NoSuchProcess:
                        pass
                peak = max(peak, total)
            except psutil.NoSuchProcess:
                return
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    output, _ = child.communicate()
    done.set()
    sampler.join()
    if child.returncode != 0:
        raise SystemExit(f"{mode} run failed with exit code {child.returncode}")
    result = json.loads(output.strip().splitlines()[-1])
    result["peak_tree_rss_mib"] = round(peak / 2**20, 1)
    return result


def child_main(mode: str, root: Path, now: float, work: Path) -> None:
    from zoscii_statissa.compute import compute_snapshot
    from zoscii_statissa.scan import scan_locally

    data_dir = DataDir(root)
    result: dict[str, object] = {}
    if mode == "spark":
        from functools import partial

        from zoscii_statissa.settings import Settings
        from zoscii_statissa.spark import build_context, spark_scan

        started = time.monotonic()
        context = build_context(Settings(spark_local_dir=work, spark_driver_memory="1g"))
        result["startup_seconds"] = round(time.monotonic() - started, 2)
        scanner = partial(spark_scan, context)
    else:
        scanner = scan_locally
    for run in ("first", "second"):
        started = time.monotonic()
        snapshot = compute_snapshot(scanner, data_dir, now)
        result[f"{run}_run_seconds"] = round(time.monotonic() - started, 2)
    result["messages"] = snapshot.total_messages
    result["bytes"] = snapshot.total_bytes
    result["queues"] = len(snapshot.queues)
    print(json.dumps(result), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1_000_000)
    parser.add_argument("--queues", type=int, default=100)
    parser.add_argument("--keep", action="store_true", help="leave the files in place")
    parser.add_argument("--data", type=Path, help="measure this data directory as it is")
    parser.add_argument("--child", choices=("spark", "python"), help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--now", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(args.child, args.root, args.now, args.work)
        return

    base = Path(tempfile.mkdtemp(prefix="zoscii-statissa-bench-"))  # $TMPDIR, else /tmp
    now = datetime.now(UTC).replace(microsecond=0)
    data = args.data or base / "data"
    try:
        build_seconds = 0.0 if args.data else build(data, args.files, args.queues, now)
        result = {
            "benchmark": "statissa",
            "files": args.files,
            "queues": args.queues,
            "cpus": os.cpu_count(),
            "build_seconds": round(build_seconds, 1),
        }
        for mode in ("python", "spark"):
            print(f"running the {mode} computation", file=sys.stderr, flush=True)
            figures = run_child(mode, data, now.timestamp(), base / "spark")
            if args.data:
                result["files"] = figures["messages"]  # what is there
            elif figures["messages"] != args.files:
                raise SystemExit(f"{mode} counted {figures['messages']} of {args.files} files")
            result[mode] = figures
        print(json.dumps(result), flush=True)
    finally:
        if args.keep and not args.data:
            print(f"kept {base}", file=sys.stderr)
        else:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
