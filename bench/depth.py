"""Fetch latency at queue depths from 1k to 1M, and the index rebuild a filled volume costs.

The queues are written straight to disk (bench.fill) in one data directory, one queue
per depth; only the two messages that get fetched carry 1 KB, the rest are empty files
(the api reads neither their content nor their size, and empty files delete fast). The
api has no index for them yet, so the first request to each queue rebuilds it from the
directory: that time is reported on its own row. Then one keep-alive client fetches
with a pointer near the end and one in the middle.
"""

from __future__ import annotations

import logging
import time

import requests

from bench import ceilings
from bench.client import Sessions, fetch, fetch_after_factory, healthz_factory
from bench.context import PAYLOAD_1K, Context
from bench.fill import fill_queue
from bench.harness import OperationFactory, Timing, merge, run_clients, time_once
from bench.report import Row
from zosciimq.core.layout import DataDir

log = logging.getLogger(__name__)

FULL_DEPTHS = (1_000, 10_000, 100_000, 1_000_000)
QUICK_DEPTHS = (1_000, 100_000)
ROUNDS = 5


def queue_name(depth: int) -> str:
    return f"depth-{depth}"


def run(ctx: Context) -> dict[str, object]:
    depths = QUICK_DEPTHS if ctx.quick else FULL_DEPTHS
    samples = 300 if ctx.quick else 2_000
    data_dir = ctx.fresh_dir("depth")
    layout = DataDir(data_dir)
    layout.ensure()
    # Only the names the pointers need are kept: (middle, after middle, end-1, end).
    points: dict[int, dict[str, tuple[str, str]]] = {}
    fill_seconds: dict[int, float] = {}
    for depth in depths:
        began = time.perf_counter()
        middle = depth // 2
        fetched = {middle + 1, depth - 1}  # the only messages the api sends
        names = fill_queue(
            layout, queue_name(depth), depth, PAYLOAD_1K, only_at=fetched.__contains__
        )
        fill_seconds[depth] = time.perf_counter() - began
        points[depth] = {
            "near the end": (names[depth - 2], names[depth - 1]),
            "in the middle": (names[middle], names[middle + 1]),
        }
        del names
    p50: dict[tuple[int, str], float] = {}
    with ctx.api(data_dir) as api, Sessions() as sessions:
        for depth in depths:
            _rebuild_row(ctx, api.url, layout, depth)
        healthz = healthz_factory(sessions, api.url)
        for depth in depths:
            for where, (after, expect) in points[depth].items():
                log.info("fetch latency: depth %d, pointer %s, %d samples", depth, where, samples)
                fetch_one = fetch_after_factory(sessions, api.url, queue_name(depth), after, expect)
                figure, floor = interleaved(fetch_one, healthz, samples)
                _latency_rows(ctx, depth, where, figure, floor)
                p50[depth, where] = figure.percentile(50)
    low, high = depths[0], depths[-1]
    for where in ("near the end", "in the middle"):
        ratio = p50[high, where] / p50[low, where]
        ctx.results.add(
            Row(
                f"fetch depth {_k(high)} / depth {_k(low)}",
                f"p50 ratio, pointer {where}",
                ratio,
                "x",
                False,
                1.0,
                "flat: depth costs nothing",
            )
        )
    _walk_ceilings(ctx, layout, high)
    ctx.remove(data_dir)
    return {"samples_per_point": samples, "fill_seconds": fill_seconds}


def interleaved(
    figure: OperationFactory, floor: OperationFactory, samples: int
) -> tuple[Timing, Timing]:
    """Samples of a figure and of its floor taken in alternating rounds, so that a burst
    of load from elsewhere on the machine lands on both instead of on one of them."""
    figures, floors = [], []
    share = max(1, samples // ROUNDS)
    for _ in range(ROUNDS):
        figures.append(run_clients(1, figure, count=share))
        floors.append(run_clients(1, floor, count=share))
    return merge(figures), merge(floors)


def _rebuild_row(ctx: Context, url: str, layout: DataDir, depth: int) -> None:
    """The first request to a queue filled on disk: the api lists the directory and indexes it."""
    queue = queue_name(depth)
    log.info("first fetch of %s (index rebuild)", queue)
    with requests.Session() as session:
        rebuild = time_once(lambda: fetch(session, url, queue, ""))
    floor = time_once(lambda: ceilings.list_and_sort(layout.queue_dir(queue)))
    ctx.results.add(
        Row(
            f"fetch depth {_k(depth)}",
            "first request (index rebuild)",
            rebuild,
            "s",
            False,
            floor,
            "scandir + sort of the directory in Python",
        )
    )


def _latency_rows(ctx: Context, depth: int, where: str, figure: Timing, floor: Timing) -> None:
    """Rated against a request that touches no queue: what fetching itself adds.

    (Opening and reading the 1 KB file costs ~10 us, too little to be the reference.)
    """
    for q in (50, 99):
        ctx.results.add(
            Row(
                f"fetch depth {_k(depth)}",
                f"p{q} latency, pointer {where}",
                figure.percentile(q) * 1000,
                "ms",
                False,
                floor.percentile(q) * 1000,
                f"p{q} of GET /healthz on the same api (HTTP floor)",
            )
        )


def _walk_ceilings(ctx: Context, layout: DataDir, depth: int) -> None:
    """Per-file costs of walking a big directory, for the claireup and statissa ceilings."""
    directory = layout.queue_dir(queue_name(depth))
    log.info("walk ceilings over %d files", depth)
    listed = time_once(lambda: ceilings.list_and_sort(directory))
    stated = time_once(lambda: ceilings.scan_and_stat(directory))
    ctx.shared["list_seconds_per_file"] = listed / depth
    ctx.shared["scan_stat_seconds_per_file"] = stated / depth


def _k(depth: int) -> str:
    return f"{depth // 1_000_000}M" if depth >= 1_000_000 else f"{depth // 1_000}k"
