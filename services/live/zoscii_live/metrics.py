"""Prometheus metrics of the live service, in a registry of its own (no import-time state).

``zoscii_live_messages_fetched_total{queue}`` counts messages served to readers per
queue, as the api's ``zoscii_api_messages_fetched_total`` does for what it serves (a
waiting fetch answered here is one the api no longer sees). The rest is about the
service: connections by kind, waiting readers, rounds, disconnects by reason.
"""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
)

PREFIX = "zoscii_live"
KINDS = ("http", "longpoll", "consume", "sse", "websocket")
ACTIONS = ("fetch", "consume", "stream", "none", "invalid")
MAX_CHILDREN = 10_000  # label sets remembered (queue names are unbounded)


class LiveMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        ProcessCollector(registry=r)
        self.connections = Gauge(
            f"{PREFIX}_connections",
            "Open connections by what they do: http (between requests), longpoll (a "
            "waiting fetch), consume (a waiting consume), sse, websocket.",
            ["kind"],
            registry=r,
        )
        self.refused = Counter(
            f"{PREFIX}_refused_connections",
            "Connections refused over ZOSCII_LIVE_MAX_CONNECTIONS.",
            registry=r,
        )
        self.requests = Counter(
            f"{PREFIX}_requests",
            "Requests answered (a stream counts when it starts), by action and status.",
            ["action", "status"],
            registry=r,
        )
        self.fetched = Counter(
            f"{PREFIX}_messages_fetched",
            "Messages served to readers (long-poll, streams, consumes), by queue.",
            ["queue"],
            registry=r,
        )
        self.sent_bytes = Counter(
            f"{PREFIX}_sent_bytes", "Message bytes sent to readers, by kind.", ["kind"], registry=r
        )
        self.followed_queues = Gauge(
            f"{PREFIX}_followed_queues", "Queues this process follows now.", registry=r
        )
        self.round_seconds = Histogram(
            f"{PREFIX}_round_seconds",
            "Time one round takes to read the new messages of a queue (in a thread).",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
            registry=r,
        )
        self.deliver_seconds = Histogram(
            f"{PREFIX}_deliver_seconds",
            "Time one round takes to answer or write to every reader of its queue (on the "
            "event loop: the fan-out's own cost).",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=r,
        )
        self.disconnects = Counter(
            f"{PREFIX}_disconnects",
            "Streams this service ended, by reason: slow_reader (past "
            "ZOSCII_LIVE_MAX_PENDING_BYTES), queue_not_found, stopping.",
            ["reason"],
            registry=r,
        )
        self.errors = Counter(
            f"{PREFIX}_errors", "Unexpected errors, by where.", ["where"], registry=r
        )
        self.watch_mode = Gauge(
            f"{PREFIX}_watch_mode",
            "1 for the way index changes are noticed: inotify or poll.",
            ["mode"],
            registry=r,
        )
        for kind in KINDS:
            self.connections.labels(kind)
        for reason in ("slow_reader", "queue_not_found", "stopping"):
            self.disconnects.labels(reason)

        self._children: dict[tuple[object, ...], Counter] = {}

    def count(self, queue: str, messages: int, size: int, kind: str) -> None:
        self._child(self.fetched, queue).inc(messages)
        self._child(self.sent_bytes, kind).inc(size)

    def requested(self, action: str, status: str) -> None:
        self._child(self.requests, action, status).inc()

    def _child(self, family: Counter, *labels: str) -> Counter:
        """``family.labels(*labels)``, looked up once (it takes a lock and builds a
        tuple each time: per request, that shows)."""
        key = (id(family), *labels)
        child = self._children.get(key)
        if child is None:
            if len(self._children) > MAX_CHILDREN:
                self._children.clear()
            child = self._children[key] = family.labels(*labels)
        return child
