"""Replication throughput: 10,000 1 KB messages from one api instance to another.

Two real apis under gunicorn on loopback, each with its own data directory. The source
is filled first (several publishing threads), then one replication job follows it to the
end, writing into the target's data directory through the core, as the service does.
Prints one JSON line per job: messages/s overall, fetch requests, and where the time
went per message (fetch over HTTP in the prefetch thread, overlapped with the rest;
local durable write; pointer save).

    .venv/bin/python -m bench.replikate_bench [--messages 10000] [--size 1024]
        [--batch-count 100 | --single] [--batch-bytes N] [--compare]

``--single`` replicates one message per request (``batch_count`` 1, as against the
original); ``--compare`` replicates the same source twice, single then batched.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tests.support.api_server import running_api
from zoscii_replikate import replicator as replicator_module
from zoscii_replikate.metrics import ReplikateMetrics
from zoscii_replikate.replicator import Replicator
from zoscii_replikate.settings import JobConfig
from zosciimq.client import ZosciiClient
from zosciimq.core import DataDir


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


def replicate(
    source_url: str, target_dir: Path, target_queue: str, args: argparse.Namespace, batch: int
) -> dict[str, Any]:
    """One job following the whole source queue; its figures."""
    job = JobConfig(
        name=f"bench-{target_queue}",
        source_url=source_url,
        source_queue="bench",
        target_queue=target_queue,
        max_messages_per_run=args.messages,
        batch_count=batch,
        batch_bytes=args.batch_bytes,
    )
    replicator = Replicator(job, DataDir(target_dir), ReplikateMetrics())
    totals: dict[str, float] = defaultdict(float)
    replicator._fetch = timed(totals, "fetch", replicator._fetch)  # type: ignore[method-assign]
    replicator._write_local = timed(totals, "local_write", replicator._write_local)  # type: ignore[method-assign]
    original_write_pointer = replicator_module.write_pointer
    replicator_module.write_pointer = timed(totals, "pointer_save", original_write_pointer)
    try:
        started = time.perf_counter()
        result = replicator.run()
        seconds = time.perf_counter() - started
    finally:
        replicator_module.write_pointer = original_write_pointer
        replicator.close()
    assert result.outcome in ("capped", "caught_up"), result
    assert result.messages == args.messages, result
    n = result.messages
    return {
        "benchmark": "replikate",
        "fetch": "single" if batch == 1 else f"batch of up to {batch}",
        "messages": n,
        "message_bytes": args.size,
        "seconds": round(seconds, 3),
        "messages_per_s": round(n / seconds, 1),
        "fetch_requests": int(replicator.metrics.fetches.labels(job.name)._value.get()),
        "ms_per_message": {
            key: round(1000 * totals[key] / n, 3)
            for key in ("fetch", "local_write", "pointer_save")
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--batch-count", type=int, default=100, help="messages per fetch")
    parser.add_argument("--batch-bytes", type=int, default=16 << 20, help="byte budget")
    parser.add_argument("--single", action="store_true", help="one message per fetch")
    parser.add_argument("--compare", action="store_true", help="single, then batched")
    args = parser.parse_args()
    batches = [1, args.batch_count] if args.compare else [1 if args.single else args.batch_count]
    with tempfile.TemporaryDirectory(prefix="zoscii-bench-") as tmp:
        source_dir, target_dir = Path(tmp, "source"), Path(tmp, "target")
        with running_api(source_dir) as source_url, running_api(target_dir) as target_url:
            started = time.perf_counter()
            fill(source_url, "bench", args.messages, args.size)
            fill_seconds = time.perf_counter() - started
            for number, batch in enumerate(batches):
                figures = replicate(source_url, target_dir, f"mirror{number}", args, batch)
                with ZosciiClient(target_url) as target:  # the target api serves what arrived
                    assert target.fetch(f"mirror{number}") is not None
                figures["fill_messages_per_s"] = round(args.messages / fill_seconds, 1)
                figures["cpus"] = os.cpu_count()
                print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
