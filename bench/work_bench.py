"""Work queues (consumer groups): consume + ack from 8 consumers, against a pointer fetch
of the same messages, in alternating rounds; and how long a lease that ran out takes to
come back.

* **consume + ack**: a queue of 1 KB messages (filled on disk, indexed by a first fetch);
  8 client threads, each with its own keep-alive ``requests.Session``, take batches of
  100 (``action=consume&count=100``, multipart/mixed, a receipt per part) and ack each
  batch in one request (``receipts`` as a JSON list). Each round is a new group over
  the same queue, so every round leases the same messages; it checks that every
  message was delivered and acked exactly once, byte-exact.
* **pointer fetch**: the same 8 threads read the same messages by pointer, 100 a
  request (``action=fetch&after=...&count=100``): batch j of the queue per ticket, so
  the same requests-per-message minus the acks. What a work queue costs is the gap.
* **redelivery**: a queue of one message; a fresh group leases it with ``lease=2``
  and never acks; another session asks with ``wait=10`` (long-poll) until it gets it
  again (``X-ZOSCII-Deliveries: 2``). Time from sending the first consume to holding
  the redelivery, against the target lease + 1 s (a waiting request looks again once a
  second). Sample k of n starts waiting (k + 0.5) / n s after the lease, so the samples
  spread over where in that second the lease ends.

Rounds alternate which of the two rate runs goes first, with ``sync`` between them.
Reported as the bench's rows (figure beside its reference) with median and range over
the rounds in the note, and the target (>= 5,000 msg/s for consume + ack). Server CPU
per message (the gunicorn process tree) and the client's own CPU are in the details.

    .venv/bin/python -m bench.run --only work [--quick]
"""

from __future__ import annotations

import itertools
import logging
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import requests

from bench.client import Sessions
from bench.contenders import api_cpu_roots
from bench.context import PAYLOAD_1K, Context
from bench.cpu import own_cpu_seconds, tree_cpu_seconds
from bench.fill import fill_queue
from bench.harness import OperationFactory, run_clients
from bench.report import Row
from bench.servers import Api
from tests.support.work_http import Leased, ack, consume, parse_batch
from zosciimq.core.layout import DataDir

log = logging.getLogger(__name__)

QUEUE = "work"
REDELIVER_QUEUE = "redeliver"
CONSUMERS = 8
BATCH = 100
LEASE = 120  # long enough that nothing is redelivered during a rate round
REDELIVERY_LEASE = 2
REDELIVERY_WAIT = 10
TARGET_RATE = 5_000.0
TARGET_REDELIVERY = REDELIVERY_LEASE + 1.0


class WorkBenchError(RuntimeError):
    """Messages were lost, duplicated or changed, or the api answered something else."""


@dataclass(frozen=True)
class Plan:
    rounds: int
    messages: int  # per round: the whole queue, a multiple of BATCH
    redeliveries: int


def plan(ctx: Context) -> Plan:
    return Plan(3, 5_000, 3) if ctx.quick else Plan(5, 20_000, 7)


@dataclass
class RateSample:
    rate: float  # msg/s
    server_cpu: float | None  # server CPU seconds per message
    client_cpu: float  # this process's CPU seconds per message (all client threads)
    p50_batch: float  # seconds per batch of 100 (consume + ack, or one fetch)


@dataclass
class Rounds:
    work: list[RateSample] = field(default_factory=list)
    fetch: list[RateSample] = field(default_factory=list)


def run(ctx: Context) -> dict[str, Any]:
    p = plan(ctx)
    data_dir = ctx.fresh_dir("work")
    layout = DataDir(data_dir)
    names = fill_queue(layout, QUEUE, p.messages, PAYLOAD_1K)
    fill_queue(layout, REDELIVER_QUEUE, 1, PAYLOAD_1K)
    rounds = Rounds()
    with ctx.api(data_dir) as api:
        with requests.Session() as session:  # the index is built on the first fetch
            for queue in (QUEUE, REDELIVER_QUEUE):
                session.get(api.url, params={"action": "fetch", "q": queue}, timeout=600)
        for number in range(p.rounds):
            order: list[tuple[str, Callable[[], RateSample]]] = [
                ("consume+ack", lambda n=number: work_round(api, names, f"g{n}")),
                ("pointer fetch", lambda: fetch_round(api, names)),
            ]
            for label, measure in order if number % 2 == 0 else order[::-1]:
                log.info("work, round %d: %s", number + 1, label)
                sample = measure()
                (rounds.work if label == "consume+ack" else rounds.fetch).append(sample)
                log.info("work, round %d: %s %.0f msg/s", number + 1, label, sample.rate)
                os.sync()  # the next run does not pay for this one's writeback
        latencies = [
            redelivery(api.url, f"redeliver{n}", (n + 0.5) / p.redeliveries)
            for n in range(p.redeliveries)
        ]
        log.info("redelivery after a %d s lease: %s", REDELIVERY_LEASE, latencies)
    report(ctx, p, rounds, latencies)
    ctx.remove(data_dir)
    return details(p, rounds, latencies)


# ---- consume + ack ---------------------------------------------------------------------


def work_round(api: Api, names: list[str], group: str) -> RateSample:
    """8 consumers lease and ack the whole queue in batches of 100 for a new group."""
    acked: list[list[str]] = [[] for _ in range(CONSUMERS)]

    def factory(sessions: Sessions) -> OperationFactory:
        def make(number: int) -> Callable[[], None]:
            session, mine = sessions.new(), acked[number]

            def consume_and_ack() -> None:
                leased = consume(
                    session, api.url, QUEUE, group, count=BATCH, lease=LEASE, consumer=f"c{number}"
                )
                check_bodies(leased, BATCH)
                results = ack(session, api.url, QUEUE, group, [m.receipt for m in leased])
                refused = [r for r in results if r.result != "ok"]
                if refused:
                    raise WorkBenchError(f"{len(refused)} acks refused, first {refused[0]}")
                mine.extend(r.name for r in results)

            return consume_and_ack

        return make

    sample = timed(api, factory, len(names) // BATCH)
    got = sorted(name for part in acked for name in part)
    if got != names:
        raise WorkBenchError(
            f"group {group}: {len(got)} acks ({len(set(got))} distinct) for {len(names)} messages"
        )
    return sample


def check_bodies(leased: list[Leased], count: int) -> None:
    if len(leased) != count:
        raise WorkBenchError(f"a batch of {len(leased)} messages, not {count}")
    bad = [m.name for m in leased if m.body != PAYLOAD_1K or m.deliveries != 1]
    if bad:
        raise WorkBenchError(f"{len(bad)} messages changed or redelivered, first {bad[0]}")


# ---- pointer fetch ---------------------------------------------------------------------


def fetch_round(api: Api, names: list[str]) -> RateSample:
    """The same messages by pointer: ticket j fetches batch j (100 after name 100 j - 1)."""
    tickets = itertools.count()
    seen = [False] * (len(names) // BATCH)

    def factory(sessions: Sessions) -> OperationFactory:
        def make(number: int) -> Callable[[], None]:
            session = sessions.new()

            def fetch_batch() -> None:
                j = next(tickets)
                after = names[j * BATCH - 1] if j else ""
                params = {"action": "fetch", "q": QUEUE, "after": after, "count": str(BATCH)}
                reply = session.get(api.url, params=params, timeout=600)
                content_type = reply.headers.get("Content-Type", "")
                if reply.status_code != 200 or not content_type.startswith("multipart/mixed"):
                    raise WorkBenchError(f"fetch after {after}: {reply.content[:200]!r}")
                got = parse_batch(content_type, reply.content)
                if [m.name for m in got] != names[j * BATCH : (j + 1) * BATCH] or any(
                    m.body != PAYLOAD_1K for m in got
                ):
                    raise WorkBenchError(f"fetch after {after}: the wrong messages")
                seen[j] = True

            return fetch_batch

        return make

    sample = timed(api, factory, len(seen))
    if not all(seen):
        raise WorkBenchError(f"{seen.count(False)} batches never fetched")
    return sample


def timed(api: Api, factory: Callable[[Sessions], OperationFactory], batches: int) -> RateSample:
    """``batches`` operations of 100 messages from 8 threads: rate and CPU per message."""
    with Sessions() as sessions:
        roots = api_cpu_roots(api)
        server_before, client_before = tree_cpu_seconds(roots), own_cpu_seconds()
        timing = run_clients(CONSUMERS, factory(sessions), count=batches)
        server = tree_cpu_seconds(roots) - server_before
        client = own_cpu_seconds() - client_before
    messages = batches * BATCH
    return RateSample(
        rate=messages / timing.seconds,
        server_cpu=server / messages if roots else None,
        client_cpu=client / messages,
        p50_batch=timing.percentile(50),
    )


# ---- redelivery ------------------------------------------------------------------------


def redelivery(url: str, group: str, offset: float) -> float:
    """Seconds from leasing the message (lease=2, never acked) to a waiting consumer
    holding its redelivery; the waiting consumer starts ``offset`` seconds after the
    lease (a waiting request looks again once a second, so where the lease ends in that
    second is what varies)."""
    with requests.Session() as first, requests.Session() as second:
        began = time.perf_counter()
        leased = consume(first, url, REDELIVER_QUEUE, group, lease=REDELIVERY_LEASE)
        if len(leased) != 1:
            raise WorkBenchError(f"group {group}: the first consume gave {len(leased)} messages")
        time.sleep(max(0.0, began + offset - time.perf_counter()))
        again: list[Leased] = []
        deadline = began + 30
        while not again and time.perf_counter() < deadline:
            again = consume(second, url, REDELIVER_QUEUE, group, wait=REDELIVERY_WAIT)
            if not again:
                time.sleep(0.01)  # answered at once: every waiting slot was taken
        took = time.perf_counter() - began
        if not again or again[0].deliveries != 2 or again[0].name != leased[0].name:
            raise WorkBenchError(f"group {group}: no redelivery within 30 s ({again})")
        ack(second, url, REDELIVER_QUEUE, group, [again[0].receipt])
    return took


# ---- reporting -------------------------------------------------------------------------


def spread_note(values: list[float], text: Callable[[float], str], rounds: str) -> str:
    return f"median of {len(values)} {rounds}, range {text(min(values))}-{text(max(values))}"


def report(ctx: Context, p: Plan, rounds: Rounds, latencies: list[float]) -> None:
    work = [s.rate for s in rounds.work]
    fetch = [s.rate for s in rounds.fetch]
    ratios = [w.rate / f.rate for w, f in zip(rounds.work, rounds.fetch, strict=True)]
    rate_text = "{:,.0f}".format
    scenario = (
        f"work queue: consume+ack {p.messages:,} x 1 KB, {CONSUMERS} consumers, count={BATCH}"
    )
    met = statistics.median(work) >= TARGET_RATE
    ctx.results.add(
        Row(
            scenario,
            "messages/s",
            statistics.median(work),
            "msg/s",
            True,
            statistics.median(fetch),
            f"pointer fetch of the same messages, {CONSUMERS} clients, count={BATCH} "
            f"(median, range {rate_text(min(fetch))}-{rate_text(max(fetch))})",
            spread_note(work, rate_text, "rounds")
            + f"; consume+ack/fetch {statistics.median(ratios):.2f}x "
            f"({min(ratios):.2f}-{max(ratios):.2f}); target >= {TARGET_RATE:,.0f}: "
            + ("met" if met else "MISSED"),
        )
    )
    server, fetch_server = cpu(rounds.work), cpu(rounds.fetch)
    if server and fetch_server:
        ctx.results.add(
            Row(
                scenario,
                "server CPU per message",
                statistics.median(server) * 1e6,
                "us",
                False,
                note=f"gunicorn master + workers, median over rounds; pointer fetch: "
                f"{statistics.median(fetch_server) * 1e6:.3g} us",
            )
        )
    ctx.results.add(
        Row(
            f"work queue: redelivery after a lease of {REDELIVERY_LEASE} s",
            "seconds to redeliver",
            statistics.median(latencies),
            "s",
            False,
            TARGET_REDELIVERY,
            f"target: the lease + 1 s (waiting consumer, wait={REDELIVERY_WAIT})",
            spread_note(latencies, "{:.2f}".format, "samples")
            + (": met" if statistics.median(latencies) <= TARGET_REDELIVERY else ": MISSED"),
        )
    )


def cpu(samples: list[RateSample]) -> list[float]:
    return [s.server_cpu for s in samples if s.server_cpu is not None]


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def details(p: Plan, rounds: Rounds, latencies: list[float]) -> dict[str, Any]:
    def of(samples: list[RateSample]) -> dict[str, Any]:
        return {
            "rate": summary([s.rate for s in samples]),
            "server_cpu_us_per_message": summary([c * 1e6 for c in cpu(samples)])
            if cpu(samples)
            else None,
            "client_cpu_us_per_message": summary([s.client_cpu * 1e6 for s in samples]),
            "p50_batch_ms": summary([s.p50_batch * 1000 for s in samples]),
            "rounds": [s.rate for s in samples],
        }

    return {
        "rounds": p.rounds,
        "messages": p.messages,
        "consumers": CONSUMERS,
        "batch": BATCH,
        "consume_ack": of(rounds.work),
        "pointer_fetch": of(rounds.fetch),
        "target_rate": TARGET_RATE,
        "redelivery_seconds": {**summary(latencies), "samples": latencies},
        "redelivery_target_seconds": TARGET_REDELIVERY,
    }
