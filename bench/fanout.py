"""Fan-out (issue 25): N readers following one queue through the compose proxy, by
long-poll, by Server-Sent Events and by WebSocket, at 1 and at 100 publishes a second.

The stack is docker-compose.yml's ``proxy``, ``api`` and ``live`` services (images
``zoscii/*:$IMAGE_TAG``, default ``dev``: ``make images`` first), under a project of its
own, removed at the end. The bench reaches the proxy at its container address (no
docker-proxy in between, as a client on the host's network would not pay for it). The
readers are ``bench.fanout_readers.ReaderProcesses``: ``ZOSCII_BENCH_FANOUT_READER_PROCESSES``
(default 2) processes, each a bare epoll loop over its share of the keep-alive connections
(long-poll: ``fetch after=<its pointer> wait=30 count=100``, again at once after each
answer, as a tail client does), a message's receipt time the kernel's (``SO_TIMESTAMPNS``),
so that the readers' own queue on the two shared cores is not counted as delivery time.
A publisher posts 64-byte messages through the proxy at the rate, each stamped with its
send time and carrying a nonce of its own (a failed attempt is sent again with the same
nonce before the next message: ``Publisher``).

Per kind and rate, in alternating rounds (each round: publishing alone first, then with
the readers attached), medians and ranges of:

* messages that reached every reader, and order errors (a repeat or a reorder: must be 0);
* delivery p50 / p99 (publisher's send to a reader's receipt);
* reader requests per second, against the ideal (1.1 x deliveries/s + N / wait);
* the server's CPU (live + proxy + api processes, % of one core) while every reader waits
  and nothing is published, and its memory per waiting reader (RSS growth of the live
  service, and of nginx, divided by N);
* publish latency p99 without and with the readers, and their ratio.

``python -m bench.run --only fanout`` (quick: 1,000 readers; full: 10,000 at 1/s);
``ZOSCII_BENCH_FANOUT_KINDS`` (e.g. ``sse,websocket``) and ``ZOSCII_BENCH_FANOUT_RATES``
(e.g. ``100``) run a part; ``ZOSCII_BENCH_FANOUT_LIVE_CPU_SHARES`` sets the live
container's CPU weight (an experiment, see docs/benchmarks.md). Every number depends on
the machine and on what else runs: compare within one run, and see each round's load
average and CPU time per message.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import logging
import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import REPO
from bench.context import Context
from bench.external import NotAvailable
from bench.fanout_readers import LongPollReader, ReaderProcesses, payload
from bench.harness import percentile
from bench.report import Row
from zosciimq.protocol import LAST

log = logging.getLogger(__name__)

KINDS = ("longpoll", "sse", "websocket")
WAIT = LongPollReader.wait
READER_PROCESSES = int(os.environ.get("ZOSCII_BENCH_FANOUT_READER_PROCESSES", "2"))
PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"


@dataclass
class Plan:
    readers: int
    rate: float  # publishes per second
    seconds: float  # publishing, per phase
    idle_seconds: float  # full: longer than a long-poll's wait (its re-polls show)
    rounds: int


@dataclass
class Round:
    """One round of one cell."""

    reached: int = 0
    published: int = 0
    order_errors: int = 0
    delivery_p50_ms: float | None = None
    delivery_p99_ms: float | None = None
    requests_per_s: float = 0.0
    ideal_requests_per_s: float = 0.0
    idle_requests_per_s: float = 0.0
    idle_cpu_percent: float = 0.0
    live_kb_per_reader: float = 0.0
    nginx_kb_per_reader: float = 0.0
    publish_p99_alone_ms: float | None = None
    publish_p99_with_ms: float | None = None
    connect_seconds: float = 0.0
    server_cpu_percent: float = 0.0  # live + proxy + api while publishing
    fanout_ms: float | None = (
        None  # the live service's time to answer/write every reader, per round
    )
    fanout_rounds: int = 0
    client_cpu_percent: float = 0.0  # the reader processes, while publishing
    publish_retries: int = 0  # publishes sent again (same nonce) after a failed attempt
    load_average: float = 0.0  # the machine's 1-minute load at the start of the measure
    # CPU time per message published (all its deliveries), robust to a busy machine where
    # wall times are not: what one message to N readers costs each part
    live_cpu_ms_per_message: float | None = None
    proxy_cpu_ms_per_message: float | None = None
    readers_cpu_ms_per_message: float | None = None
    errors: list[str] = field(default_factory=list)


# --- the stack ---------------------------------------------------------------------------


def _compose() -> list[str]:
    if (
        shutil.which("docker")
        and subprocess.run(
            ["docker", "compose", "version"], capture_output=True, check=False
        ).returncode
        == 0
    ):
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    raise NotAvailable("neither `docker compose` nor docker-compose is installed")


@contextlib.contextmanager
def stack() -> Iterator[dict[str, Any]]:
    """proxy + api + live from docker-compose.yml: the proxy's address and the pids."""
    tag = os.environ.get("IMAGE_TAG", "dev")
    for service in ("proxy", "api", "live"):
        image = f"zoscii/{service}:{tag}"
        if subprocess.run(
            ["docker", "image", "inspect", image], capture_output=True, check=False
        ).returncode:
            raise NotAvailable(f"{image} is not built (make images)")
    project = f"zoscii-bench-fanout-{uuid.uuid4().hex[:8]}"
    env_dir = Path(tempfile.mkdtemp(prefix="zoscii-fanout-"))
    env_file = env_dir / "compose.env"
    env_file.write_text(
        f"IMAGE_TAG={tag}\nZOSCII_API_PORT=0\nZOSCII_API_DIRECT_PORT=0\n"
        "ZOSCII_LIVE_DIRECT_PORT=0\nZOSCII_PROXY_ACCESS_LOG=off\n"
    )
    base = [
        *_compose(),
        "-p",
        project,
        "--env-file",
        str(env_file),
        "-f",
        str(REPO / "docker-compose.yml"),
    ]
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("ZOSCII_", "COMPOSE_"))}
    try:
        subprocess.run(
            [*base, "up", "-d", "--no-build", "proxy"],
            cwd=REPO,
            env=clean,
            check=True,
            capture_output=True,
            timeout=300,
        )
        containers = _containers(project)
        _wait_healthy(containers)
        info = {name: _inspect(cid) for name, cid in containers.items()}
        proxy = info["proxy"]
        ip = next(iter(proxy["NetworkSettings"]["Networks"].values()))["IPAddress"]
        yield {
            "ip": ip,
            "containers": containers,
            "pids": {name: c["State"]["Pid"] for name, c in info.items()},
            "images": {name: c["Config"]["Image"] for name, c in info.items()},
        }
    finally:
        subprocess.run(
            [*base, "down", "-v"],
            cwd=REPO,
            env=clean,
            capture_output=True,
            timeout=300,
            check=False,
        )
        shutil.rmtree(env_dir, ignore_errors=True)


def _containers(project: str) -> dict[str, str]:
    out = subprocess.run(
        ["docker", "ps", "-q", "--filter", f"label={PROJECT_LABEL}={project}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    found = {}
    for cid in out:
        found[_inspect(cid)["Config"]["Labels"][SERVICE_LABEL]] = cid
    return found


def _inspect(cid: str) -> dict[str, Any]:
    out = subprocess.run(["docker", "inspect", cid], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)[0]


def _wait_healthy(containers: dict[str, str], timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while True:
        states = {
            n: _inspect(c)["State"].get("Health", {}).get("Status") for n, c in containers.items()
        }
        if all(s == "healthy" for s in states.values()):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"not healthy: {states}")
        time.sleep(1)


def fresh(target: dict[str, Any]) -> dict[str, Any]:
    """The live service and the proxy restarted (their memory as at start, so a round's
    RSS growth is its readers'), healthy again; the pids of all three, and the live
    service's /metrics URL."""
    containers = target["containers"]
    subprocess.run(
        ["docker", "restart", "-t", "5", containers["live"], containers["proxy"]],
        check=True,
        capture_output=True,
        timeout=120,
    )
    # answering again (Docker's health status would wait for its next probe, 15 s)
    urls = {}
    for name, port in (("live", 8081), ("proxy", 8080)):
        info = _inspect(containers[name])
        ip = next(iter(info["NetworkSettings"]["Networks"].values()))["IPAddress"]
        urls[name] = f"http://{ip}:{port}/"
        _wait_answering(urls[name] + "healthz")
    pids: dict[str, Any] = {name: _inspect(cid)["State"]["Pid"] for name, cid in containers.items()}
    pids["live_metrics"] = urls["live"] + "metrics"
    return pids


def delivered(metrics_url: str) -> tuple[float, float]:
    """The live service's rounds so far and the seconds their fan-outs took."""
    with urllib.request.urlopen(metrics_url, timeout=10) as reply:
        text = reply.read().decode()
    values = {"count": 0.0, "sum": 0.0}
    for line in text.splitlines():
        for key in values:
            if line.startswith(f"zoscii_live_deliver_seconds_{key} "):
                values[key] = float(line.rsplit(" ", 1)[1])
    return values["count"], values["sum"]


def _wait_answering(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} does not answer")
        time.sleep(0.2)


# --- measuring the server -------------------------------------------------------------------


def _tree(pid: int) -> list[Any]:
    import psutil

    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        for process in _tree(pid):
            with contextlib.suppress(Exception):
                times = process.cpu_times()
                total += times.user + times.system
    return total


def rss(pid: int) -> int:
    return sum(p.memory_info().rss for p in _tree(pid))


# --- publishing ---------------------------------------------------------------------------


class Publisher:
    """Publishes ``payload(n)`` at ``rate`` over one keep-alive connection; latencies.

    Each publish carries a nonce of its own (``n=<run>-<sequence>``). A request that fails
    (a timeout, a reset) may still commit later, so the next sequence is never sent before
    this one's outcome is known: the same body is sent again with the same nonce until an
    answer comes, and the api stores a nonce's message once (a retry that meets the first
    attempt's commit is answered "Nonce already used."). So the readers' order check holds
    the publisher to what the protocol promises; the latency counts from the first try.
    """

    def __init__(self, ip: str, queue: str, port: int = 8080, timeout: float = 60) -> None:
        self.ip, self.queue, self.port, self.timeout = ip, queue, port, timeout
        self.sequence = 0
        self.latencies: list[float] = []
        self.failures = 0  # attempts that failed and were sent again
        self.run_id = uuid.uuid4().hex[:12]

    def run(self, rate: float, seconds: float) -> list[int]:
        connection = http.client.HTTPConnection(self.ip, self.port, timeout=self.timeout)
        sent: list[int] = []
        started = time.monotonic()
        count = int(rate * seconds)
        try:
            for number in range(count):
                due = started + number / rate
                if (wait := due - time.monotonic()) > 0:
                    time.sleep(wait)
                self.sequence += 1
                body = payload(self.sequence)
                target = f"/?action=publish&q={self.queue}&n={self.run_id}-{self.sequence}"
                began = time.perf_counter()
                for attempt in range(100):
                    try:
                        connection.request("POST", target, body=body)
                        reply = connection.getresponse()
                        reply.read()
                        if reply.status != 200:
                            raise OSError(reply.status)
                        break
                    except (OSError, http.client.HTTPException):
                        self.failures += 1
                        connection.close()
                        connection = http.client.HTTPConnection(
                            self.ip, self.port, timeout=self.timeout
                        )
                        time.sleep(min(1.0, 0.05 * (attempt + 1)))
                else:
                    raise RuntimeError(f"publish {self.sequence}: no answer after 100 tries")
                self.latencies.append(time.perf_counter() - began)
                sent.append(self.sequence)
        finally:
            connection.close()
        return sent


def first_pointer(ip: str, queue: str) -> str:
    """Publish one message and return its name (the readers start after it)."""
    connection = http.client.HTTPConnection(ip, 8080, timeout=60)
    try:
        connection.request("POST", f"/?action=publish&q={queue}", body=payload(0))
        connection.getresponse().read()
        connection.request("GET", f"/?action=fetch&q={queue}")
        reply = connection.getresponse()
        reply.read()
        return reply.headers["Content-Disposition"].split('"')[1]
    finally:
        connection.close()


# --- one round -----------------------------------------------------------------------------


async def one_round(ip: str, pids: dict[str, Any], kind: str, plan: Plan, number: int) -> Round:
    result = Round()
    queue = f"fanout{kind}{int(plan.rate)}r{number}{uuid.uuid4().hex[:6]}"
    start = await asyncio.to_thread(first_pointer, ip, queue)
    publisher = Publisher(ip, queue)
    # publishing alone: the baseline of the publish latency
    await asyncio.to_thread(publisher.run, plan.rate, min(plan.seconds, 20.0))
    alone = list(publisher.latencies)
    publisher.latencies = []

    live_before, nginx_before = rss(pids["live"]), rss(pids["proxy"])
    began = time.monotonic()
    readers = ReaderProcesses()
    try:
        await readers.start(
            kind, plan.readers, ip, 8080, queue, _last_of(start, publisher), READER_PROCESSES
        )
        result.connect_seconds = time.monotonic() - began
        await asyncio.sleep(2.0)  # every reader is parked
        server = [pids["live"], pids["proxy"], pids["api"]]
        cpu0, requests0, t0 = cpu_seconds(server), await readers.requests(), time.monotonic()
        await asyncio.sleep(plan.idle_seconds)
        idle = time.monotonic() - t0
        result.idle_cpu_percent = 100 * (cpu_seconds(server) - cpu0) / idle
        result.idle_requests_per_s = (await readers.requests() - requests0) / idle
        # the processes were restarted for this round (``fresh``): the growth is the readers'
        result.live_kb_per_reader = (rss(pids["live"]) - live_before) / plan.readers / 1024
        result.nginx_kb_per_reader = (rss(pids["proxy"]) - nginx_before) / plan.readers / 1024

        result.load_average = os.getloadavg()[0]
        requests0, t0 = await readers.measure(), time.monotonic()
        cpu0 = cpu_seconds(server)
        live0, proxy0 = cpu_seconds([pids["live"]]), cpu_seconds([pids["proxy"]])
        rounds0, spent0 = delivered(pids["live_metrics"])
        sent = await asyncio.to_thread(publisher.run, plan.rate, plan.seconds)
        deadline = time.monotonic() + 30
        while sent and time.monotonic() < deadline:
            if await readers.reached(sent[-1]) >= plan.readers:
                break
            await asyncio.sleep(0.2)
        await asyncio.sleep(1.0)
        requests1 = await readers.requests()
        elapsed = time.monotonic() - t0
        result.server_cpu_percent = 100 * (cpu_seconds(server) - cpu0) / elapsed
        live1, proxy1 = cpu_seconds([pids["live"]]), cpu_seconds([pids["proxy"]])
        rounds1, spent1 = delivered(pids["live_metrics"])
        tally = await readers.stop(plan.readers)
        result.client_cpu_percent = 100 * readers.cpu_seconds / elapsed
    finally:
        readers.kill()
    if sent:
        result.live_cpu_ms_per_message = 1000 * (live1 - live0) / len(sent)
        result.proxy_cpu_ms_per_message = 1000 * (proxy1 - proxy0) / len(sent)
        result.readers_cpu_ms_per_message = 1000 * readers.cpu_seconds / len(sent)
    result.fanout_rounds = int(rounds1 - rounds0)
    if result.fanout_rounds:
        result.fanout_ms = 1000 * (spent1 - spent0) / result.fanout_rounds
    result.published = len(sent)
    result.publish_retries = publisher.failures
    result.reached = tally.reached_all(sent)
    result.order_errors = tally.order_errors + tally.gaps
    latencies = sorted(tally.latencies)
    if latencies:
        result.delivery_p50_ms = 1000 * percentile(latencies, 50)
        result.delivery_p99_ms = 1000 * percentile(latencies, 99)
    result.requests_per_s = (requests1 - requests0) / elapsed
    # the bound: 1.1 x deliveries/s (one per message per reader) + N / wait
    result.ideal_requests_per_s = (
        1.1 * len(sent) * plan.readers / elapsed + plan.readers / WAIT
        if kind == "longpoll"
        else 0.0
    )
    if alone:
        result.publish_p99_alone_ms = 1000 * percentile(sorted(alone), 99)
    if publisher.latencies:
        result.publish_p99_with_ms = 1000 * percentile(sorted(publisher.latencies), 99)
    result.errors = tally.errors[:5]
    await asyncio.sleep(2.0)  # the server lets go of the closed connections
    return result


def _last_of(start: str, publisher: Publisher) -> str:
    """The readers start after the baseline's messages: the newest name now."""
    connection = http.client.HTTPConnection(publisher.ip, publisher.port, timeout=60)
    pointer = start
    try:
        while True:
            connection.request(
                "GET", f"/?action=fetch&q={publisher.queue}&after={pointer}&count=1000"
            )
            reply = connection.getresponse()
            reply.read()
            last = reply.headers.get(LAST)
            if not last:
                return pointer
            pointer = last
    finally:
        connection.close()


# --- the scenario ---------------------------------------------------------------------------


def _raise_nofile(wanted: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def plans(quick: bool) -> list[tuple[str, Plan]]:
    many = 1000 if quick else 10_000
    rounds = 2 if quick else 3
    return [
        (
            f"{many:,} readers, 1 publish/s",
            Plan(many, 1.0, 10 if quick else 30, 5 if quick else 35, rounds),
        ),
        ("1,000 readers, 100 publishes/s", Plan(1000, 100.0, 5 if quick else 15, 3, rounds)),
    ]


def run(ctx: Context) -> dict[str, Any]:
    selected = [
        k for k in os.environ.get("ZOSCII_BENCH_FANOUT_KINDS", ",".join(KINDS)).split(",") if k
    ]
    chosen = plans(ctx.quick)
    rates = os.environ.get("ZOSCII_BENCH_FANOUT_RATES")  # e.g. "100": only those plans
    if rates:
        chosen = [(label, plan) for label, plan in chosen if f"{plan.rate:g}" in rates.split(",")]
    most = max(plan.readers for _, plan in chosen)
    nofile = _raise_nofile(most + 512)
    if nofile < most + 256:
        raise NotAvailable(f"ulimit -n is {nofile}: {most + 256} needed")
    samples: dict[str, dict[str, list[dict[str, Any]]]] = {}
    with stack() as target:
        log.info("stack: %s", target["images"])
        shares = os.environ.get("ZOSCII_BENCH_FANOUT_LIVE_CPU_SHARES")
        if shares:  # an experiment: the live service's CPU weight against api and proxy (1024)
            subprocess.run(
                ["docker", "update", "--cpu-shares", shares, target["containers"]["live"]],
                check=True,
                capture_output=True,
            )
            log.info("live service: --cpu-shares %s", shares)
        for label, plan in chosen:
            per_kind: dict[str, list[dict[str, Any]]] = {k: [] for k in selected}
            for number in range(plan.rounds):
                order = selected if number % 2 == 0 else list(reversed(selected))
                for kind in order:
                    pids = fresh(target)
                    outcome = asyncio.run(one_round(target["ip"], pids, kind, plan, number))
                    log.info("%s, %s, round %d: %s", label, kind, number + 1, outcome)
                    per_kind[kind].append(outcome.__dict__)
            samples[label] = per_kind
    _report(ctx, samples)
    return {"stack": "docker-compose.yml proxy + api + live", "samples": samples}


def _median(values: list[float]) -> tuple[float | None, str]:
    values = [v for v in values if v is not None]
    if not values:
        return None, "no samples"
    note = f"median, range {min(values):,.1f}-{max(values):,.1f} over {len(values)} rounds"
    return statistics.median(values), note


def _report(ctx: Context, samples: dict[str, dict[str, list[dict[str, Any]]]]) -> None:
    for label, per_kind in samples.items():
        for kind, rounds in per_kind.items():
            scenario = f"fan-out {label}, {kind}"
            reached = sum(r["reached"] for r in rounds)
            published = sum(r["published"] for r in rounds)
            disorder = sum(r["order_errors"] for r in rounds)
            retries = sum(r.get("publish_retries", 0) for r in rounds)
            idle_requests = statistics.median(r["idle_requests_per_s"] for r in rounds)
            client_cpu = statistics.median(r.get("client_cpu_percent", 0.0) for r in rounds)
            fanout_rounds = statistics.median(r.get("fanout_rounds", 0) for r in rounds)
            nginx_kb = statistics.median(r["nginx_kb_per_reader"] for r in rounds)
            loads = [r.get("load_average", 0.0) for r in rounds]
            ideal = max(r["ideal_requests_per_s"] for r in rounds)
            requests_note = (
                f"ideal <= {ideal:.0f}" if kind == "longpoll" else "one request per stream"
            )
            rows = [
                (
                    "reached every reader",
                    [100 * r["reached"] / max(1, r["published"]) for r in rounds],
                    "%",
                    True,
                    f"{reached}/{published} messages; order errors {disorder}; "
                    f"publishes sent again {retries}",
                ),
                (
                    "delivery p50",
                    [r["delivery_p50_ms"] for r in rounds],
                    "ms",
                    False,
                    f"load average {min(loads):.1f}-{max(loads):.1f} (2 cores)",
                ),
                ("delivery p99", [r["delivery_p99_ms"] for r in rounds], "ms", False, ""),
                (
                    "live fan-out per round",
                    [r.get("fanout_ms") for r in rounds],
                    "ms",
                    False,
                    "the live service answering or writing to every reader of one round "
                    f"(median {fanout_rounds:.0f} rounds per measure)",
                ),
                (
                    "CPU per message: live",
                    [r.get("live_cpu_ms_per_message") for r in rounds],
                    "ms",
                    False,
                    "CPU time of the live service per message published, all its deliveries",
                ),
                (
                    "CPU per message: nginx",
                    [r.get("proxy_cpu_ms_per_message") for r in rounds],
                    "ms",
                    False,
                    "the proxy's workers, relaying it to every reader",
                ),
                (
                    "CPU per message: readers",
                    [r.get("readers_cpu_ms_per_message") for r in rounds],
                    "ms",
                    False,
                    "the bench's reader processes, receiving and checking it",
                ),
                (
                    "server CPU publishing",
                    [r.get("server_cpu_percent") for r in rounds],
                    "% core",
                    False,
                    f"live + proxy + api; the {READER_PROCESSES} reader processes: "
                    f"{client_cpu:.0f} % of a core",
                ),
                (
                    "reader requests",
                    [r["requests_per_s"] for r in rounds],
                    "req/s",
                    False,
                    requests_note,
                ),
                (
                    "idle server CPU",
                    [r["idle_cpu_percent"] for r in rounds],
                    "% core",
                    False,
                    "live + proxy + api while every reader waits, nothing published; "
                    f"idle reader requests/s {idle_requests:.0f}",
                ),
                (
                    "live memory per reader",
                    [r["live_kb_per_reader"] for r in rounds],
                    "KiB",
                    False,
                    f"RSS growth / readers; nginx adds {nginx_kb:.1f} KiB",
                ),
                ("publish p99 alone", [r["publish_p99_alone_ms"] for r in rounds], "ms", False, ""),
                (
                    "publish p99 with readers",
                    [r["publish_p99_with_ms"] for r in rounds],
                    "ms",
                    False,
                    "",
                ),
            ]
            ratios = [
                r["publish_p99_with_ms"] / r["publish_p99_alone_ms"]
                for r in rounds
                if r["publish_p99_with_ms"] and r["publish_p99_alone_ms"]
            ]
            rows.append(("publish p99 ratio with/without", ratios, "x", False, ""))
            for metric, values, unit, higher, extra in rows:
                value, note = _median(values)
                ctx.results.rows.append(
                    Row(
                        scenario,
                        metric,
                        value,
                        unit,
                        higher_is_better=higher,
                        note=f"{note}; {extra}".rstrip("; "),
                    )
                )
