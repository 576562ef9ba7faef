"""The console: the front page's charts, the queue pages, /history.json, access control.
Rendered through the port's WSGI app (no server), figures by the plain scan."""

from __future__ import annotations

import hashlib
import re
from datetime import timedelta
from functools import partial
from pathlib import Path

import pytest
from markupsafe import Markup
from werkzeug.test import Client

from tests.statissa.datadir import NOW, Clock, build_data_dir
from tests.support.queues import publish_body
from zoscii_statissa.compute import compute_snapshot
from zoscii_statissa.console import (
    MAX_SERIES,
    Chart,
    QueuePage,
    fmt_count,
    render_chart,
    thin,
)
from zoscii_statissa.history import History, recording
from zoscii_statissa.scan import scan_locally
from zoscii_statissa.snapshots import RunStatus, SnapshotKeeper
from zoscii_statissa.web import create_app
from zosciimq.access import AccessControl
from zosciimq.access import Client as AccessClient
from zosciimq.core import DataDir, QueueStore

TOKEN = "console-token-" + "x" * 20


class Console:
    def __init__(self, root: Path, access: AccessControl | None = None) -> None:
        self.names = build_data_dir(root)
        self.data_dir = DataDir(root)
        self.history = History(self.data_dir)
        self.clock = Clock(NOW)
        compute = partial(compute_snapshot, scan_locally, self.data_dir)
        self.keeper = SnapshotKeeper(recording(compute, self.history), self.clock)
        self.client = Client(create_app(self.keeper, self.data_dir, access, history=self.history))

    def compute(self, times: int, step: timedelta = timedelta(minutes=5)) -> None:
        for _ in range(times):
            self.keeper.refresh()
            self.clock.moment += step


@pytest.fixture
def console(tmp_path: Path) -> Console:
    return Console(tmp_path / "data")


def series(page: str, metric: str, queue: str) -> tuple[int, int]:
    """(data-points, circles) of ``queue``'s series on the chart ``metric``."""
    svg = re.search(rf'<svg[^>]*data-metric="{metric}".*?</svg>', page, re.S)
    assert svg, f"no {metric} chart"
    group = re.search(
        rf'<g class="series" data-queue="{queue}" data-points="(\d+)".*?</g>', svg[0], re.S
    )
    assert group, f"no {queue} series on {metric}"
    return int(group[1]), group[0].count("<circle")


def test_the_front_page_charts_every_point_of_the_history(console: Console) -> None:
    console.compute(3)
    page = console.client.get("/").text
    assert "ZOSCII MQ console" in page and "<script" not in page and "<link" not in page
    assert series(page, "depth", "orders") == (3, 3)
    assert series(page, "age", "orders") == (3, 3)
    assert series(page, "rate", "orders") == (2, 2)  # between successive points
    assert 'href="queues/orders"' in page  # the queues table and legends link to the pages
    assert 'href="?range=7d"' in page


def test_without_history_the_charts_say_so_and_before_the_first_run_nothing(
    console: Console,
) -> None:
    assert "Trends" not in console.client.get("/").text  # no figures yet
    console.compute(1)
    page = console.client.get("/").text
    assert series(page, "depth", "orders") == (1, 1)
    assert "No history yet" in page  # the rate needs two points


def test_the_range_bounds_the_points(console: Console) -> None:
    console.compute(3, step=timedelta(hours=3))  # NOW, +3 h, +6 h: served is the last
    assert series(console.client.get("/?range=1h").text, "depth", "orders") == (1, 1)
    assert series(console.client.get("/?range=6h").text, "depth", "orders") == (3, 3)
    assert series(console.client.get("/?range=bogus").text, "depth", "orders") == (3, 3)  # 24h


def test_the_queue_page_shows_figures_charts_groups_and_latest_names(console: Console) -> None:
    queues = QueueStore(console.data_dir, console.clock)
    console.compute(2)
    reply = console.client.get("/queues/orders")
    assert reply.status_code == 200 and reply.mimetype == "text/html"
    page = reply.text
    latest = queues.last_name("orders")
    assert latest in page and console.names["pointer"] in page
    assert page.index(latest) < page.index(console.names["pointer"])  # newest first
    assert series(page, "depth", "orders") == (2, 2)
    assert 'id="actions"' in page  # the place kept for admin actions
    assert 'href="../"' in page and "No consumer groups." in page
    assert console.client.get("/queues/empty-q").status_code == 200
    assert "No messages." in console.client.get("/queues/empty-q").text


def test_unknown_and_invalid_queue_pages_are_404(console: Console) -> None:
    console.compute(1)
    assert console.client.get("/queues/nope").status_code == 404
    assert console.client.get("/queues/..").status_code == 404
    assert console.client.get("/queues/temp").status_code == 404
    assert console.client.get("/queues/").status_code == 404
    assert console.client.post("/queues/orders").status_code == 405


def test_history_json_serves_the_points_of_the_range(console: Console) -> None:
    console.compute(2)
    body = console.client.get("/history.json?range=1h").get_json()
    assert body["range"] == "1h" and body["error"] == ""
    assert [p["queues"]["orders"][0] for p in body["points"]] == [6, 6]


def test_the_old_urls_still_answer(console: Console) -> None:
    console.compute(1)
    assert console.client.get("/stats.json").status_code == 200
    assert console.client.post("/refresh").status_code == 200
    assert console.client.get("/metrics").status_code == 200
    assert console.client.get("/healthz").status_code == 200


def test_the_console_needs_the_statistics_right(tmp_path: Path) -> None:
    digest = hashlib.sha256(TOKEN.encode()).digest()
    access = AccessControl([AccessClient("ops", digest, actions=frozenset({"statistics"}))])
    console = Console(tmp_path / "data", access)
    console.compute(1)
    for path in ("/", "/queues/orders", "/history.json", "/queues/nope"):
        assert console.client.get(path).status_code == 401, path
        allowed = console.client.get(path, headers={"Authorization": f"Bearer {TOKEN}"})
        assert allowed.status_code == (404 if path.endswith("nope") else 200), path


def test_chart_names_are_escaped_and_markers_are_bounded() -> None:
    hostile = '<script>alert("x")</script>'
    points = [(1000.0 + i, float(i)) for i in range(1000)]
    chart = Chart("depth", "Depth", ((hostile, points),), fmt_count)
    svg = str(render_chart(chart, link=lambda name: f"queues/{name}"))
    assert "<script" not in svg and "&lt;script&gt;" in svg
    assert 'data-points="400"' in svg and "<circle" not in svg  # thinned, line only
    assert thin(points)[0] == points[0] and thin(points)[-1] == points[-1]
    empty = str(render_chart(Chart("rate", "Rate", (("q", []),), fmt_count)))
    assert "No history yet" in empty and "<svg" not in empty


def test_the_queue_page_renders_actions_it_is_given() -> None:
    page = QueuePage().render(
        "orders",
        None,
        RunStatus(),
        charts=[],
        names=[],
        actions=[Markup('<button type="button">Purge</button>')],
    )
    assert '<button type="button">Purge</button>' in page
    assert "No figures for this queue yet" in page


def test_the_overview_draws_the_deepest_queues_only(tmp_path: Path) -> None:
    console = Console(tmp_path / "data")
    queues = QueueStore(console.data_dir, console.clock)
    for i in range(MAX_SERIES + 2):
        for _ in range(i + 1):
            publish_body(queues, f"many{i:02d}", b"m", 1)
    console.compute(1)
    page = console.client.get("/").text
    svg = re.search(r'<svg[^>]*data-metric="depth".*?</svg>', page, re.S)
    assert svg and svg[0].count('class="series"') == MAX_SERIES
    assert 'data-queue="many09"' in svg[0] and 'data-queue="orders"' in svg[0]
    assert 'data-queue="many00"' not in svg[0] and 'data-queue="empty-q"' not in svg[0]
    assert "every\nqueue has its own page" in page
