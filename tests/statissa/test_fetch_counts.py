"""The api's fetch counts, read the way statissa reads them: from a real api's /metrics
(gunicorn, two workers: the counts of both add up), with and without access control."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import pytest

from tests.support.api_server import free_port, running_api
from zoscii_statissa.fetch_counts import FetchCounts
from zosciimq.client import ZosciiClient

TOKEN = "statissa-metrics-" + "m" * 24
CLIENTS = (
    f'[[clients]]\nname = "statissa"\ntoken_sha256 = "{hashlib.sha256(TOKEN.encode()).hexdigest()}"'
    '\nactions = ["metrics"]\n'
    f'[[clients]]\nname = "partner"\ntoken_sha256 = "{hashlib.sha256(b"p" * 32).hexdigest()}"'
    '\nread = ["*"]\nwrite = ["*"]\n'
)


def _publish_and_fetch(url: str, headers: dict[str, str] | None = None) -> None:
    """orders: 5 published, 2 fetched by pointer and 3 in a batch; logs: 1 and 1."""
    with ZosciiClient(url, headers=headers) as client:
        for i in range(5):
            client.publish("orders", b"order %d" % i)
        client.publish("logs", b"a line")
        first = client.fetch("orders")
        assert first is not None
        second = client.fetch("orders", first.name)
        assert second is not None
        batch = client.fetch_batch("orders", second.name, count=10)
        assert len(batch) == 3
        assert client.fetch("logs") is not None
        assert client.fetch("orders", batch[-1].name) is None  # nothing new: counts nothing


@pytest.mark.slow
def test_the_counts_are_the_messages_served_per_queue(tmp_path: Path) -> None:
    with running_api(tmp_path / "data", workers=2, threads=4) as url:
        counts = FetchCounts([url + "metrics"])
        assert counts.read() == {}  # nothing served yet: no series
        _publish_and_fetch(url)
        assert counts.read() == {"orders": 5.0, "logs": 1.0}
        twice = FetchCounts([url + "metrics", url + "metrics"])  # two api containers
        assert twice.read() == {"orders": 10.0, "logs": 2.0}


@pytest.mark.slow
def test_under_access_control_the_token_with_the_metrics_right_is_needed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    env = {"ZOSCII_AUTH_CLIENTS": CLIENTS}
    with running_api(tmp_path / "data", workers=1, threads=4, env=env) as url:
        _publish_and_fetch(url, {"Authorization": "Bearer " + "p" * 32})
        without = FetchCounts([url + "metrics"])
        with caplog.at_level(logging.WARNING, logger="zoscii_statissa.fetch_counts"):
            assert without.read() is None
            assert without.read() is None
        warnings = [r for r in caplog.records if "fetch counts not read" in r.getMessage()]
        assert len(warnings) == 1, "the same failure is logged once"
        assert TOKEN not in caplog.text
        assert FetchCounts([url + "metrics"], TOKEN).read() == {"orders": 5.0, "logs": 1.0}


def test_one_api_that_does_not_answer_makes_the_counts_unknown() -> None:
    dead = f"http://127.0.0.1:{free_port()}/metrics"
    assert FetchCounts([dead], timeout=2).read() is None
    assert FetchCounts([]).read() is None


@pytest.mark.slow
def test_a_page_that_is_not_prometheus_text_is_a_failure_not_a_crash(tmp_path: Path) -> None:
    """The api's welcome text at / is no metrics page: unknown counts, nothing raised."""
    with running_api(tmp_path / "data", workers=1, threads=2) as url:
        assert FetchCounts([url + "openapi.yaml"]).read() is None
