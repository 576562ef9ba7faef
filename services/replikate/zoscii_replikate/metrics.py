"""Prometheus metrics of the replicator, in a registry of its own (no import-time state).

The service makes one for all its jobs, a test one per replicator, so that nothing leaks
between two of them; the ops port (``zosciimq.service.ops``) serves its ``registry``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

PREFIX = "zoscii_replikate"


class ReplikateMetrics:
    """Every metric a job updates, labelled by job (and reason or outcome)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.messages = Counter(
            f"{PREFIX}_messages", "Messages replicated (written locally).", ["job"], registry=r
        )
        self.bytes = Counter(f"{PREFIX}_bytes", "Bytes replicated.", ["job"], registry=r)
        self.duplicates = Counter(
            f"{PREFIX}_duplicates",
            "Messages found already written (a repeat after a crash), pointer moved on.",
            ["job"],
            registry=r,
        )
        self.errors = Counter(
            f"{PREFIX}_errors", "Failed runs by reason.", ["job", "reason"], registry=r
        )
        self.runs = Counter(
            f"{PREFIX}_runs",
            "Runs by outcome (caught_up, capped, error, locked, backoff, stopped).",
            ["job", "outcome"],
            registry=r,
        )
        self.last_success = Gauge(
            f"{PREFIX}_last_success_timestamp_seconds",
            "When a run last ended without error (Unix time).",
            ["job"],
            registry=r,
        )
        self.lag = Gauge(
            f"{PREFIX}_lag_seconds",
            "How far behind the source: 0 when caught up, else now minus the time in the "
            "name of the last message replicated.",
            ["job"],
            registry=r,
        )
        self.fetches = Counter(
            f"{PREFIX}_fetches",
            "Fetch requests sent to the source (a batch or a single message each).",
            ["job"],
            registry=r,
        )
        self.batch_support = Gauge(
            f"{PREFIX}_source_batch_support",
            "1: the source answers batch fetches; 0: it does not (the original: one message "
            "per request), or the job's mode is original; -1: not known yet.",
            ["job"],
            registry=r,
        )
        self.backoff = Gauge(
            f"{PREFIX}_backoff_seconds",
            "Current back-off after failures (0: none).",
            ["job"],
            registry=r,
        )
