"""The benchmark driver: ``python -m bench.run [--quick] [--containers] [--json PATH]``.

Runs every scenario against a real api on loopback with a fresh data directory, measures
each figure's ceiling on the same disk in the same run, prints a table and writes the
results as JSON (``bench/results/<timestamp>.json`` unless ``--json`` says otherwise).
Everything it writes lives under one temp directory, removed at the end, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import (
    REPO,
    consume,
    depth,
    external,
    fanout,
    floor,
    large,
    load,
    original,
    publish,
    slow_clients,
    spark_scale,
    versus,
    work_bench,
)
from bench.context import Context
from bench.machine import describe
from bench.report import (
    Results,
    ScenarioOutcome,
    render_comparisons,
    render_comparisons_markdown,
    render_header,
    render_markdown,
    render_table,
)
from bench.servers import IMAGE, image_available, image_id

log = logging.getLogger(__package__)  # run with -m, where __name__ is "__main__"

# Order matters: publish measures the durable-write ceiling that replication is rated
# against, depth measures the walk ceilings that claireup and statissa are rated against.
SCENARIOS: dict[str, Callable[[Context], dict[str, Any]]] = {
    "http": floor.run,
    "publish": publish.run,
    "consume": consume.run,
    "depth": depth.run,
    "large": large.run,
    "replication": external.replication,
    "claireup": external.claireup,
    "statissa": external.statissa,
    # ours against the floor, the disk and the original, in alternating rounds
    "vs-publish-1": versus.publish(1, 1),
    "vs-publish-8": versus.publish(8, 1),
    "vs-publish-8q": versus.publish(8, 8),
    "vs-batch": versus.batch,
    "vs-consume": versus.consume,
    "vs-replication": versus.replication,
    # half-open and idle connections: a client's publishes direct vs through the proxy
    "slow-clients": slow_clients.run,
    # work queues: consume+ack from 8 consumers beside a pointer fetch, alternating rounds
    "work": work_bench.run,
    # 1,000 / 10,000 readers of one queue through the compose proxy: long-poll, SSE,
    # WebSocket, at 1 and 100 publishes/s (needs the images: proxy, api, live)
    "fanout": fanout.run,
    # statissa at 100k/1M files (ZOSCII_BENCH_SCALE_FILES): local[*], a two-worker
    # cluster, scandir and find, alternating rounds; not in --quick (minutes of generation)
    "statissa-scale": spark_scale.run,
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="the one-to-two-minute version")
    parser.add_argument(
        "--containers", action="store_true", help="run the api as the zoscii/api:dev image"
    )
    parser.add_argument("--json", type=Path, help="where to write the JSON result")
    parser.add_argument("--markdown", type=Path, help="also write the table as Markdown here")
    parser.add_argument(
        "--data-dir",
        type=Path,
        help="parent of the run's temp directory: the disk being measured (default: $TMPDIR)",
    )
    parser.add_argument(
        "--only", help=f"comma-separated subset of: {', '.join(SCENARIOS)} (default: all)"
    )
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers (default 2)")
    parser.add_argument("--threads", type=int, default=8, help="threads per worker (default 8)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(name)s %(message)s", datefmt="%H:%M:%S"
    )
    selected = _selected(args.only)
    if args.containers:
        problem = image_available()
        if problem:
            print(f"--containers: {problem}; skipping the container mode.")
            return 0
    parent = args.data_dir or Path(tempfile.gettempdir())
    parent.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="zoscii-bench-", dir=parent))
    # The test support server keeps its log and metrics under tempfile's directory:
    # point that at the run's root so nothing outlives the run.
    tempfile.tempdir = str(root)
    # And the servers' (gunicorn.conf.py makes a metrics dir in $TMPDIR at every start).
    old_tmpdir = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(root)
    signal.signal(signal.SIGTERM, _interrupt)
    started = datetime.now(UTC)
    mode = "quick" if args.quick else "full"
    server = f"container {IMAGE} ({image_id()})" if args.containers else "gunicorn on loopback"
    header = {
        "started": started.isoformat(timespec="seconds"),
        **describe(root, mode=mode, server=server),
        "gunicorn workers x threads": f"{args.workers} x {args.threads}",
        "load generator (vs-*)": load.generator(),
        "original (vs-*)": original.describe(),
    }
    results = Results(header=header)
    ctx = Context(
        quick=args.quick,
        containers=args.containers,
        root=root,
        results=results,
        workers=args.workers,
        threads=args.threads,
    )
    print(render_header(header), flush=True)
    interrupted = False
    try:
        for name in selected:
            outcome = _run_one(name, SCENARIOS[name], ctx)
            results.outcomes.append(outcome)
    except KeyboardInterrupt:
        interrupted = True
        results.header["interrupted"] = True
        log.warning("interrupted: cleaning up")
    finally:
        tempfile.tempdir = None
        if old_tmpdir is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = old_tmpdir
        log.info("removing %s", root)
        shutil.rmtree(root, ignore_errors=True)
    _print_summary(results)
    json_path = args.json or REPO / "bench" / "results" / f"{started:%Y%m%dT%H%M%SZ}.json"
    results.header["seconds"] = round((datetime.now(UTC) - started).total_seconds(), 1)
    results.write_json(json_path)
    print(f"\nJSON written to {json_path}")
    if args.markdown:
        parts = [render_markdown(results.rows)] if results.rows else []
        if results.comparisons:
            parts.append(render_comparisons_markdown(results.comparisons))
        args.markdown.write_text("\n\n".join(parts) + "\n")
    if interrupted:
        return 130
    return 1 if any(outcome.status == "failed" for outcome in results.outcomes) else 0


def _selected(only: str | None) -> list[str]:
    if not only:
        return list(SCENARIOS)
    wanted = [name.strip() for name in only.split(",") if name.strip()]
    unknown = [name for name in wanted if name not in SCENARIOS]
    if unknown:
        raise SystemExit(f"unknown scenario(s): {', '.join(unknown)}")
    return [name for name in SCENARIOS if name in wanted]


def _run_one(
    name: str, scenario: Callable[[Context], dict[str, Any]], ctx: Context
) -> ScenarioOutcome:
    log.info("=== %s", name)
    outcome = ScenarioOutcome(name)
    began = time.perf_counter()
    try:
        outcome.details = scenario(ctx)
    except external.NotAvailable as exc:
        outcome.status, outcome.reason = "not available", str(exc)
        log.warning("%s: not available (%s)", name, exc)
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        outcome.status, outcome.reason = "failed", f"{type(exc).__name__}: {exc}"
        log.error("%s failed:\n%s", name, traceback.format_exc())
    outcome.seconds = round(time.perf_counter() - began, 1)
    log.info("=== %s: %s in %.1f s", name, outcome.status, outcome.seconds)
    return outcome


def _print_summary(results: Results) -> None:
    if results.rows:
        print()
        print(render_table(results.rows))
    if results.comparisons:
        print(
            "\nours against the floors, the disk ceilings and the original: msg/s, ratios "
            "within rounds, server CPU per message; median (min-max) over rounds; load: "
            f"{results.header['load generator (vs-*)']}"
        )
        for key in ("original (vs-*)", "original configured"):
            if key in results.header:
                print(f"{key}: {results.header[key]}")
        print(render_comparisons(results.comparisons))
    other = [o for o in results.outcomes if o.status != "ok"]
    if other:
        print()
        for outcome in other:
            print(f"{outcome.name}: {outcome.status} ({outcome.reason})")
    slowest = results.slowest()
    if slowest is not None:
        print(
            f"\nslowest against its ceiling: {slowest.scenario}, {slowest.metric}: "
            f"{slowest.share:.1%} of {slowest.ceiling_label}"
        )


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
