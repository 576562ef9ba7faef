"""Prometheus metrics of the api, correct under several gunicorn workers.

In multiprocess mode (``PROMETHEUS_MULTIPROC_DIR`` set, as the gunicorn config does)
every worker writes its samples to files in that directory and ``/metrics`` adds them
up with prometheus-client's MultiProcessCollector. Without it (tests, a single
process) the app's own registry is served.

Queue names become label values: they are secret capabilities for some users, so
``/metrics`` must not be exposed to partners (see SECURITY notes in the README).
"""

from __future__ import annotations

import os

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)

from zosciimq.service.build_info import register_build_info

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
WAIT_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120)


class ApiMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        register_build_info(r, "api")
        self.requests = Counter(
            "zoscii_api_requests",
            "HTTP requests by action and status",
            ["action", "status"],
            registry=r,
        )
        self.latency = Histogram(
            "zoscii_api_request_duration_seconds",
            "Time to answer a request, without the time a long poll waited for a message",
            ["action"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.waited = Histogram(
            "zoscii_api_wait_seconds",
            "Time a long poll (fetch or consume with wait=) waited for a message",
            ["action"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.received_bytes = Counter(
            "zoscii_api_received_bytes", "Message bytes received", ["action"], registry=r
        )
        self.sent_bytes = Counter(
            "zoscii_api_sent_bytes", "Message bytes sent", ["action"], registry=r
        )
        self.published = Counter(
            "zoscii_api_messages_published", "Messages published", ["queue"], registry=r
        )
        self.fetched = Counter(
            "zoscii_api_messages_fetched", "Messages fetched", ["queue"], registry=r
        )
        self.admin_actions = Counter(
            "zoscii_api_admin_actions",
            "Admin actions (queues, purge, delete, replay) by outcome: done, failed, refused",
            ["action", "outcome"],
            registry=r,
        )
        self.admin_removed = Counter(
            "zoscii_api_admin_removed_messages",
            "Messages removed by purge and delete",
            ["action"],
            registry=r,
        )

        # labels() takes a lock and builds a key on every call; an answered request's
        # children are looked up here instead (actions and statuses are bounded sets).
        self._answered: dict[tuple[str, int], tuple[Counter, Histogram]] = {}
        # A publish's or a fetch's two counters, by action and queue (as many as the
        # children labels() keeps anyway).
        self._message_counters: dict[tuple[str, str], tuple[Counter, Counter]] = {}

    def published_messages(self, queue: str, messages: int, received_bytes: int) -> None:
        """Count messages published to ``queue`` and the bytes received for them."""
        self._count_messages("publish", queue, messages, received_bytes)

    def fetched_messages(self, queue: str, messages: int, sent_bytes: int) -> None:
        """Count messages served from ``queue`` and their bytes."""
        self._count_messages("fetch", queue, messages, sent_bytes)

    def _count_messages(self, action: str, queue: str, messages: int, size: int) -> None:
        counters = self._message_counters.get((action, queue))
        if counters is None:
            if action == "publish":
                counters = (self.published.labels(queue), self.received_bytes.labels(action))
            else:
                counters = (self.fetched.labels(queue), self.sent_bytes.labels(action))
            self._message_counters[(action, queue)] = counters
        counters[0].inc(messages)
        counters[1].inc(size)

    def admin_action(self, action: str, outcome: str, *, removed: int = 0) -> None:
        """Count one admin action (``zoscii_api.audit``) and the messages it removed."""
        self.admin_actions.labels(action, outcome).inc()
        if removed:
            self.admin_removed.labels(action).inc(removed)

    def answered(self, action: str, status: int, seconds: float, waited: float) -> None:
        """Count one answered request: ``seconds`` to answer it, ``waited`` of them in a
        long poll (kept apart, so a fetch that waited 20 s is not a slow fetch)."""
        children = self._answered.get((action, status))
        if children is None:
            children = (self.requests.labels(action, str(status)), self.latency.labels(action))
            self._answered[(action, status)] = children
        children[0].inc()
        children[1].observe(seconds - waited)
        if waited:
            self.waited.labels(action).observe(waited)

    def exposition(self) -> tuple[bytes, str]:
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
            register_build_info(registry, "api")  # not a multiprocess metric: per scrape
            return generate_latest(registry), CONTENT_TYPE_LATEST
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
