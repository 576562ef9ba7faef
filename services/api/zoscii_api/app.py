"""The api's Flask application: the protocol endpoint plus the operations routes.

``create_app`` wires the pieces together once per worker; nothing is shared through
import side effects. The protocol endpoint (``/``, ``/index.php``) is mounted in front
of Flask (see ``zoscii_api.endpoint``); /healthz, /metrics and /openapi.yaml are views.
"""

from __future__ import annotations

import json
import logging
import os
from importlib import resources

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from zoscii_api.actions import Actions
from zoscii_api.admin import AdminActions
from zoscii_api.asgi import ApiServer
from zoscii_api.audit import Audit
from zoscii_api.endpoint import Endpoint, error_response
from zoscii_api.gather import Gathered
from zoscii_api.metrics import ApiMetrics
from zoscii_api.responses import Answer, envelope
from zoscii_api.settings import ApiSettings
from zoscii_api.waiting import QueueWatcher
from zoscii_api.work import WorkActions
from zosciimq.core import DataDir, DataStore
from zosciimq.core.admin import QueueAdmin
from zosciimq.core.clock import Clock, utc_now
from zosciimq.core.restart import recover_at_start
from zosciimq.errors import VolumeUnavailable, ZosciiError
from zosciimq.ratelimit import Admission
from zosciimq.service.stores import open_stores

log = logging.getLogger(__name__)

COMMIT_THREADS = 8  # queues whose commits run at once in a worker (one each)


def create_app(settings: ApiSettings | None = None, *, clock: Clock = utc_now) -> Flask:
    """The api as a WSGI app (gthread workers, tests)."""
    return _build(settings or ApiSettings.from_env(), clock)[0]


def create_asgi_app(settings: ApiSettings | None = None, *, clock: Clock = utc_now) -> ApiServer:
    """The api as an ASGI app (``ZOSCII_API_SERVER=loop``, gunicorn's asgi worker):
    publishes gathered on the loop, everything else the WSGI app in threads."""
    settings = settings or ApiSettings.from_env()
    app, endpoint = _build(settings, clock)
    return ApiServer(
        app,
        endpoint,
        Gathered(endpoint.actions.queues, threads=COMMIT_THREADS),
        threads=settings.threads,
        body_timeout=settings.body_timeout_seconds,
        body_min_rate=settings.body_min_rate,
        trusted_proxies=settings.trusted_proxies,
    )


def _build(settings: ApiSettings, clock: Clock) -> tuple[Flask, Endpoint]:
    data_dir = DataDir(settings.data_dir)
    problem = _readable(data_dir) if settings.read_only else _prepare(data_dir)
    if problem:
        log.error("data directory not usable: %s", problem)
    metrics = ApiMetrics()
    audit = Audit(metrics)
    stores = open_stores(settings.core, settings.policy, settings.max_deliveries, clock=clock)
    queues, groups = stores.queues, stores.groups
    store = DataStore(
        data_dir,
        clock=clock,
        durability=queues.durability,  # the same mode and flusher as the queues
        checkpointer=queues.checkpointer,
        flusher=queues.flusher,
    )
    if not settings.read_only and not problem:
        recover_at_start(queues, store)  # before this worker answers
    watcher = QueueWatcher(queues.change_token, settings.wait_poll_ms / 1000, settings.max_waiters)
    actions = Actions(
        settings=settings,
        queues=queues,
        store=store,
        metrics=metrics,
        watcher=watcher,
        work=WorkActions(settings, groups, metrics, watcher),
        admin=AdminActions(QueueAdmin(data_dir, queues, groups), watcher, audit),
    )
    admission = Admission(
        settings.access,
        rate=settings.rate_limit,
        burst=settings.rate_burst,
        trusted_proxies=settings.trusted_proxies,
    )
    endpoint = Endpoint(settings, data_dir, actions, admission, metrics, audit)
    app = Flask(__name__)
    app.config["ZOSCII_SETTINGS"] = settings
    app.wsgi_app = endpoint.mount(app.wsgi_app)  # type: ignore[method-assign, assignment]

    @app.get("/healthz")
    def healthz() -> Response:
        try:
            _check_volume(data_dir, read_only=settings.read_only)
        except VolumeUnavailable as exc:  # the health document, not the envelope
            body = json.dumps({"status": "unavailable", "reason": str(exc)})
            return Response(
                body + "\n", exc.status, headers=exc.headers(), mimetype="application/json"
            )
        return Response('{"status":"ok"}\n', mimetype="application/json")

    @app.get("/metrics")
    def metrics_page() -> Answer:
        try:  # label values are queue names: with access control on, they need a right
            client = settings.access.authenticate(request.headers.get("Authorization"))
            settings.access.authorize(client, "metrics")
        except ZosciiError as exc:
            return error_response(exc)
        body, content_type = metrics.exposition()
        return Response(body, content_type=content_type)

    @app.get("/openapi.yaml")
    def openapi() -> Response:
        text = resources.files("zoscii_api").joinpath("openapi.yaml").read_text("utf-8")
        return Response(text, mimetype="application/yaml")

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Answer:
        response = envelope(error=exc.description or exc.name, status=exc.code or 500)
        valid = getattr(exc, "valid_methods", None)
        if exc.code == 405 and valid:
            response.headers["Allow"] = ", ".join(sorted(valid))
        return response

    return app, endpoint


def _check_volume(data_dir: DataDir, *, read_only: bool) -> None:
    """Raises VolumeUnavailable with the reason the data cannot be served now. A volume
    that is not usable is prepared again first: it may have been mounted late."""
    if read_only:
        problem = _readable(data_dir)
    else:
        problem = data_dir.check_writable() and _prepare(data_dir, create_root=False)
    if problem:
        raise VolumeUnavailable(problem)


def _readable(data_dir: DataDir) -> str | None:
    """Why a read-only copy cannot be served, or None."""
    if not data_dir.root.is_dir():
        return f"data directory {data_dir.root} does not exist"
    if not os.access(data_dir.root, os.R_OK | os.X_OK):
        return f"data directory {data_dir.root} is not readable"
    return None


def _prepare(data_dir: DataDir, *, create_root: bool = True) -> str | None:
    try:
        data_dir.ensure(create_root=create_root)
    except OSError as exc:
        return str(exc)
    return data_dir.check_writable()
