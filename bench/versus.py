"""Ours against the floors, the disk ceilings and the original PHP server, in alternating
rounds.

The ratio that matters is not an absolute rate (this VM's disk and neighbours move it
20-fold) but ours against the others measured back to back: in every round each target
runs once, in an order that rotates from round to round, and each ratio is taken within
a round. Reported: median and range (min-max) over the rounds, and the server's CPU
seconds per message (its whole process tree, see ``bench.cpu``).

* **ours**: the api under gunicorn, as in the other scenarios; where durability plays a
  part (publishing), twice: ``ours sync`` and ``ours interval`` (``ZOSCII_DURABILITY``),
  and for publishing under both servers (``ours loop sync``, ``ours loop interval``:
  ``ZOSCII_API_SERVER=loop``, gunicorn's asgi worker, ``zoscii_api.asgi``);
* **raw WSGI floor**, **Flask floor**: ``bench/floor_app.py``'s apps under the same
  gunicorn settings: the same requests answered by an app that only reads the body
  (what no api rewrite can go below);
* **core commit** (publishing): ``bench/floor_app.py``'s ``publish_app`` under the same
  settings, the api's commit (``QueueStore.publish_many``, sync) without the endpoint
  around it: ours minus it is what the endpoint costs, it minus the raw floor what the
  core and the disk cost; and **core commit, event loop**, the same commit served from
  gunicorn's asgi worker, gathered as the loop server gathers them
  (``publish_loop_app``), in both durability modes: ours on the loop minus it is what
  the endpoint costs there;
* **disk ceiling**: the same messages written (or read) by the bench itself with the
  bare system calls, as many threads as clients (``bench.ceilings``): for publishing,
  the physical bound (a flush of a preallocated log, the files unflushed), and beside it
  the **POSIX commit** (each file flushed, renamed, its directory flushed);
* **original**: the PHP implementation under nginx + php-fpm (``bench.original``).

Every scenario checks that nothing was lost, reordered or duplicated; a failed check
fails the scenario. Load comes from ``bench.load`` (wrk, or Python threads without it).
"""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import requests

from bench import load
from bench.ceilings import (
    durable_batch_factory,
    durable_write_factory,
    read_in_order_factory,
    wal_batch_factory,
    wal_write_factory,
)
from bench.contenders import (
    BOTH_MODES,
    EVERY_SERVER,
    FLASK_FLOOR,
    INTERVAL,
    LOOP_INTERVAL,
    LOOP_SYNC,
    OURS,
    SYNC,
    Contenders,
    api_cpu_roots,
    contenders,
)
from bench.context import PAYLOAD_1K, Context
from bench.cpu import own_cpu_seconds, tree_cpu_seconds
from bench.fill import message_names, write_messages
from bench.harness import OperationFactory, run_clients
from bench.original import OriginalServer, unavailable
from bench.report import ORIGINAL, Comparison, Goal, Sample
from zosciimq.core.layout import DataDir
from zosciimq.protocol import FRAME_END, FRAMED_BATCH, frame_head

log = logging.getLogger(__name__)

FORM = "application/x-www-form-urlencoded"
BOUNDARY = "zoscii-bench-boundary-7f3a9c"
BATCH = 100
TAG = 10  # a message's position, as ASCII digits, starts its body: order is checkable
TAIL = PAYLOAD_1K[TAG:]
WALK_DEPTH = 10_000
FIRST_FETCH = {"action": "fetch", "q": "walk"}
BATCH_CLIENTS = (1, 4)
REPLICATION_ROUNDS = 3

CEILING = "disk ceiling"  # publishing: the physical bound (bench.ceilings, wal_*)
POSIX = "POSIX commit"  # each new file flushed, renamed, its directory flushed


# Issue 24's targets, by (clients, queues) of the publish comparisons, for either server.
def _one(sync: str, interval: str) -> list[Goal]:
    return [Goal(sync, "ratio", 0.6, ORIGINAL), Goal(interval, "ratio", 1.0, ORIGINAL)]


def _eight(sync: str, interval: str) -> list[Goal]:
    return [
        Goal(sync, "ratio", 1.0, ORIGINAL),
        Goal(sync, "cpu", 0.45),
        Goal(interval, "ratio", 1.1, ORIGINAL),
    ]


PUBLISH_GOALS = {
    (1, 1): _one(SYNC, INTERVAL) + _one(LOOP_SYNC, LOOP_INTERVAL),
    (8, 1): _eight(SYNC, INTERVAL) + _eight(LOOP_SYNC, LOOP_INTERVAL),
    (8, 8): _eight(SYNC, INTERVAL) + _eight(LOOP_SYNC, LOOP_INTERVAL),
}
BATCH_GOALS = {1: 10_000, 4: 18_000}  # framed, msg/s of ours sync

Run = Callable[[int], Sample]  # round number -> that round's figure for one target


class Unavailable(Exception):
    """This target cannot do this scenario (e.g. a server without batch publish)."""


class VerificationError(RuntimeError):
    """Messages were lost, duplicated, reordered or changed."""


def plan(ctx: Context) -> tuple[int, float]:
    """(rounds, seconds per target and round)."""
    return (3, 3.0) if ctx.quick else (5, 10.0)


def tag(position: int) -> bytes:
    return b"%010d" % position


def php_urlencode(data: bytes) -> str:
    """PHP's urlencode (what http_build_query uses): alnum and -_. stay, space is +."""
    safe = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_."
    return "".join(chr(b) if b in safe else "+" if b == 0x20 else f"%{b:02X}" for b in data)


def publish_form(queue: str) -> bytes:
    """``action=publish&q=...&msg=<1 KB>`` as the original's own replicator sends it."""
    return f"action=publish&q={queue}&msg={php_urlencode(PAYLOAD_1K)}".encode()


def framed_batch_body() -> bytes:
    """The framed batch body (what the client sends), each message tagged with its position."""
    head = frame_head(TAG + len(TAIL), {})
    return b"".join(head + tag(i) + TAIL for i in range(BATCH)) + FRAME_END


def batch_body() -> bytes:
    """multipart/form-data, one part per message ``m<i>``, each tagged with its position."""
    parts = [
        (
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="msg"; filename="m{i}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + tag(i)
        + TAIL
        + b"\r\n"
        for i in range(BATCH)
    ]
    return b"".join(parts) + f"--{BOUNDARY}--\r\n".encode()


def alternate(comparison: Comparison, runs: dict[str, Run], rounds: int) -> None:
    """Every target once per round, starting one later each round; disk synced between.
    The table shows the targets in the order of ``runs``."""
    comparison.targets = list(runs)
    active = dict(runs)
    for number in range(rounds):
        names = list(active)
        shift = number % len(names) if names else 0
        figures: dict[str, Sample] = {}
        for target in names[shift:] + names[:shift]:
            log.info("%s, round %d: %s", comparison.scenario, number + 1, target)
            try:
                figures[target] = active[target](number)
            except Unavailable as exc:
                log.warning("%s: %s not available: %s", comparison.scenario, target, exc)
                comparison.missing[target] = str(exc)
                del active[target]
            os.sync()  # the next target does not pay for this one's writeback
        comparison.rounds.append(figures)


def http_run(
    origin: str,
    roots: Callable[[], list[int]],
    work: Callable[[int], load.Outcome],
    check: Callable[[int, load.Outcome], None],
    per_request: int = 1,
) -> Run:
    """A round of HTTP load: rate of acknowledged messages and server CPU per message."""

    def one(number: int) -> Sample:
        before = tree_cpu_seconds(roots())
        outcome = work(number)
        cpu = tree_cpu_seconds(roots()) - before
        check(number, outcome)
        messages = outcome.acked * per_request
        if not messages:
            raise VerificationError(f"{origin}: nothing acknowledged ({outcome.first_bad})")
        return Sample(
            messages / outcome.seconds, cpu / messages if roots() else None, outcome.refused
        )

    return one


def ceiling_run(
    factory: Callable[[int], OperationFactory], threads: int, seconds: float, per_op: int = 1
) -> Run:
    """A round of the bare system calls from this process: rate and this process's CPU
    (from after ``factory`` set the round up: a log's allocation is not per message)."""

    def one(number: int) -> Sample:
        operations = factory(number)
        before = own_cpu_seconds()
        timing = run_clients(threads, operations, seconds=seconds)
        messages = timing.operations * per_op
        return Sample(messages / timing.seconds, (own_cpu_seconds() - before) / messages)

    return one


def no_bad_replies(target: str, outcome: load.Outcome) -> None:
    if outcome.bad:
        raise VerificationError(f"{target}: {outcome.bad} bad replies, first: {outcome.first_bad}")
    if outcome.socket_errors:
        raise VerificationError(f"{target}: {outcome.socket_errors} connection errors or timeouts")


def count_messages(directories: list[Path]) -> int:
    """.bin files in these queue directories, once the count stops moving (late requests)."""

    def count() -> int:
        return sum(
            sum(1 for name in os.listdir(d) if name.endswith(".bin"))
            for d in directories
            if d.is_dir()
        )

    last, stable, deadline = -1, 0, time.monotonic() + 10
    while stable < 3 and time.monotonic() < deadline:
        now = count()
        stable = stable + 1 if now == last else 0
        last = now
        time.sleep(0.1)
    return last


def check_on_disk(target: str, directories: list[Path], outcome: load.Outcome, per: int) -> int:
    """Between acknowledged and sent but not refused: none lost, none duplicated (a
    request in flight at the end may or may not have been done)."""
    on_disk = count_messages(directories)
    low, high = outcome.acked * per, (outcome.sent - outcome.refused) * per
    if not low <= on_disk <= high:
        raise VerificationError(
            f"{target}: {low} messages acknowledged, {high} sent and not refused, "
            f"but {on_disk} on disk"
        )
    return on_disk


def read_tags(directory: Path) -> list[bytes]:
    """The tag of every message, in name (= delivery) order."""
    names = sorted(name for name in os.listdir(directory) if name.endswith(".bin"))
    tags = []
    for name in names:
        with open(directory / name, "rb") as file:
            tags.append(file.read(TAG))
    return tags


# ---- 1-3: publish 1 KB ----------------------------------------------------------------


def publish(clients: int, queues: int) -> Callable[[Context], dict[str, Any]]:
    """Urlencoded publish of 1 KB from ``clients`` connections into ``queues`` queues."""

    def run(ctx: Context) -> dict[str, Any]:
        rounds, seconds = plan(ctx)
        plural = "s" if clients > 1 else ""
        where = f", {'one queue' if queues == 1 else f'{queues} queues'}" if clients > 1 else ""
        comparison = Comparison(
            f"publish 1 KB, {clients} client{plural}{where}",
            goals=PUBLISH_GOALS.get((clients, queues), []),
        )
        workdir = ctx.fresh_dir(f"vs-publish-{clients}x{queues}")
        with contenders(ctx, workdir, ours=EVERY_SERVER, core=True) as c:
            runs = {
                target: publish_run(c, target, clients, queues, seconds, workdir)
                for target in [*c.ours, *c.floors]
            }
            runs[CEILING] = ceiling_run(
                lambda n: spread_over(wal_write_factory, workdir / "wal" / f"r{n}", queues),
                clients,
                seconds,
            )
            runs[POSIX] = ceiling_run(
                lambda n: spread_over(durable_factory, workdir / "posix" / f"r{n}", queues),
                clients,
                seconds,
            )
            if c.original:
                runs[ORIGINAL] = publish_run(c, ORIGINAL, clients, queues, seconds, workdir)
            else:
                comparison.missing[ORIGINAL] = c.missing
            alternate(comparison, runs, rounds)
        ctx.results.comparisons.append(comparison)
        ctx.remove(workdir)
        return {"rounds": rounds, "seconds": seconds}

    return run


Writes = Callable[[Path, str, bytes], OperationFactory]  # (root, queue, payload)


def durable_factory(root: Path, queue: str, payload: bytes) -> OperationFactory:
    """The POSIX commit of ``payload`` files into ``root/queue``."""
    return durable_write_factory(root / queue, root / "temp", payload)


def spread_over(writes: Writes, root: Path, queues: int) -> OperationFactory:
    """1 KB messages, thread n into queue n mod ``queues`` (the threads of one queue
    share its log)."""
    factories = [writes(root, f"q{i}", PAYLOAD_1K) for i in range(queues)]
    return lambda number: factories[number % queues](number)


def endpoint(c: Contenders, target: str) -> tuple[str, str, Callable[[], list[int]]]:
    """(origin, path of the api, its CPU roots) of one target."""
    if target in c.ours:
        api = c.ours[target]
        return api.url.rstrip("/"), "/", lambda: api_cpu_roots(api)
    if target in c.floors:
        floor = c.floors[target]
        return floor.url.rstrip("/"), "/", floor.cpu_roots
    assert target == ORIGINAL and c.original is not None
    return c.original.base.rstrip("/"), "/index.php", c.original.cpu_roots


def queue_dir(c: Contenders, target: str, queue: str) -> Path | None:
    if target in c.ours:
        return DataDir(c.ours_dirs[target]).queue_dir(queue)
    if target in c.floor_dirs:
        return DataDir(c.floor_dirs[target]).queue_dir(queue)
    if target == ORIGINAL and c.original is not None:
        return c.original.queue_dir(queue)
    return None


def publish_run(
    c: Contenders, target: str, clients: int, queues: int, seconds: float, workdir: Path
) -> Run:
    origin, path, roots = endpoint(c, target)

    def names(number: int) -> list[str]:
        who = target.replace(" ", "-")
        return [f"p{clients}x{queues}-{who}-r{number}-q{i}" for i in range(queues)]

    def work(number: int) -> load.Outcome:
        if c.original is not None and target == ORIGINAL:
            for queue in names(number):  # its first publishes to a new queue race in mkdir
                (c.original.queue_dir(queue) / "locks").mkdir(parents=True, exist_ok=True)
        bodies = [load.Request("POST", path, publish_form(q), FORM) for q in names(number)]
        return load.cycle(origin, bodies, connections=clients, seconds=seconds, workdir=workdir)

    def check(number: int, outcome: load.Outcome) -> None:
        no_bad_replies(target, outcome)
        dirs = [queue_dir(c, target, q) for q in names(number)]
        if all(d is not None for d in dirs):
            check_on_disk(target, dirs, outcome, 1)  # type: ignore[arg-type]

    return http_run(origin, roots, work, check)


# ---- 4: batch publish, 100 x 1 KB per request -----------------------------------------


def batch(ctx: Context) -> dict[str, Any]:
    """Framed batch publish from 1 and 4 clients, in both durability modes, against the
    floors, the disk and the original's single publish; then the multipart batch (sync)
    against the floors alone."""
    rounds, seconds = plan(ctx)
    workdir = ctx.fresh_dir("vs-batch")
    framed = (framed_batch_body(), FRAMED_BATCH)
    multipart = (batch_body(), f"multipart/form-data; boundary={BOUNDARY}")
    details: dict[str, Any] = {"rounds": rounds, "seconds": seconds, "messages_per_request": BATCH}
    payloads = [tag(i) + TAIL for i in range(BATCH)]
    batch_servers = {SYNC: BOTH_MODES[SYNC], LOOP_SYNC: EVERY_SERVER[LOOP_SYNC]}
    with contenders(ctx, workdir, ours=batch_servers) as c:
        for clients in BATCH_CLIENTS:
            plural = "s" if clients > 1 else ""
            where = f", {clients} queues" if clients > 1 else ""
            comparison = Comparison(
                f"batch publish {BATCH} x 1 KB, framed, {clients} client{plural}{where}",
                goals=[Goal(t, "rate", BATCH_GOALS[clients]) for t in (SYNC, LOOP_SYNC)],
            )
            comparison.notes.append(
                f"{ORIGINAL}: single publish, as many clients and queues (it has no batch)"
            )
            runs = {
                target: batch_run(c, target, clients, seconds, workdir, framed)
                for target in [*c.ours, *c.floors]
            }
            # one queue per client, as ours: thread n writes queue n
            runs[CEILING] = ceiling_run(
                lambda n, k=clients: per_thread_queue(
                    [
                        wal_batch_factory(workdir / "wal" / f"c{k}r{n}", f"q{i}", payloads)
                        for i in range(k)
                    ]
                ),
                clients,
                seconds,
                BATCH,
            )
            runs[POSIX] = ceiling_run(
                lambda n, k=clients: durable_batch_factory(
                    workdir / "posix" / f"c{k}r{n}", workdir / "posix" / "temp", payloads
                ),
                clients,
                seconds,
                BATCH,
            )
            if c.original:
                runs[ORIGINAL] = publish_run(c, ORIGINAL, clients, clients, seconds, workdir)
            else:
                comparison.missing[ORIGINAL] = c.missing
            alternate(comparison, runs, rounds)
            ctx.results.comparisons.append(comparison)
        for clients in BATCH_CLIENTS:
            plural = "s" if clients > 1 else ""
            comparison = Comparison(
                f"batch publish {BATCH} x 1 KB, multipart, {clients} client{plural}"
            )
            comparison.notes.append(
                "the multipart/form-data batch, as curl -F or a browser sends it"
            )
            runs = {
                target: batch_run(c, target, clients, seconds, workdir, multipart)
                for target in [*c.ours, *c.floors]
            }
            alternate(comparison, runs, rounds)
            ctx.results.comparisons.append(comparison)
    ctx.remove(workdir)
    return details


def per_thread_queue(factories: list[OperationFactory]) -> OperationFactory:
    """Thread n's operations from factory n: a queue of its own."""
    return lambda number: factories[number](number)


def batch_run(
    c: Contenders,
    target: str,
    clients: int,
    seconds: float,
    workdir: Path,
    body: tuple[bytes, str],
) -> Run:
    """One queue per client: a queue takes at most 10,000 names a second (its counter)."""
    origin, _path, roots = endpoint(c, target)

    def queues(number: int) -> list[str]:
        kind = "f" if body[1] == FRAMED_BATCH else "m"  # the formats' runs share round numbers
        who = target.replace(" ", "-")
        return [f"batch{clients}{kind}-{who}-r{number}-q{i}" for i in range(clients)]

    def work(number: int) -> load.Outcome:
        requests_ = [
            load.Request("POST", f"/?action=publish&q={queue}&batch=1", *body)
            for queue in queues(number)
        ]
        return load.cycle(
            origin,
            requests_,
            connections=clients,
            seconds=seconds,
            workdir=workdir,
            batch=BATCH if target in c.ours else 0,
        )

    def check(number: int, outcome: load.Outcome) -> None:
        if target in c.ours and outcome.bad and not outcome.acked:
            raise Unavailable(f"server answered {outcome.first_bad[:300]}")
        no_bad_replies(target, outcome)
        directories = [queue_dir(c, target, queue) for queue in queues(number)]
        if target in c.ours:
            check_on_disk(target, directories, outcome, BATCH)  # type: ignore[arg-type]
            for directory in directories:
                check_batches(target, directory, in_order=True)  # type: ignore[arg-type]

    return http_run(origin, roots, work, check, per_request=BATCH)


def check_batches(target: str, directory: Path, *, in_order: bool) -> None:
    """Every part of every batch arrived once; from one client, in the parts' order."""
    tags = read_tags(directory)
    expected = [tag(i) for i in range(BATCH)]
    counts = Counter(tags)
    if tags and (set(counts) != set(expected) or len(set(counts.values())) != 1):
        raise VerificationError(f"{target}: batch parts lost or duplicated: {dict(counts)}")
    if in_order and tags != expected * (len(tags) // BATCH):
        raise VerificationError(f"{target}: batch parts out of order in {directory.name}")


# ---- 5: consume by pointer ------------------------------------------------------------


def consume(ctx: Context) -> dict[str, Any]:
    """One consumer following a queue of 10,000 x 1 KB by pointer; the floor gets the GET."""
    rounds, seconds = plan(ctx)
    workdir = ctx.fresh_dir("vs-consume")
    names = message_names(WALK_DEPTH)
    comparison = Comparison(
        f"consume by pointer, queue of {WALK_DEPTH:,} x 1 KB, 1 client",
        goals=[Goal(OURS, "ratio", 0.8, FLASK_FLOOR)],
    )
    with contenders(ctx, workdir) as c:
        runs: dict[str, Run] = {}
        for target in (OURS, ORIGINAL):
            directory = queue_dir(c, target, "walk")
            if directory is None:
                continue
            write_messages(directory, names, lambda n: tag(n) + TAIL)
            origin, path, roots = endpoint(c, target)
            with requests.get(origin + path, params=FIRST_FETCH, timeout=600) as first:
                first.raise_for_status()  # ours builds its index on the first fetch
            runs[target] = walk_run(target, origin, path, roots, names, seconds, workdir)
        for target in c.floors:
            runs[target] = floor_get_run(
                c, target, f"/?action=fetch&q=walk&after={names[0]}", seconds, workdir
            )
        paths = [DataDir(c.ours_dirs[OURS]).queue_dir("walk") / name for name in names]
        runs[CEILING] = ceiling_run(
            lambda _n: read_in_order_factory(paths, repeat=True), 1, seconds
        )
        if c.missing:
            comparison.missing[ORIGINAL] = c.missing
        else:  # last, as in the other comparisons
            runs[ORIGINAL] = runs.pop(ORIGINAL)
        alternate(comparison, runs, rounds)
    ctx.results.comparisons.append(comparison)
    ctx.remove(workdir)
    return {"rounds": rounds, "seconds": seconds, "depth": WALK_DEPTH}


def floor_get_run(c: Contenders, target: str, path: str, seconds: float, workdir: Path) -> Run:
    """One client GETting the same request from a floor."""
    origin, _path, roots = endpoint(c, target)
    get = load.Request("GET", path)

    def work(number: int) -> load.Outcome:
        return load.cycle(origin, [get], connections=1, seconds=seconds, workdir=workdir)

    return http_run(origin, roots, work, lambda _n, outcome: no_bad_replies(target, outcome))


def walk_run(
    target: str,
    origin: str,
    path: str,
    roots: Callable[[], list[int]],
    names: list[str],
    seconds: float,
    workdir: Path,
) -> Run:
    def work(number: int) -> load.Outcome:
        return load.walk(
            origin,
            f"{path}?action=fetch&q=walk&after=",
            seconds=seconds,
            workdir=workdir,
            tag_bytes=TAG,
            tail=TAIL,
        )

    def check(number: int, outcome: load.Outcome) -> None:
        no_bad_replies(target, outcome)
        for position, (name, got) in enumerate(zip(outcome.names, outcome.tags, strict=True)):
            want = position % len(names)
            if name != names[want] or got != tag(want).decode():
                raise VerificationError(
                    f"{target}: message {position} was {name} ({got}), expected {names[want]}"
                )

    return http_run(origin, roots, work, check)


# ---- 6: replication -------------------------------------------------------------------


def replication(ctx: Context) -> dict[str, Any]:
    """10,000 x 1 KB from one server to another: our replikate job against replikate.php."""
    from bench import replikate_bench  # starts nothing; imports the replikate service
    from zoscii_replikate.settings import JobConfig

    count = 1_000 if ctx.quick else 10_000
    _rounds, seconds = plan(ctx)
    workdir = ctx.fresh_dir("vs-replication")
    names = message_names(count)
    bodies = [tag(n) + TAIL for n in range(count)]
    comparison = Comparison(
        f"replicate {count:,} x 1 KB", goals=[Goal(OURS, "ratio", 20, ORIGINAL)]
    )
    with ExitStack() as stack:
        source = stack.enter_context(ctx.api(workdir / "ours-source"))
        write_messages(
            DataDir(workdir / "ours-source").queue_dir("bench"), names, bodies.__getitem__
        )
        target_dir = DataDir(workdir / "ours-target")
        target_dir.ensure()
        options = argparse.Namespace(
            messages=count, size=len(bodies[0]), batch_bytes=JobConfig.batch_bytes
        )

        def ours(number: int) -> Sample:
            roots = api_cpu_roots(source)
            before = tree_cpu_seconds(roots) + own_cpu_seconds()
            figures = replikate_bench.replicate(
                source.url, target_dir.root, f"mirror{number}", options, JobConfig.batch_count
            )
            cpu = tree_cpu_seconds(roots) + own_cpu_seconds() - before
            got = [
                (target_dir.queue_dir(f"mirror{number}") / name).read_bytes()
                for name in sorted(os.listdir(target_dir.queue_dir(f"mirror{number}")))
                if name.endswith(".bin")
            ]
            if got != bodies:
                raise VerificationError(f"ours: the replica differs ({len(got)} messages)")
            return Sample(count / figures["seconds"], cpu / count)

        runs: dict[str, Run] = {OURS: ours}
        runs[CEILING] = ceiling_run(
            lambda n: wal_write_factory(workdir / "wal" / f"r{n}", "q0", PAYLOAD_1K), 1, seconds
        )
        runs[POSIX] = ceiling_run(
            lambda n: durable_factory(workdir / "posix" / f"r{n}", "q0", PAYLOAD_1K), 1, seconds
        )
        why = unavailable(needs_curl=True)
        if why:
            comparison.missing[ORIGINAL] = why
        else:
            originals = []
            for name in ("original-source", "original-target"):
                originals.append(OriginalServer(workdir / name).start())
                stack.callback(originals[-1].stop)
            ctx.results.header["original configured"] = originals[0].configured()
            write_messages(originals[0].queue_dir("bench"), names, bodies.__getitem__)
            runs[ORIGINAL] = original_replication(*originals, bodies, comparison)
        alternate(comparison, runs, REPLICATION_ROUNDS)
    ctx.results.comparisons.append(comparison)
    ctx.remove(workdir)
    return {"rounds": REPLICATION_ROUNDS, "messages": count}


def original_replication(
    source: OriginalServer, target: OriginalServer, bodies: list[bytes], comparison: Comparison
) -> Run:
    """GET replikate.php on the target until its queue has every message (one usually does)."""

    def one(number: int) -> Sample:
        queue = f"r{number}"
        roots = source.cpu_roots() + target.cpu_roots()
        before = tree_cpu_seconds(roots)
        began = time.perf_counter()
        for _ in range(5):
            reply = requests.get(
                target.base + "replikate.php",
                params={"url": source.url, "sq": "bench", "tq": queue},
                timeout=3600,
            )
            reply.raise_for_status()
            if count_messages([target.queue_dir(queue)]) >= len(bodies):
                break
        seconds = time.perf_counter() - began
        cpu = tree_cpu_seconds(source.cpu_roots() + target.cpu_roots()) - before
        got = read_tags(target.queue_dir(queue))
        want = [body[:TAG] for body in bodies]
        if sorted(got) != want:
            raise VerificationError(
                f"original: {len(got)} replicated ({len(set(got))} distinct) of {len(want)}"
            )
        reversed_pairs = sum(1 for a, b in itertools.pairwise(got) if b < a)
        if reversed_pairs:
            comparison.notes.append(
                f"original, round {number + 1}: all {len(want):,} messages arrived once, but "
                f"{reversed_pairs:,} consecutive pairs are in the wrong order in the replica "
                "(its names within one second sort by a random GUID)"
            )
        return Sample(len(bodies) / seconds, cpu / len(bodies))

    return one
