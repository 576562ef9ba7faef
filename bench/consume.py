"""Consume a whole queue by pointer, against reading the same files in order from Python.

The queue is filled on disk; the api's first fetch builds the index (timed apart). The
same walk through the core in this process, without HTTP, is shown beside it.
"""

from __future__ import annotations

import logging

import requests

from bench import core_ops
from bench.ceilings import read_in_order_factory
from bench.client import Sessions, batch_consume_factory, consume_factory, fetch
from bench.context import PAYLOAD_1K, Context
from bench.fill import fill_queue
from bench.harness import run_clients, time_once
from bench.report import Row
from zosciimq.core.layout import DataDir

log = logging.getLogger(__name__)

QUEUE = "consume"
BATCH = 100
CEILING_LABEL = "open+read of the same files in order, 1 thread"


def run(ctx: Context) -> dict[str, object]:
    count = 1_000 if ctx.quick else 20_000
    data_dir = ctx.fresh_dir("consume")
    layout = DataDir(data_dir)
    names = fill_queue(layout, QUEUE, count, PAYLOAD_1K)
    scenario = f"consume {count:,} x 1 KB by pointer"
    with ctx.api(data_dir) as api, Sessions() as sessions:
        first: list[str] = []
        with requests.Session() as session:
            rebuild = time_once(lambda: first.append(fetch(session, api.url, QUEUE, "")[0]))
        if first != names[:1]:
            raise RuntimeError(f"first fetch gave {first}, expected {names[0]}")
        log.info("consume: %d messages by pointer", count - 1)
        pointer = [names[0]]
        figure = run_clients(1, consume_factory(sessions, api.url, QUEUE, pointer), count=count - 1)
        if pointer[0] != names[-1]:
            raise RuntimeError(f"consumer stopped at {pointer[0]}, expected {names[-1]}")
        log.info("consume: the same messages in batches of %d (count=)", BATCH)
        pointer, got = [names[0]], [0]
        batches = run_clients(
            1,
            batch_consume_factory(sessions, api.url, QUEUE, pointer, BATCH, got),
            count=-(-(count - 1) // BATCH),
        )
        if pointer[0] != names[-1] or got[0] != count - 1:
            raise RuntimeError(f"batch consumer got {got[0]} messages up to {pointer[0]}")
    log.info("consume through the core, no HTTP")
    pointer = [names[0]]
    core = run_clients(1, core_ops.consume_factory(layout, QUEUE, pointer), count=count - 1)
    if pointer[0] != names[-1]:
        raise RuntimeError(f"core consumer stopped at {pointer[0]}, expected {names[-1]}")
    paths = [layout.queue_dir(QUEUE) / name for name in names]
    ceiling = run_clients(1, read_in_order_factory(paths), count=count)
    add = ctx.results.add
    add(Row(scenario, "messages/s", figure.rate, "msg/s", True, ceiling.rate, CEILING_LABEL))
    add(
        Row(
            scenario,
            "p50 latency",
            figure.percentile(50) * 1000,
            "ms",
            False,
            ceiling.percentile(50) * 1000,
            "p50 of one open+read",
        )
    )
    add(
        Row(
            f"{scenario}, batches of {BATCH} (count=)",
            "messages/s",
            got[0] / batches.seconds,
            "msg/s",
            True,
            ceiling.rate,
            CEILING_LABEL,
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
        )
    )
    ctx.remove(data_dir)
    return {"messages": count, "first_fetch_seconds": rebuild}
