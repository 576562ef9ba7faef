"""Prometheus metrics of the gateway, in a registry of its own (no import-time state).

No queue or pipe names as labels: a name can be a secret capability, and the counters
here are about the gateway (statissa and the api count per queue).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

PREFIX = "zoscii_zmq"
SOCKETS = ("zpipes", "request", "push", "work", "pub")


class ZmqMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.sessions = Gauge(f"{PREFIX}_zpipes_sessions", "zpipes clients known now.", registry=r)
        self.pipes = Gauge(
            f"{PREFIX}_zpipes_pipes", "Pipes with a reader or writer on this gateway.", registry=r
        )
        self.requests = Counter(
            f"{PREFIX}_zpipes_requests",
            "zpipes requests by command (INPUT, OUTPUT, READ, WRITE, CLOSE, PING, and the "
            "seed interface's OPEN, ...).",
            ["command"],
            registry=r,
        )
        self.replies = Counter(
            f"{PREFIX}_zpipes_replies", "zpipes replies by message.", ["reply"], registry=r
        )
        self.chunk_bytes = Counter(
            f"{PREFIX}_zpipes_bytes",
            "Pipe bytes written (durable) and read (answered).",
            ["direction"],
            registry=r,
        )
        self.expired = Counter(
            f"{PREFIX}_zpipes_expired", "zpipes clients dropped for silence.", registry=r
        )
        self.errors = Counter(
            f"{PREFIX}_errors",
            "Requests refused, by socket and reason (a malformed frame, unauthenticated, "
            "forbidden, too large, a storage error...).",
            ["socket", "reason"],
            registry=r,
        )
        self.messages = Counter(
            f"{PREFIX}_messages",
            "Messages through the ØMQ patterns, by socket and event (published, fetched, "
            "delivered, acked, requeued, dead_lettered, sent).",
            ["socket", "event"],
            registry=r,
        )
        self.feeds = Gauge(
            f"{PREFIX}_pub_feeds", "PUB topics being followed (queue or resume).", registry=r
        )
        self.waiting_workers = Gauge(
            f"{PREFIX}_work_waiting", "Workers waiting for a message.", registry=r
        )
        for direction in ("written", "read"):
            self.chunk_bytes.labels(direction)
