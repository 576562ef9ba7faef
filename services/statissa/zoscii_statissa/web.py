"""The HTTP side: page, JSON, Prometheus metrics, health and on-demand refresh."""

from __future__ import annotations

import os

from flask import Flask, Response, jsonify, redirect, request
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    ProcessCollector,
    generate_latest,
)

from zoscii_statissa.collector import StatissaCollector
from zoscii_statissa.report import ReportPage
from zoscii_statissa.service import StatsService
from zosciimq.core.layout import DataDir


def build_registry(service: StatsService) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(StatissaCollector(service))
    ProcessCollector(registry=registry)
    return registry


def create_app(service: StatsService, data_dir: DataDir) -> Flask:
    app = Flask(__name__)
    registry = build_registry(service)
    page = ReportPage()

    @app.get("/")
    def index() -> Response:
        html = page.render(service.snapshot, service.status)
        return Response(html, mimetype="text/html")

    @app.get("/stats.json")
    def stats_json() -> tuple[Response, int]:
        snapshot, status = service.snapshot, service.status
        if snapshot is None:
            body = {"error": "no statistics computed yet", "last_run": status.to_dict()}
            return jsonify(body), 503
        return jsonify({**snapshot.to_dict(), "last_run": status.to_dict()}), 200

    @app.post("/refresh")
    def refresh() -> Response | tuple[Response, int]:
        try:
            snapshot = service.refresh()
        except Exception as exc:
            if request.args.get("redirect"):
                return redirect("./", code=303)
            body = {"error": f"statistics run failed: {exc}", "last_run": service.status.to_dict()}
            return jsonify(body), 500
        if request.args.get("redirect"):
            return redirect("./", code=303)
        return jsonify({**snapshot.to_dict(), "last_run": service.status.to_dict()}), 200

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(registry), mimetype=CONTENT_TYPE_LATEST)

    @app.get("/healthz")
    def healthz() -> tuple[Response, int]:
        reason = _unreadable(data_dir)
        if reason:
            return jsonify({"status": "unavailable", "reason": reason}), 503
        return jsonify({"status": "ok", "last_run": service.status.to_dict()}), 200

    return app


def _unreadable(data_dir: DataDir) -> str | None:
    """statissa only reads the volume, so readable is healthy (it may be mounted read-only)."""
    if not data_dir.root.is_dir():
        return f"data directory {data_dir.root} does not exist"
    if not os.access(data_dir.root, os.R_OK | os.X_OK):
        return f"data directory {data_dir.root} is not readable"
    return None
