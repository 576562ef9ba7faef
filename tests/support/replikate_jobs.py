"""Jobs, replicators and their metrics for the replicator tests; publishing to the partner."""

from __future__ import annotations

import dataclasses
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from prometheus_client import generate_latest

from tests.support.queues import read_queue
from zoscii_replikate.metrics import ReplikateMetrics
from zoscii_replikate.replicator import Replicator
from zoscii_replikate.settings import JobConfig
from zosciimq.client import ZosciiClient
from zosciimq.core import DataDir


def make_job(
    url: str, source_queue: str, target_queue: str | None, **overrides: object
) -> JobConfig:
    job = JobConfig(
        name="test-job",
        source_url=url,
        source_queue=source_queue,
        target_queue=target_queue,
        retries=0,
        connect_timeout=2,
        read_timeout=5,
        deadline_seconds=30,
        backoff_initial_seconds=5,
        backoff_max_seconds=60,
    )
    return dataclasses.replace(job, **overrides)


def make_replicator(job: JobConfig, data_dir: Path, **kwargs: object) -> Replicator:
    return Replicator(job, DataDir(data_dir), ReplikateMetrics(), **kwargs)


def metrics_text(replicator: Replicator) -> str:
    """What /metrics would show of this replicator's registry."""
    return generate_latest(replicator.metrics.registry).decode()


def publish_all(
    url: str, queue: str, payloads: list[bytes], retention: int = 3, threads: int = 1
) -> list[tuple[str, bytes]]:
    """Publish (in batches, in order with one thread); the source's (name, payload) in
    name order."""

    def publish(chunk: list[bytes]) -> None:
        with ZosciiClient(url) as client:
            client.publish_many(queue, chunk, retention_days=retention)

    with ThreadPoolExecutor(threads) as pool:
        for future in [pool.submit(publish, payloads[i::threads]) for i in range(threads)]:
            future.result()
    return read_queue(url, queue, count=1000)


def replikate_env(data_dir: Path, config: Path) -> dict[str, str]:
    """The environment of a ``python -m zoscii_replikate`` child on ``data_dir``."""
    return {
        **os.environ,
        "ZOSCII_DATA_DIR": str(data_dir),
        "ZOSCII_REPLIKATE_CONFIG": str(config),
    }
