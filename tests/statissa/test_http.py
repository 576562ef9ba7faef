"""The served side: /metrics (parsed as Prometheus would), /stats.json, the page, health,
on-demand refresh, and a failing computation that must keep the last good figures."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families
from werkzeug.test import Client

from tests.statissa.datadir import DAY, HOUR, NOW, Clock, _publish
from zoscii_statissa.snapshots import SnapshotKeeper
from zoscii_statissa.web import create_app
from zosciimq.core import DataDir, QueueStore
from zosciimq.service import OpsServer

T = NOW.timestamp()


def scrape(client: Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics as {(name, sorted labels): value}."""
    reply = client.get("/metrics")
    assert reply.status_code == 200
    assert reply.content_type.startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(reply.get_data(as_text=True)):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def q(queue: str) -> tuple[tuple[str, str], ...]:
    return (("queue", queue),)


def test_before_the_first_run(client: Client) -> None:
    samples = scrape(client)
    assert samples[("zoscii_statissa_runs_total", ())] == 0
    assert ("zoscii_statissa_last_run_success", ()) not in samples
    assert not any(name.startswith("zoscii_queue_") for name, _ in samples)
    assert client.get("/stats.json").status_code == 503
    page = client.get("/").get_data(as_text=True)
    assert "No statistics computed yet" in page


def test_metrics_carry_the_figures(client: Client, keeper: SnapshotKeeper) -> None:
    keeper.refresh()
    m = scrape(client)
    assert m[("zoscii_queue_messages", q("orders"))] == 6
    assert m[("zoscii_queue_bytes", q("orders"))] == 335
    assert m[("zoscii_queue_oldest_message_timestamp_seconds", q("orders"))] == T - 30 * HOUR
    assert m[("zoscii_queue_newest_message_timestamp_seconds", q("orders"))] == T - 600
    assert m[("zoscii_queue_oldest_message_age_seconds", q("orders"))] == 30 * HOUR
    assert m[("zoscii_queue_storage_share_ratio", q("orders"))] == pytest.approx(335 / 485)
    assert m[("zoscii_queue_messages_expiring_within_24h", q("orders"))] == 5
    assert m[("zoscii_queue_messages_expired", q("orders"))] == 3
    assert m[("zoscii_queue_messages_published_last_hour", q("orders"))] == 1
    assert m[("zoscii_queue_messages_published_last_24h", q("orders"))] == 3
    assert m[("zoscii_queue_unrecognised_files", q("logs_2"))] == 1
    assert m[("zoscii_queue_messages", q("empty-q"))] == 0
    assert ("zoscii_queue_oldest_message_age_seconds", q("empty-q")) not in m
    assert m[("zoscii_store_messages", ())] == 3
    assert m[("zoscii_store_bytes", ())] == 150
    assert m[("zoscii_store_unidentified_messages", ())] == 1
    assert m[("zoscii_store_oldest_message_timestamp_seconds", ())] == T - 3 * DAY + 41
    assert m[("zoscii_store_newest_message_timestamp_seconds", ())] == T - 5 * HOUR + 17
    assert m[("zoscii_queues", ())] == 3
    assert m[("zoscii_storage_bytes", ())] == 485
    state = (("state", "remote_orders"),)
    assert m[("zoscii_replikate_pointer_age_seconds", state)] == 1.5 * HOUR
    assert m[("zoscii_replikate_pointer_timestamp_seconds", state)] == T - 1.5 * HOUR
    assert m[("zoscii_replikate_pointer_valid", (("state", "broken_x"),))] == 0
    assert m[("zoscii_replikate_pointer_valid", (("state", "fresh_store"),))] == 1
    assert ("zoscii_replikate_pointer_age_seconds", (("state", "fresh_store"),)) not in m
    assert m[("zoscii_statissa_last_run_success", ())] == 1
    assert m[("zoscii_statissa_runs_total", ())] == 1
    assert m[("zoscii_statissa_runs_failed_total", ())] == 0
    assert m[("zoscii_statissa_last_success_timestamp_seconds", ())] == T
    assert m[("zoscii_statissa_last_run_timestamp_seconds", ())] == T
    assert m[("zoscii_statissa_last_run_duration_seconds", ())] > 0


def test_stats_json(client: Client, keeper: SnapshotKeeper) -> None:
    keeper.refresh()
    body = client.get("/stats.json").get_json()
    assert body["generated_at"] == T
    assert body["generated_at_iso"] == "2026-03-10T12:00:00Z"
    assert body["totals"] == {"messages": 10, "bytes": 485}
    orders = next(item for item in body["queues"] if item["name"] == "orders")
    assert orders["messages"] == 6 and orders["published_hourly"][:3] == [1, 2, 0]
    assert orders["oldest_iso"] == "2026-03-09T06:00:00Z"
    assert body["store"]["unidentified"] == 1
    assert body["last_run"]["last_run_success"] is True


def test_refresh_on_demand_sees_new_messages(
    client: Client, keeper: SnapshotKeeper, data_root: Path
) -> None:
    keeper.refresh()
    clock = Clock(NOW)
    _publish(QueueStore(DataDir(data_root), clock), clock, "orders", NOW, 7, 1)
    _publish(QueueStore(DataDir(data_root), clock), clock, "brand-new", NOW, 1, 1)
    reply = client.post("/refresh")
    assert reply.status_code == 200
    assert reply.get_json()["totals"] == {"messages": 12, "bytes": 493}
    m = scrape(client)
    assert m[("zoscii_queue_messages", q("orders"))] == 7
    assert m[("zoscii_queue_messages", q("brand-new"))] == 1
    assert m[("zoscii_statissa_runs_total", ())] == 2
    redirected = client.post("/refresh?redirect=1")
    assert redirected.status_code == 303


def test_a_failing_run_keeps_the_last_figures(
    client: Client, keeper: SnapshotKeeper, data_root: Path
) -> None:
    keeper.refresh()
    moved = data_root.with_name("unmounted")
    shutil.move(data_root, moved)  # the volume goes away: every computation now fails

    reply = client.post("/refresh")
    assert reply.status_code == 500
    assert "does not exist" in reply.get_json()["error"]
    m = scrape(client)
    assert m[("zoscii_statissa_last_run_success", ())] == 0
    assert m[("zoscii_statissa_runs_failed_total", ())] == 1
    assert m[("zoscii_statissa_runs_total", ())] == 2
    assert m[("zoscii_statissa_last_success_timestamp_seconds", ())] == T
    assert m[("zoscii_queue_messages", q("orders"))] == 6  # still the last good figures
    body = client.get("/stats.json").get_json()
    assert body["totals"]["messages"] == 10
    assert body["last_run"]["last_run_success"] is False
    page = client.get("/").get_data(as_text=True)
    assert "The last computation failed" in page and "orders" in page
    assert client.get("/healthz").status_code == 503

    shutil.move(moved, data_root)
    keeper.refresh()
    assert scrape(client)[("zoscii_statissa_last_run_success", ())] == 1
    assert client.get("/healthz").status_code == 200


def test_scheduler_entry_point_swallows_and_counts_failures(
    keeper: SnapshotKeeper, data_root: Path
) -> None:
    shutil.rmtree(data_root)
    keeper.refresh_quietly()  # must not raise: the scheduler keeps going
    assert keeper.status.runs_failed_total == 1
    assert "FileNotFoundError" in keeper.status.last_error
    assert keeper.snapshot is None


def test_the_page_shows_the_figures(client: Client, keeper: SnapshotKeeper) -> None:
    keeper.refresh()
    reply = client.get("/")
    assert reply.status_code == 200 and reply.content_type.startswith("text/html")
    page = reply.get_data(as_text=True)
    assert "Generated at 2026-03-10 12:00:00" in page
    for text in ("orders", "logs_2", "empty-q", "335 B", "69.1&nbsp;%", "1d 6h", "remote_orders"):
        assert text in page, text
    assert "unreadable: Invalid pointer" in page
    assert "nothing replicated yet" in page
    assert "<link" not in page and "<script" not in page  # no external assets, no scripts


def test_healthz(client: Client) -> None:
    reply = client.get("/healthz")
    assert reply.status_code == 200 and reply.get_json()["status"] == "ok"


def test_only_refresh_takes_a_post(client: Client) -> None:
    for path in ("/healthz", "/metrics", "/stats.json", "/"):
        reply = client.post(path)
        assert reply.status_code == 405, path
        assert reply.headers["Allow"] == "GET, HEAD"
    assert client.get("/refresh").status_code == 405
    assert client.get("/nothing").status_code == 404


def test_healthz_says_why_and_how_the_last_run_went(client: Client, data_root: Path) -> None:
    shutil.rmtree(data_root)
    reply = client.get("/healthz")
    assert reply.status_code == 503 and reply.content_type == "application/json"
    body = reply.get_json()
    assert body["status"] == "unavailable" and "does not exist" in body["reason"]
    assert body["last_run"]["runs_total"] == 0


def test_the_ops_server_serves_it_all_refresh_included(
    keeper: SnapshotKeeper, data_root: Path
) -> None:
    """Over real HTTP, on the shared ops server: POST /refresh computes and answers."""
    server = OpsServer("127.0.0.1", 0, create_app(keeper, DataDir(data_root))).start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        with requests.Session() as http:
            assert http.get(f"{base}/stats.json", timeout=10).status_code == 503
            refreshed = http.post(f"{base}/refresh", timeout=120)
            assert refreshed.status_code == 200
            assert refreshed.json()["totals"] == {"messages": 10, "bytes": 485}
            again = http.post(f"{base}/refresh?redirect=1", timeout=120, allow_redirects=False)
            assert again.status_code == 303
            assert http.get(f"{base}/stats.json", timeout=10).json()["last_run"]["runs_total"] == 2
            assert http.get(f"{base}/healthz", timeout=10).json()["status"] == "ok"
            assert "zoscii_queue_messages" in http.get(f"{base}/metrics", timeout=10).text
            assert http.post(f"{base}/metrics", timeout=10).status_code == 405
    finally:
        server.stop()
