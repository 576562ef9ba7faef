"""The Grafana dashboard: well-formed, and every statissa metric it queries really exists."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from werkzeug.test import Client

from zoscii_statissa.snapshots import SnapshotKeeper

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "zoscii-mq.json"
OURS = re.compile(r"\bzoscii_(?:queue|store|storage|queues|replikate_pointer|statissa)[a-z0-9_]*")


def _panels() -> list[dict]:
    return [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["type"] != "row"]


def _exprs() -> list[str]:
    return [t["expr"] for p in _panels() for t in p["targets"]]


def test_layout() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "zoscii-mq"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert variables == {"datasource", "queue"}
    for panel in _panels():
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
    titles = " ".join(p["title"] for p in _panels()).lower()
    for topic in (
        "depth",
        "bytes",
        "oldest",
        "expiring",
        "per hour",
        "pointer",
        "api requests",
        "last computation",
    ):
        assert topic in titles, topic


def test_uses_the_api_metrics() -> None:
    exprs = " ".join(_exprs())
    assert "zoscii_api_requests_total" in exprs and "by (action, status)" in exprs
    assert "zoscii_api_messages_published_total" in exprs


def test_every_statissa_metric_queried_is_exposed(client: Client, keeper: SnapshotKeeper) -> None:
    keeper.refresh()
    text = client.get("/metrics").get_data(as_text=True)
    exposed = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    queried = {name for expr in _exprs() for name in OURS.findall(expr)}
    assert len(queried) >= 12
    assert queried <= exposed, queried - exposed
