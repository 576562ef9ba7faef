"""Publish 1 KB messages from 1 and 8 keep-alive clients, against durable writes without HTTP.

Each concurrency is measured three ways for the same time on the same disk: through the
api, through the core in this process (no HTTP), and as the ceiling (the bare syscalls
of a durable write from as many threads: the physical one of ``bench.ceilings``, a
flush of the queue's preallocated log and the files written unflushed).
"""

from __future__ import annotations

import logging
import os

from bench import core_ops
from bench.ceilings import wal_write_factory
from bench.client import Sessions, publish_factory
from bench.context import PAYLOAD_1K, Context
from bench.harness import Timing, run_clients
from bench.report import Row
from zosciimq.core.layout import DataDir

log = logging.getLogger(__name__)

CONCURRENCY = (1, 8)
CEILING_LABEL = "log pwrite+fdatasync, then create+write+rename+index append, Python threads"


def run(ctx: Context) -> dict[str, object]:
    seconds = 3.0 if ctx.quick else 15.0
    data_dir = ctx.fresh_dir("publish")
    details: dict[str, object] = {"seconds_per_run": seconds}
    with ctx.api(data_dir) as api, Sessions() as sessions:
        for clients in CONCURRENCY:
            queue = f"bench-c{clients}"
            log.info("publish: %d client(s) for %.0f s", clients, seconds)
            figure = run_clients(
                clients, publish_factory(sessions, api.url, queue, PAYLOAD_1K), seconds=seconds
            )
            _check_on_disk(DataDir(data_dir), queue, figure.operations)
            log.info("publish through the core, no HTTP: %d thread(s)", clients)
            core_dir = DataDir(data_dir / "core")
            core = run_clients(
                clients, core_ops.publish_factory(core_dir, queue, PAYLOAD_1K), seconds=seconds
            )
            _check_on_disk(core_dir, queue, core.operations)
            log.info("publish ceiling: %d thread(s)", clients)
            ceiling_dir = data_dir / "ceiling"
            ceiling = run_clients(
                clients,
                wal_write_factory(ceiling_dir, f"c{clients}", PAYLOAD_1K),
                seconds=seconds,
            )
            ctx.shared[f"durable_write_rate_{clients}"] = ceiling.rate
            _rows(ctx, clients, figure, core, ceiling)
            details[f"{clients}_clients"] = {
                "published": figure.operations,
                "core_published": core.operations,
                "ceiling_files": ceiling.operations,
            }
    ctx.remove(data_dir)
    return details


def _rows(ctx: Context, clients: int, figure: Timing, core: Timing, ceiling: Timing) -> None:
    scenario = f"publish 1 KB, {clients} client{'s' if clients > 1 else ''}"
    add = ctx.results.add
    add(Row(scenario, "messages/s", figure.rate, "msg/s", True, ceiling.rate, CEILING_LABEL))
    for q in (50, 99):
        add(
            Row(
                scenario,
                f"p{q} latency",
                figure.percentile(q) * 1000,
                "ms",
                False,
                ceiling.percentile(q) * 1000,
                f"p{q} of one durable write (log flush), same threads",
            )
        )
    add(
        Row(
            f"{scenario}: core only, no HTTP",
            "messages/s",
            core.rate,
            "msg/s",
            True,
            ceiling.rate,
            CEILING_LABEL,
            note=f"p50 {core.percentile(50) * 1000:.2g} ms",
        )
    )


def _check_on_disk(data_dir: DataDir, queue: str, acknowledged: int) -> None:
    """Every acknowledged publish is a file: a benchmark of lost messages would be no figure."""
    on_disk = sum(1 for name in os.listdir(data_dir.queue_dir(queue)) if name.endswith(".bin"))
    if on_disk != acknowledged:
        raise RuntimeError(f"{acknowledged} publishes acknowledged but {on_disk} files in {queue}")
