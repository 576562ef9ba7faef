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

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class ApiMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "zoscii_api_requests",
            "HTTP requests by action and status",
            ["action", "status"],
            registry=r,
        )
        self.latency = Histogram(
            "zoscii_api_request_duration_seconds",
            "Time to answer a request",
            ["action"],
            buckets=LATENCY_BUCKETS,
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

    def exposition(self) -> tuple[bytes, str]:
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            return generate_latest(registry), CONTENT_TYPE_LATEST
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
