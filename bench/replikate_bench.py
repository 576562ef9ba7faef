"""Replication throughput: 10,000 1 KB messages from one api instance to another.

Two real apis under gunicorn on loopback, each with its own data directory. The source
is filled first (several publishing threads), then one replication job follows it to the
end, writing into the target's data directory through the core, as the service does.
Prints one JSON line: messages/s overall, and where the time went per message (fetch
over HTTP, local durable write, pointer save).

    .venv/bin/python bench/replikate_bench.py [--messages 10000] [--size 1024]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "src"), str(REPO / "services" / "replikate")]

from tests.support.api_server import running_api  # noqa: E402
from zoscii_replikate import replicator as replicator_module  # noqa: E402
from zoscii_replikate.metrics import ReplikateMetrics  # noqa: E402
from zoscii_replikate.replicator import Replicator  # noqa: E402
from zoscii_replikate.settings import JobConfig  # noqa: E402
from zosciimq.client import ZosciiClient  # noqa: E402
from zosciimq.core import DataDir  # noqa: E402


def fill(url: str, queue: str, count: int, size: int, threads: int = 8) -> None:
    def publish(n: int) -> None:
        with ZosciiClient(url) as client:
            for _ in range(n):
                client.publish(queue, os.urandom(size), retention_days=1)

    shares = [count // threads + (1 if i < count % threads else 0) for i in range(threads)]
    with ThreadPoolExecutor(threads) as pool:
        for future in [pool.submit(publish, n) for n in shares]:
            future.result()


def timed(totals: dict[str, float], key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            totals[key] += time.perf_counter() - started

    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=1024)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="zoscii-bench-") as tmp:
        source_dir, target_dir = Path(tmp, "source"), Path(tmp, "target")
        with running_api(source_dir) as source_url, running_api(target_dir) as target_url:
            started = time.perf_counter()
            fill(source_url, "bench", args.messages, args.size)
            fill_seconds = time.perf_counter() - started

            job = JobConfig(
                name="bench",
                source_url=source_url,
                source_queue="bench",
                target_queue="mirror",
                max_messages_per_run=args.messages,
            )
            replicator = Replicator(job, DataDir(target_dir), ReplikateMetrics())
            totals: dict[str, float] = defaultdict(float)
            replicator.client.fetch_into = timed(totals, "fetch", replicator.client.fetch_into)
            replicator._write_local = timed(totals, "local_write", replicator._write_local)
            replicator_module.write_pointer = timed(
                totals, "pointer_save", replicator_module.write_pointer
            )
            started = time.perf_counter()
            result = replicator.run()
            seconds = time.perf_counter() - started
            replicator.close()

            with ZosciiClient(target_url) as target:  # the target api serves what arrived
                first = target.fetch("mirror")
            assert result.outcome == "capped" or result.outcome == "caught_up", result
            assert result.messages == args.messages and first is not None

    n = result.messages
    print(
        json.dumps(
            {
                "benchmark": "replikate",
                "messages": n,
                "message_bytes": args.size,
                "seconds": round(seconds, 3),
                "messages_per_s": round(n / seconds, 1),
                "ms_per_message": {
                    key: round(1000 * totals[key] / n, 3)
                    for key in ("fetch", "local_write", "pointer_save")
                },
                "fill_messages_per_s": round(args.messages / fill_seconds, 1),
                "cpus": os.cpu_count(),
            }
        )
    )


if __name__ == "__main__":
    main()
