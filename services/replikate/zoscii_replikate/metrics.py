"""Prometheus metrics of the replicator, in a registry of its own (no import-time state).

The service makes one for all its jobs, a test one per replicator, so that nothing leaks
between two of them; the ops port (``zosciimq.service.ops``) serves its ``registry``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from zosciimq.service.build_info import register_build_info

PREFIX = "zoscii_replikate"
# The job's name. Not "job": Prometheus attaches its own "job" (the scrape job) to every
# series, and a target's "job" would be renamed "exported_job" on the way in.
LABEL = "replication"


class ReplikateMetrics:
    """Every metric a job updates, labelled by the job's name (``replication``), and reason
    or outcome."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        register_build_info(self.registry, "replikate")
        r = self.registry
        self.messages = Counter(
            f"{PREFIX}_messages", "Messages replicated (written locally).", [LABEL], registry=r
        )
        self.bytes = Counter(f"{PREFIX}_bytes", "Bytes replicated.", [LABEL], registry=r)
        self.duplicates = Counter(
            f"{PREFIX}_duplicates",
            "Messages found already written (a repeat after a crash), pointer moved on.",
            [LABEL],
            registry=r,
        )
        self.errors = Counter(
            f"{PREFIX}_errors",
            "Failed runs by reason; and stalls (reason stalled): a fetch that heard nothing "
            "from the source for stall_seconds, counted as soon as it happens.",
            [LABEL, "reason"],
            registry=r,
        )
        self.runs = Counter(
            f"{PREFIX}_runs",
            "Runs by outcome (caught_up, capped, error, locked, backoff, stopped).",
            [LABEL, "outcome"],
            registry=r,
        )
        self.last_success = Gauge(
            f"{PREFIX}_last_success_timestamp_seconds",
            "When the job last wrote a batch or heard from the source that it had nothing "
            "newer (Unix time); moves during a run.",
            [LABEL],
            registry=r,
        )
        self.lag = Gauge(
            f"{PREFIX}_lag_seconds",
            "How far behind the source the copy may be, at the moment of the scrape: now "
            "minus the time up to which it is known complete (the newest name replicated, "
            "or the source's last answer that it had nothing newer). Grows through a "
            "partition or a stall, whether or not a run is in progress.",
            [LABEL],
            registry=r,
        )
        self.last_contact = Gauge(
            f"{PREFIX}_last_contact_timestamp_seconds",
            "When the source last sent a byte or an answer (Unix time; 0: never).",
            [LABEL],
            registry=r,
        )
        self.fetches = Counter(
            f"{PREFIX}_fetches",
            "Fetch requests sent to the source (a batch or a single message each).",
            [LABEL],
            registry=r,
        )
        self.batch_support = Gauge(
            f"{PREFIX}_source_batch_support",
            "1: the source answers batch fetches; 0: it does not (the original: one message "
            "per request), or the job's mode is original; -1: not known yet.",
            [LABEL],
            registry=r,
        )
        self.backoff = Gauge(
            f"{PREFIX}_backoff_seconds",
            "Current back-off after failures (0: none).",
            [LABEL],
            registry=r,
        )
