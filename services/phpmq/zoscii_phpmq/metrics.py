"""Prometheus metrics of the gateway, in a registry of its own (no import-time state).

No queue names as labels: a queue name can be a secret capability, and the counters
here are about the gateway, not the queues (statissa and the api count per queue).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from zosciimq.service.build_info import register_build_info

PREFIX = "zoscii_phpmq"
COMMIT_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
EVENTS = ("received", "sent", "acked", "requeued", "dead_lettered")


class PhpmqMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        register_build_info(self.registry, "phpmq")
        r = self.registry
        self.open_connections = Gauge(
            f"{PREFIX}_open_connections", "PHPMQ connections open now.", registry=r
        )
        self.connections = Counter(
            f"{PREFIX}_connections",
            "Connections by result: accepted; refused (every slot of the gateway or of the "
            "address held by an established connection); evicted (pending, no first message "
            "yet, its slot given to a newer connection).",
            ["result"],
            registry=r,
        )
        self.consumers = Gauge(
            f"{PREFIX}_consumers", "Consume requests active (connection and queue).", registry=r
        )
        self.unacked = Gauge(
            f"{PREFIX}_unacked", "Messages dispatched and not yet acknowledged.", registry=r
        )
        self.messages = Counter(
            f"{PREFIX}_messages",
            "Messages by event: received (001, published), sent (003, dispatched), acked "
            "(004), requeued (005), dead_lettered (006).",
            ["event"],
            registry=r,
        )
        self.commit_messages = Histogram(
            f"{PREFIX}_commit_messages",
            "Messages (001) per commit: a connection's messages read back to back are "
            "published together, one commit (one log flush) per queue.",
            buckets=COMMIT_BUCKETS,
            registry=r,
        )
        self.bytes = Counter(
            f"{PREFIX}_content_bytes",
            "Message content bytes, received (001) and sent (003).",
            ["direction"],
            registry=r,
        )
        self.protocol_errors = Counter(
            f"{PREFIX}_protocol_errors",
            "Connections the gateway closed, by reason (a malformed frame, unauthenticated, "
            "forbidden, a storage error...).",
            ["reason"],
            registry=r,
        )
        self.ignored = Counter(
            f"{PREFIX}_ignored_ids",
            "Acks, requeues and dead letters answered by nothing, by result: unknown (an id "
            "this process never dispatched or forgot) or fenced (leased again since).",
            ["result"],
            registry=r,
        )
        self.released = Counter(
            f"{PREFIX}_released",
            "Unacknowledged messages released for redelivery when their connection closed.",
            registry=r,
        )
        for event in EVENTS:
            self.messages.labels(event)
        for direction in ("received", "sent"):
            self.bytes.labels(direction)
        for result in ("accepted", "refused", "evicted"):
            self.connections.labels(result)
