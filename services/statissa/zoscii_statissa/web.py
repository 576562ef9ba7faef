"""What statissa serves on its one port: the ops endpoints every service has (/healthz,
/metrics, from ``zosciimq.service``) plus its own: the console (the front page with the
history charts, /queues/<name>, a message's page /queues/<name>/messages/<message>, the
admin actions /queues/<name>/admin/<action>), /stats.json, /history.json and POST
/refresh.

The pages and JSON are a small Flask app mounted into the ops app; POST /refresh and
/queues/... are dispatched to it before the ops app, which answers 405 to anything but
GET and HEAD and knows exact paths only.

With access control on (the api's clients, ``zosciimq.access``), everything but /healthz
and /metrics needs the right ``statistics``: it names every queue and group. /healthz
and /metrics stay open, for orchestrators and Prometheus, which carry no credentials
(put the port behind a network boundary when queue names in metrics are a secret).
A message's page also needs the queue's read right (``message_page``); the admin actions
are the api's to allow (``admin_pages``, ``relay``; /login asks a browser for the
operator's token when access control is off). Every request but /healthz and /metrics
must name the console by a known host (``hosts``: DNS rebinding).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from functools import partial
from importlib import resources
from typing import Any

from flask import Flask, Response, jsonify, redirect, request
from flask.typing import ResponseReturnValue
from markupsafe import Markup
from prometheus_client import CollectorRegistry, ProcessCollector

from zoscii_statissa.admin_pages import ACTIONS, PARAMETER, AdminPanel
from zoscii_statissa.collector import StatissaCollector
from zoscii_statissa.console import (
    QueuePage,
    TrendsSection,
    latest_names,
    overview_charts,
    pick_range,
    queue_charts,
    window,
)
from zoscii_statissa.history import History, HistoryPoint
from zoscii_statissa.hosts import KnownHosts
from zoscii_statissa.message_page import PEEK_BYTES, MessagePage
from zoscii_statissa.relay import ApiRelay
from zoscii_statissa.report import ReportPage
from zoscii_statissa.snapshots import SnapshotKeeper
from zosciimq.access import AccessControl, Forbidden, Unauthenticated
from zosciimq.core import browse
from zosciimq.core.layout import DataDir
from zosciimq.core.names import is_queue_name
from zosciimq.errors import InvalidInput, MessageNotFound, QueueNotFound
from zosciimq.service import Health, register_build_info
from zosciimq.service.ops import StartResponse, WsgiApp, ops_app

log = logging.getLogger(__name__)

REFRESH = "/refresh"  # POST only (as the admin forms under QUEUES)
LOGIN = "/login"  # signing in for the admin actions (admin_pages.AdminPanel.sign_in)
STATISTICS = "statistics"  # the right the page, /stats.json and /refresh need
QUEUES = "/queues/"  # the queue pages: /queues/<name>
CLIENT = "zoscii.client"  # where ``guarded`` leaves the authenticated client (environ)


def build_registry(keeper: SnapshotKeeper) -> CollectorRegistry:
    registry = CollectorRegistry()
    register_build_info(registry, "statissa")
    registry.register(StatissaCollector(keeper))
    ProcessCollector(registry=registry)
    return registry


def create_app(
    keeper: SnapshotKeeper,
    data_dir: DataDir,
    access: AccessControl | None = None,
    *,
    history: History | None = None,
    admin: AdminPanel | None = None,
    live_url: str = "",
    hosts: KnownHosts | None = None,
) -> WsgiApp:
    """Everything statissa serves, as one WSGI app. ``history``: the one the computation
    appends to (read from the volume when not given); ``admin``: the admin actions (off
    when not given); ``hosts``: the names it answers to (IP addresses and localhost
    when not given)."""
    history = history if history is not None else History(data_dir)
    access = access or AccessControl([])
    admin = admin if admin is not None else AdminPanel(None)
    hosts = hosts if hosts is not None else KnownHosts()
    pages = guarded(create_pages(keeper, data_dir, history, access, admin, live_url), access)
    ops = ops_app(
        partial(health, keeper, data_dir),
        build_registry(keeper),
        {"/": pages, "/stats.json": pages, "/history.json": pages, "/live.js": pages, LOGIN: pages},
    )

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        refusal = hosts.refusal(environ)
        if refusal is not None:
            log.info("refused a request for host %r", str(environ.get("HTTP_HOST"))[:100])
            return _deny(start_response, "421 Misdirected Request", refusal)
        path = environ.get("PATH_INFO", "")
        if path == REFRESH or path.startswith(QUEUES):
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


def admin_panel(api_url: str, timeout_seconds: float) -> AdminPanel:
    """The admin actions relayed to ``api_url`` (off when empty)."""
    return AdminPanel(ApiRelay(api_url, timeout_seconds) if api_url else None)


def create_pages(
    keeper: SnapshotKeeper,
    data_dir: DataDir,
    history: History,
    access: AccessControl,
    admin: AdminPanel,
    live_url: str = "",
) -> Flask:
    app = Flask(__name__)
    page = ReportPage()
    trends = TrendsSection()
    queue_page = QueuePage()
    message_page = MessagePage()

    def html(body: str, status: int = 200) -> tuple[Response, int]:
        return Response(body, mimetype="text/html"), status

    def known_queue(name: str) -> bool:
        snapshot = keeper.snapshot
        known = snapshot is not None and any(q.name == name for q in snapshot.queues)
        return is_queue_name(name) and (known or data_dir.queue_dir(name).is_dir())

    def history_points(range_key: str) -> tuple[list[HistoryPoint], str]:
        """The range's points, and why history cannot be shown or written ("" if fine)."""
        try:
            points = window(history, keeper.snapshot, range_key)
        except OSError as exc:
            log.warning("statistics history unreadable: %s", exc)
            return [], f"unreadable: {exc}"
        return points, history.last_error

    @app.get("/")
    def index() -> Response:
        snapshot = keeper.snapshot
        section = Markup("")
        if snapshot is not None:
            range_key = pick_range(request.args.get("range"))
            points, error = history_points(range_key)
            section = trends.render(
                snapshot,
                overview_charts(points, snapshot),
                range_key=range_key,
                history_error=error,
            )
        html = page.render(snapshot, keeper.status, trends=section)
        return Response(html, mimetype="text/html")

    @app.get(f"{QUEUES}<name>")
    def queue(name: str) -> tuple[Response, int]:
        if not known_queue(name):
            return Response("no such queue\n", mimetype="text/plain"), 404
        snapshot = keeper.snapshot
        range_key = pick_range(request.args.get("range"))
        points, error = history_points(range_key)
        groups = [g for g in snapshot.groups if g.queue == name] if snapshot else []
        names_error = names_note = ""
        try:
            names, names_note = latest_names(data_dir, name)
        except QueueNotFound:
            names, names_error = [], "the queue is gone (deleted since the figures)"
        except OSError as exc:
            names, names_error = [], str(exc)
        actions, actions_note = admin.actions_for(request.environ, name)
        body = queue_page.render(
            name,
            snapshot,
            keeper.status,
            charts=queue_charts(points, name, groups),
            names=names,
            names_error=names_error,
            names_note=names_note,
            range_key=range_key,
            history_error=error,
            actions=actions,
            actions_note=actions_note,
            live_url=live_url,
        )
        return html(body)

    @app.get("/live.js")
    def live_script() -> Response:
        """The queue page's live view (a file, not inline: it runs under a CSP that
        allows only this origin's scripts)."""
        text = resources.files("zoscii_statissa").joinpath("live.js").read_text("utf-8")
        return Response(text, mimetype="text/javascript")

    @app.get(f"{QUEUES}<name>/messages/<message>")
    def message(name: str, message: str) -> tuple[Response, int]:
        try:
            browse.check_queue(name)
            browse.check_name(message)
        except InvalidInput:
            return Response("no such message\n", mimetype="text/plain"), 404
        client = request.environ.get(CLIENT)
        if access.enabled and (client is None or not client.may("fetch", name)):
            refusal = f"Reading the messages of {name} needs its read right (as a fetch does)."
            return html(message_page.render(name, message, None, error=refusal), 403)
        try:
            peeked = browse.peek(data_dir, name, message, PEEK_BYTES)
        except (QueueNotFound, MessageNotFound) as exc:
            return html(message_page.render(name, message, None, error=str(exc)), 404)
        except OSError as exc:
            log.warning("cannot read %s/%s: %s", name, message, exc)
            return html(message_page.render(name, message, None, error=str(exc)), 500)
        return html(message_page.render(name, message, peeked))

    @app.get(LOGIN)
    def login() -> tuple[Response, int]:
        name = request.args.get("queue", "")
        if not known_queue(name):
            return Response("no such queue\n", mimetype="text/plain"), 404
        shown = admin.sign_in(request.environ, name)
        return Response(shown.html, mimetype="text/html", headers=shown.headers), shown.status

    @app.get(f"{QUEUES}<name>/admin/<action>")
    def confirm(name: str, action: str) -> tuple[Response, int]:
        if action not in ACTIONS or not known_queue(name):
            return Response("not found\n", mimetype="text/plain"), 404
        value = request.args.get(PARAMETER[action], "") if PARAMETER[action] else ""
        shown = admin.confirm(request.environ, name, action, value)
        return html(shown.html, shown.status)

    @app.post(f"{QUEUES}<name>/admin/<action>")
    def submit(name: str, action: str) -> tuple[Response, int]:
        if action not in ACTIONS or not is_queue_name(name):
            return Response("not found\n", mimetype="text/plain"), 404
        shown = admin.submit(request.environ, name, action, request.form)
        return html(shown.html, shown.status)

    @app.get("/history.json")
    def history_json() -> tuple[Response, int]:
        range_key = pick_range(request.args.get("range"))
        points, error = history_points(range_key)
        body = {
            "range": range_key,
            "directory": str(history.directory),
            "error": error,
            "points": [p.to_dict() for p in points],
        }
        return jsonify(body), 200

    @app.get("/stats.json")
    def stats_json() -> tuple[Response, int]:
        snapshot, status = keeper.snapshot, keeper.status
        if snapshot is None:
            body = {"error": "no statistics computed yet", "last_run": status.to_dict()}
            return jsonify(body), 503
        return jsonify({**snapshot.to_dict(), "last_run": status.to_dict()}), 200

    @app.post(REFRESH)
    def refresh() -> ResponseReturnValue:
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


def guarded(app: WsgiApp, access: AccessControl) -> WsgiApp:
    """``app`` behind the right ``statistics`` when access control is on (else as is)."""
    if not access.enabled:
        return app

    def check(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        try:
            client = access.authenticate(environ.get("HTTP_AUTHORIZATION"))
            access.authorize(client, STATISTICS)
        except Unauthenticated as exc:
            return _deny(start_response, "401 Unauthorized", str(exc), challenge=True)
        except Forbidden as exc:
            log.info("client %s refused %s", client.name if client else "-", exc)
            return _deny(start_response, "403 Forbidden", str(exc))
        environ[CLIENT] = client  # for the rights a page needs beyond statistics
        # A browser holding Basic credentials would send them with a form another site
        # posts here; the browser says so (Fetch Metadata), so that one is refused.
        if environ.get("HTTP_SEC_FETCH_SITE") == "cross-site":
            return _deny(start_response, "403 Forbidden", "Cross-site request refused.")
        return app(environ, start_response)

    return check


def _deny(
    start_response: StartResponse, status: str, message: str, *, challenge: bool = False
) -> list[bytes]:
    body = (json.dumps({"error": message}) + "\n").encode()
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    if challenge:  # a browser asks for the token (as the password) and sends it as Basic
        headers.append(("WWW-Authenticate", 'Basic realm="zoscii statissa", charset="UTF-8"'))
        headers.append(("WWW-Authenticate", 'Bearer realm="zoscii statissa"'))
    start_response(status, headers)
    return [body]
