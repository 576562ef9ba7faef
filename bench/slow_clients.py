"""Slow and idle clients (issue 15): a normal client's publishes while other connections
hold half a request head, or sit idle after one request, directly against gunicorn vs
through the proxy (``zoscii/proxy``, nginx, as docker-compose.yml runs it).

The api runs as the ``zoscii/api:dev`` image with the shipped defaults (2 workers x 32
threads, the api's 20 s head deadline), the proxy as ``zoscii/proxy:dev`` in front of it,
both hardened as in docker-compose.yml, on a network of their own; the bench reaches
both at their container addresses (no docker-proxy in between). Variants:

* ``none``: nobody else (the proxy's own cost).
* ``half-open``: 1,000 connections (quick: 300) that each send the start of a request
  head and stop; one that the server cuts is opened again, as an attacker would.
* ``idle keep-alive``: 10,000 connections (quick: 2,000) that each make one request
  (``GET /healthz``), get its answer and then stay idle, not reopened (the measure starts
  once every answer is in). Needs that many file descriptors:
  the soft ``ulimit -n`` is raised to the hard one, and the variant is left out when the
  hard limit is too low.

In each round both targets run back to back, alternating which goes first; a measure is
one client publishing 1 KiB messages over one keep-alive connection for a few seconds
(the request in flight at the end is waited for, up to 60 s). Reported per variant and
target: publish p50 and p99 in ms and messages/s, median (min-max) over the rounds, and
what the client saw fail (timeouts, resets). ``python -m bench.run --only slow-clients``.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import resource
import selectors
import socket
import statistics
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from bench.context import Context
from bench.external import NotAvailable
from bench.harness import percentile
from bench.report import Row

log = logging.getLogger(__name__)

API_IMAGE = "zoscii/api:dev"
PROXY_IMAGE = "zoscii/proxy:dev"
PORT = 8080
HALF_HEAD = b"POST /?action=publish&q=slowloris HTTP/1.1\r\nHost: mq\r\nContent-Le"
IDLE_REQUEST = b"GET /healthz HTTP/1.1\r\nHost: mq\r\n\r\n"
PAYLOAD = bytes(range(256)) * 4
REQUEST_TIMEOUT = 60.0
HARDENING = [
    "--read-only",
    "--tmpfs",
    "/tmp",
    "--cap-drop",
    "ALL",
    "--security-opt",
    "no-new-privileges:true",
]


@dataclass
class Measure:
    latencies: list[float] = field(default_factory=list)  # seconds, acknowledged publishes
    failures: dict[str, int] = field(default_factory=dict)  # what went wrong, how often
    seconds: float = 0.0
    held: int = 0  # other connections still open at the end
    reopened: int = 0  # half-open connections the server cut and the attacker reopened

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds else 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "publishes": len(self.latencies),
            "p50_ms": round(percentile(self.latencies, 50) * 1000, 2) if self.latencies else None,
            "p99_ms": round(percentile(self.latencies, 99) * 1000, 2) if self.latencies else None,
            "max_ms": round(max(self.latencies) * 1000, 1) if self.latencies else None,
            "msg_per_s": round(self.rate, 1),
            "failures": dict(self.failures),
            "held_at_end": self.held,
            "reopened": self.reopened,
        }


# ---- the two containers ---------------------------------------------------------------


def _docker(*args: str, timeout: float = 120) -> str:
    done = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args[:3])}: {done.stderr.strip()[-400:]}")
    return done.stdout.strip()


def _available() -> str | None:
    for image in (API_IMAGE, PROXY_IMAGE):
        try:
            _docker("image", "inspect", image, timeout=30)
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
            return f"{image} not usable ({exc}); build it with `make images`"
    return None


@contextlib.contextmanager
def stack() -> Iterator[dict[str, str]]:
    """api + proxy on a network of their own; yields each one's ``ip``."""
    name = f"zoscii-bench-slow-{uuid.uuid4().hex[:8]}"
    created: list[tuple[str, str]] = []
    try:
        _docker("network", "create", name)
        created.append(("network", name))
        _docker("volume", "create", name)
        created.append(("volume", name))
        _docker(
            "run", "-d", "--name", f"{name}-api", "--network", name,
            "--network-alias", "api", *HARDENING, "-v", f"{name}:/data", API_IMAGE,
        )  # fmt: skip
        created.append(("container", f"{name}-api"))
        _docker(
            "run", "-d", "--name", f"{name}-proxy", "--network", name,
            *HARDENING, "--tmpfs", "/var/spool/zoscii-proxy:uid=10001,gid=10001,mode=0700",
            PROXY_IMAGE,
        )  # fmt: skip
        created.append(("container", f"{name}-proxy"))
        ips = {
            target: _docker(
                "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
                f"{name}-{target}",
            )
            for target in ("api", "proxy")
        }  # fmt: skip
        for target, ip in ips.items():
            _wait_healthy(ip, target)
        yield ips
    finally:
        for kind, what in reversed(created):
            with contextlib.suppress(Exception):
                if kind == "container":
                    _docker("rm", "-f", "-v", what)
                else:
                    _docker(kind, "rm", what)


def _wait_healthy(ip: str, target: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError, http.client.HTTPException):
            conn = http.client.HTTPConnection(ip, PORT, timeout=5)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{target} at {ip} not healthy after {timeout:.0f} s")
        time.sleep(0.5)


# ---- the other connections ------------------------------------------------------------


class Crowd:
    """``count`` connections to ``ip``: half-open (kept at ``count``: a cut one is
    reopened) or idle after one request (not reopened)."""

    def __init__(self, ip: str, count: int, kind: str) -> None:
        self.ip, self.count, self.kind = ip, count, kind
        self.sockets: set[socket.socket] = set()
        self.reopened = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._keep, daemon=True)
        self._selector = selectors.DefaultSelector()

    def _open_one(self) -> bool:
        sock = socket.socket()
        sock.settimeout(1.0)  # beyond the server's backlog a connect would hang
        try:
            sock.connect((self.ip, PORT))
            sock.sendall(HALF_HEAD if self.kind == "half-open" else IDLE_REQUEST)
        except OSError:
            sock.close()
            return False
        sock.setblocking(False)
        self.sockets.add(sock)
        if self.kind == "half-open":
            self._selector.register(sock, selectors.EVENT_READ)
        return True

    def __enter__(self) -> Crowd:
        failed = 0
        for _ in range(self.count):
            if not self._open_one():
                failed += 1
        if failed:
            log.info("%s: %d of %d connections not opened", self.kind, failed, self.count)
        if self.kind == "half-open":
            self._thread.start()
        else:
            self._await_answers()
        return self

    def _await_answers(self, timeout: float = 180.0) -> None:
        """Idle: wait until each connection has its one answer (the server has done the
        work), so that the measure sees only what idle connections cost."""
        waiting = {sock for sock in self.sockets}
        with selectors.DefaultSelector() as selector:
            for sock in waiting:
                selector.register(sock, selectors.EVENT_READ)
            deadline = time.monotonic() + timeout
            while waiting and time.monotonic() < deadline:
                for key, _ in selector.select(timeout=1.0):
                    sock = key.fileobj
                    try:
                        data = sock.recv(65536)  # type: ignore[union-attr]
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    if b"\r\n\r\n" in data or not data:
                        selector.unregister(sock)
                        waiting.discard(sock)  # type: ignore[arg-type]
                    if not data:
                        self.sockets.discard(sock)  # type: ignore[arg-type]
                        sock.close()  # type: ignore[union-attr]
        log.info(
            "idle: %d connections answered and open, %d unanswered",
            len(self.sockets) - len(waiting),
            len(waiting),
        )

    def _keep(self) -> None:
        """Half-open: whatever the server answers or closes is closed and opened again."""
        while not self._stop.is_set():
            for key, _ in self._selector.select(timeout=0.2):
                sock = key.fileobj
                self._selector.unregister(sock)
                self.sockets.discard(sock)  # type: ignore[arg-type]
                sock.close()  # type: ignore[union-attr]
                if not self._stop.is_set() and self._open_one():
                    self.reopened += 1

    def still_open(self) -> int:
        """Connections the server has not closed (half-open: nor answered)."""
        held = 0
        for sock in list(self.sockets):
            try:
                data = sock.recv(1, socket.MSG_PEEK)
            except BlockingIOError:
                held += 1
                continue
            except OSError:
                continue
            held += bool(data) and self.kind == "idle keep-alive"
        return held

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        for sock in list(self.sockets):
            sock.close()
        self.sockets.clear()
        self._selector.close()


# ---- the normal client ----------------------------------------------------------------


def publish_for(ip: str, seconds: float, queue: str) -> Measure:
    """One client, one keep-alive connection, 1 KiB publishes for ``seconds``."""
    measure = Measure()
    target = f"/?action=publish&q={queue}"
    headers = {"Content-Type": "application/octet-stream", "Connection": "keep-alive"}
    conn: http.client.HTTPConnection | None = None
    began = time.perf_counter()
    while time.perf_counter() - began < seconds:
        if conn is None:
            conn = http.client.HTTPConnection(ip, PORT, timeout=REQUEST_TIMEOUT)
        start = time.perf_counter()
        try:
            conn.request("POST", target, body=PAYLOAD, headers=headers)
            reply = conn.getresponse()
            body = reply.read()
        except (OSError, http.client.HTTPException) as exc:
            kind = "timeout" if isinstance(exc, TimeoutError) else type(exc).__name__
            measure.failures[kind] = measure.failures.get(kind, 0) + 1
            conn.close()
            conn = None
            continue
        if reply.status == 200 and b'"error":""' in body:
            measure.latencies.append(time.perf_counter() - start)
        else:
            key = f"HTTP {reply.status}"
            measure.failures[key] = measure.failures.get(key, 0) + 1
        if reply.will_close:
            conn.close()
            conn = None
    measure.seconds = time.perf_counter() - began
    if conn is not None:
        conn.close()
    return measure


def measure_once(ip: str, variant: str, count: int, seconds: float, queue: str) -> Measure:
    if count == 0:
        return publish_for(ip, seconds, queue)
    with Crowd(ip, count, variant) as crowd:
        time.sleep(2.0)  # let the server take them in
        measure = publish_for(ip, seconds, queue)
        measure.held = crowd.still_open()
        measure.reopened = crowd.reopened
    return measure


# ---- the scenario ---------------------------------------------------------------------


def _raise_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _range(values: list[float]) -> str:
    if not values:
        return "no samples"
    return f"range {min(values):,.1f}-{max(values):,.1f} over {len(values)} rounds"


def run(ctx: Context) -> dict[str, Any]:
    problem = _available()
    if problem:
        raise NotAvailable(problem)
    nofile = _raise_nofile()
    half, idle = (300, 2000) if ctx.quick else (1000, 10_000)
    variants: list[tuple[str, int]] = [("none", 0), ("half-open", half)]
    skipped = {}
    if nofile >= idle + 512:
        variants.append(("idle keep-alive", idle))
    else:
        skipped["idle keep-alive"] = f"ulimit -n is {nofile}, {idle + 512} needed"
    rounds = 1 if ctx.quick else 3
    seconds = 4.0 if ctx.quick else 10.0
    samples: dict[str, dict[str, list[dict[str, Any]]]] = {}
    with stack() as ips:
        for variant, count in variants:
            per_target: dict[str, list[dict[str, Any]]] = {"direct": [], "proxy": []}
            for number in range(rounds):
                order = ["direct", "proxy"] if number % 2 == 0 else ["proxy", "direct"]
                for target in order:
                    ip = ips["api" if target == "direct" else "proxy"]
                    queue = f"slow{number}{target}"
                    result = measure_once(ip, variant, count, seconds, queue).summary()
                    log.info("%s x%d, round %d, %s: %s", variant, count, number + 1, target, result)
                    per_target[target].append(result)
                    time.sleep(2.0)  # the server lets go of the closed connections
            samples[f"{variant} x{count}"] = per_target
    _report(ctx, samples)
    return {
        "api": f"{API_IMAGE}, 2 workers x 32 threads (defaults)",
        "proxy": PROXY_IMAGE,
        "rounds": rounds,
        "seconds_per_measure": seconds,
        "skipped": skipped,
        "samples": samples,
    }


def _report(ctx: Context, samples: dict[str, dict[str, list[dict[str, Any]]]]) -> None:
    for variant, per_target in samples.items():
        for target, results in per_target.items():
            scenario = f"slow clients: {variant}, {target}"
            failures: dict[str, int] = {}
            for result in results:
                for key, value in result["failures"].items():
                    failures[key] = failures.get(key, 0) + value
            note = (
                "failed: " + ", ".join(f"{k} {v}" for k, v in failures.items()) if failures else ""
            )
            for metric, key, unit, higher in (
                ("publish p50", "p50_ms", "ms", False),
                ("publish p99", "p99_ms", "ms", False),
                ("publishes", "msg_per_s", "msg/s", True),
            ):
                values = [r[key] for r in results if r[key] is not None]
                ctx.results.rows.append(
                    Row(
                        scenario,
                        metric,
                        statistics.median(values) if values else None,
                        unit,
                        higher_is_better=higher,
                        note=f"median, {_range(values)}; {note}".rstrip("; "),
                    )
                )
