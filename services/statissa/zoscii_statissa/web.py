"""What statissa serves on its one port: the ops endpoints every service has (/healthz,
/metrics, from ``zosciimq.service``) plus its own page, /stats.json and POST /refresh.

The page and JSON are a small Flask app mounted into the ops app; POST /refresh is
dispatched to it before the ops app, which answers 405 to anything but GET and HEAD.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from functools import partial
from typing import Any

from flask import Flask, Response, jsonify, redirect, request
from prometheus_client import CollectorRegistry, ProcessCollector

from zoscii_statissa.collector import StatissaCollector
from zoscii_statissa.report import ReportPage
from zoscii_statissa.snapshots import SnapshotKeeper
from zosciimq.core.layout import DataDir
from zosciimq.service import Health
from zosciimq.service.ops import StartResponse, WsgiApp, ops_app

REFRESH = "/refresh"  # the one route that is not GET


def build_registry(keeper: SnapshotKeeper) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(StatissaCollector(keeper))
    ProcessCollector(registry=registry)
    return registry


def create_app(keeper: SnapshotKeeper, data_dir: DataDir) -> WsgiApp:
    """Everything statissa serves, as one WSGI app."""
    pages = create_pages(keeper)
    ops = ops_app(
        partial(health, keeper, data_dir),
        build_registry(keeper),
        {"/": pages, "/stats.json": pages},
    )

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == REFRESH:
            return pages(environ, start_response)
        return ops(environ, start_response)

    return app


def health(keeper: SnapshotKeeper, data_dir: DataDir) -> Health:
    """statissa only reads the volume, so readable is healthy (it may be mounted read-only)."""
    details = {"last_run": keeper.status.to_dict()}
    if not data_dir.root.is_dir():
        return Health(f"data directory {data_dir.root} does not exist", details)
    if not os.access(data_dir.root, os.R_OK | os.X_OK):
        return Health(f"data directory {data_dir.root} is not readable", details)
    return Health(None, details)


def create_pages(keeper: SnapshotKeeper) -> Flask:
    app = Flask(__name__)
    page = ReportPage()

    @app.get("/")
    def index() -> Response:
        html = page.render(keeper.snapshot, keeper.status)
        return Response(html, mimetype="text/html")

    @app.get("/stats.json")
    def stats_json() -> tuple[Response, int]:
        snapshot, status = keeper.snapshot, keeper.status
        if snapshot is None:
            body = {"error": "no statistics computed yet", "last_run": status.to_dict()}
            return jsonify(body), 503
        return jsonify({**snapshot.to_dict(), "last_run": status.to_dict()}), 200

    @app.post(REFRESH)
    def refresh() -> Response | tuple[Response, int]:
        try:
            snapshot = keeper.refresh()
        except Exception as exc:
            if request.args.get("redirect"):
                return redirect("./", code=303)
            body = {"error": f"statistics run failed: {exc}", "last_run": keeper.status.to_dict()}
            return jsonify(body), 500
        if request.args.get("redirect"):
            return redirect("./", code=303)
        return jsonify({**snapshot.to_dict(), "last_run": keeper.status.to_dict()}), 200

    return app
