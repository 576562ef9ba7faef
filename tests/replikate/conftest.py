from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.api_server import running_api
from zoscii_replikate.metrics import ReplikateMetrics
from zoscii_replikate.replicator import Replicator
from zoscii_replikate.settings import JobConfig
from zosciimq.core import DataDir, QueueStore


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The partner's server: a real api under gunicorn (base URL, data dir)."""
    data_dir = tmp_path_factory.mktemp("source")
    with running_api(data_dir) as url:
        yield url, data_dir


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


def local_messages(data_dir: Path, queue: str) -> list[tuple[str, bytes]]:
    """Everything in a local queue, in name order, through the core ([]: no such queue)."""
    if not DataDir(data_dir).queue_dir(queue).exists():
        return []
    out = []
    for name, file in QueueStore(DataDir(data_dir)).iter_after(queue, "", limit=10**9):
        with file:
            out.append((name, file.read()))
    return out
