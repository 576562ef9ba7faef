"""The HTTP floor: the smallest request the api answers, from the same kind of client.

Not rated against a ceiling: it is the part of every other latency that is neither disk
nor api logic (loopback, gunicorn, Flask routing, the requests client), printed so the
fetch and publish rows can be read against it.
"""

from __future__ import annotations

import logging

from bench.client import Sessions, healthz_factory
from bench.context import Context
from bench.harness import run_clients
from bench.report import Row

log = logging.getLogger(__name__)


def run(ctx: Context) -> dict[str, object]:
    count = 300 if ctx.quick else 2_000
    data_dir = ctx.fresh_dir("floor")
    with ctx.api(data_dir) as api, Sessions() as sessions:
        log.info("GET /healthz x %d", count)
        timing = run_clients(1, healthz_factory(sessions, api.url), count=count)
    ctx.remove(data_dir)
    scenario = "HTTP floor: GET /healthz, 1 client"
    ctx.results.add(Row(scenario, "requests/s", timing.rate, "req/s"))
    ctx.results.add(Row(scenario, "p50 latency", timing.percentile(50) * 1000, "ms", False))
    ctx.results.add(Row(scenario, "p99 latency", timing.percentile(99) * 1000, "ms", False))
    return {"requests": count}
