"""One large message (1 GiB, quick: 256 MiB) published and fetched, with the api's peak memory.

The ceiling is a ``dd``-style copy of the same bytes on the same disk: write in 1 MiB
blocks and fsync (what a durable publish must do), then read them back.
"""

from __future__ import annotations

import logging
import os
import time

import requests

from bench.ceilings import dd_copy
from bench.client import OK, RAW, TIMEOUT, BenchError, RepeatedBody
from bench.context import Context
from bench.harness import PeakRss
from bench.report import Row

log = logging.getLogger(__name__)

BLOCK = 1 << 20
QUEUE = "large"


def run(ctx: Context) -> dict[str, object]:
    size = (256 << 20) if ctx.quick else (1 << 30)
    label = f"{size >> 20} MiB" if size < 1 << 30 else f"{size >> 30} GiB"
    scenario = f"one {label} message"
    block = os.urandom(BLOCK)
    data_dir = ctx.fresh_dir("large")
    with ctx.api(data_dir) as api, requests.Session() as session:
        idle = _idle_rss(api.worker_pids())
        with PeakRss(api.worker_pids) as rss:
            log.info("publishing %s", label)
            began = time.perf_counter()
            reply = session.post(
                api.url,
                params={"action": "publish", "q": QUEUE},
                data=RepeatedBody(block, size),
                headers=RAW,
                timeout=TIMEOUT,
            )
            publish_seconds = time.perf_counter() - began
            if reply.status_code != 200 or OK not in reply.content:
                raise BenchError(f"publish failed: {reply.status_code} {reply.text[:300]}")
            log.info("fetching %s", label)
            began = time.perf_counter()
            received = 0
            with session.get(
                api.url, params={"action": "fetch", "q": QUEUE}, stream=True, timeout=TIMEOUT
            ) as fetched:
                if fetched.status_code != 200 or "Content-Disposition" not in fetched.headers:
                    raise BenchError(f"fetch failed: {fetched.status_code}")
                for chunk in fetched.iter_content(BLOCK):
                    received += len(chunk)
            fetch_seconds = time.perf_counter() - began
        if received != size:
            raise BenchError(f"fetched {received} bytes of {size}")
    ctx.remove(data_dir / "queues")
    log.info("ceiling: dd-style copy of %s", label)
    copy = dd_copy(data_dir / "ceiling.bin", (block for _ in range(size // BLOCK)))
    ctx.remove(data_dir)
    add = ctx.results.add
    add(
        Row(
            scenario,
            "publish MB/s",
            size / 1e6 / publish_seconds,
            "MB/s",
            True,
            copy.write_mb_s,
            "write 1 MiB blocks + fsync (dd-style, Python)",
        )
    )
    add(
        Row(
            scenario,
            "fetch MB/s",
            size / 1e6 / fetch_seconds,
            "MB/s",
            True,
            copy.read_mb_s,
            "read it back in 1 MiB blocks (dd-style, Python)",
        )
    )
    add(
        Row(
            scenario,
            "peak RSS of a worker",
            rss.peak_bytes / 1e6,
            "MB",
            False,
            idle / 1e6,
            "the same worker idle: flat memory",
        )
    )
    return {
        "bytes": size,
        "publish_seconds": publish_seconds,
        "fetch_seconds": fetch_seconds,
        "worker_peak_rss_bytes": {str(pid): peak for pid, peak in rss.peaks.items()},
        "worker_idle_rss_bytes": idle,
        "ceiling_write_seconds": copy.write_seconds,
        "ceiling_read_seconds": copy.read_seconds,
    }


def _idle_rss(pids: list[int]) -> int:
    with PeakRss(lambda: pids) as rss:
        time.sleep(0.1)
    return rss.peak_bytes
