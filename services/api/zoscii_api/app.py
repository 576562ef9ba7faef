"""The Flask application: one endpoint at ``/`` and ``/index.php``, plus operations routes.

Request flow, one way: HTTP (this module, params, responses) -> core -> disk.
"""

from __future__ import annotations

import json
import logging
import time
from importlib import resources
from urllib.parse import parse_qsl

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from zoscii_api.actions import ActionDisabled, Actions, QueueBlocked
from zoscii_api.auth import Client, Forbidden, Unauthenticated
from zoscii_api.deadlines import ClientTooSlow, Watchdog, body_deadline
from zoscii_api.metrics import ApiMetrics
from zoscii_api.params import RequestParams, read_params
from zoscii_api.ratelimit import Admission, RateLimited
from zoscii_api.responses import RangeNotSatisfiable, envelope
from zoscii_api.settings import ACTIONS, ApiSettings
from zoscii_api.waiting import QueueWatcher
from zosciimq.core import (
    DataDir,
    DataStore,
    InvalidInput,
    MessageNotFound,
    QueueNotFound,
    QueueStore,
    StorageFull,
    TooLarge,
    TryAgain,
    Upload,
    ZosciiError,
)
from zosciimq.core.queues import Clock, utc_now

log = logging.getLogger("zoscii.api")


class WrongMethod(InvalidInput):
    """HEAD on an action that writes: HEAD must be safe."""


WRITE_ACTIONS = frozenset({"publish", "store", "identify"})
WELCOME = "ZOSCII MQ 1.0: a file-based message queue. API description: /openapi.yaml\n"
FORM_OVERHEAD = 3  # urlencoding at most triples a message

# Most specific first: the first class that matches decides the status.
STATUS_OF: tuple[tuple[type[ZosciiError], int], ...] = (
    (Unauthenticated, 401),
    (Forbidden, 403),
    (ActionDisabled, 403),
    (QueueBlocked, 403),
    (RateLimited, 429),
    (ClientTooSlow, 408),
    (RangeNotSatisfiable, 416),
    (WrongMethod, 405),
    (InvalidInput, 400),
    (QueueNotFound, 404),
    (MessageNotFound, 404),
    (TooLarge, 413),
    (TryAgain, 503),
    (StorageFull, 507),
)


def create_app(settings: ApiSettings | None = None, *, clock: Clock = utc_now) -> Flask:
    settings = settings or ApiSettings.from_env()
    data_dir = DataDir(settings.data_dir)
    problem = _prepare(data_dir)
    if problem:
        log.error("data directory not usable: %s", problem)
    metrics = ApiMetrics()
    admission = Admission(
        settings.access,
        rate=settings.rate_limit,
        burst=settings.rate_burst,
        trusted_proxies=settings.trusted_proxies,
    )
    watchdog = Watchdog(name="body-deadlines")
    queues = QueueStore(data_dir, clock=clock)
    actions = Actions(
        settings=settings,
        queues=queues,
        store=DataStore(data_dir, clock=clock),
        metrics=metrics,
        watcher=QueueWatcher(
            queues.change_token, settings.wait_poll_ms / 1000, settings.max_waiters
        ),
    )
    app = Flask(__name__)
    app.config["ZOSCII_SETTINGS"] = settings

    @app.route("/", methods=["GET", "POST"])
    @app.route("/index.php", methods=["GET", "POST"])
    def endpoint() -> Response:
        started = time.perf_counter()
        action_label = "none"
        try:
            response = _handle(settings, data_dir, actions, admission, watchdog)
            action_label = request.environ.get("zoscii.action", "none")
        except ZosciiError as exc:
            action_label = request.environ.get("zoscii.action", "invalid")
            response = _error_response(exc)
        except OSError as exc:
            action_label = request.environ.get("zoscii.action", "invalid")
            response = _volume_fault(data_dir, exc, action_label)
        except Exception:
            action_label = request.environ.get("zoscii.action", "invalid")
            log.exception("unexpected error in %s", action_label)
            response = envelope(error="Internal server error.", status=500)
        metrics.requests.labels(action_label, str(response.status_code)).inc()
        metrics.latency.labels(action_label).observe(time.perf_counter() - started)
        return response

    @app.get("/healthz")
    def healthz() -> Response:
        # Not usable: try to create the skeleton again, for a volume that came late.
        problem = data_dir.check_writable() and _prepare(data_dir, create_root=False)
        if problem:
            body = json.dumps({"status": "unavailable", "reason": problem})
            return Response(body + "\n", 503, mimetype="application/json")
        return Response('{"status":"ok"}\n', mimetype="application/json")

    @app.get("/metrics")
    def metrics_page() -> Response:
        try:  # label values are queue names: with access control on, they need a right
            client = settings.access.authenticate(request.headers.get("Authorization"))
            settings.access.authorize(client, "metrics")
        except ZosciiError as exc:
            return _error_response(exc)
        body, content_type = metrics.exposition()
        return Response(body, content_type=content_type)

    @app.get("/openapi.yaml")
    def openapi() -> Response:
        text = resources.files("zoscii_api").joinpath("openapi.yaml").read_text("utf-8")
        return Response(text, mimetype="application/yaml")

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        response = envelope(error=exc.description or exc.name, status=exc.code or 500)
        valid = getattr(exc, "valid_methods", None)
        if exc.code == 405 and valid:
            response.headers["Allow"] = ", ".join(sorted(valid))
        return response

    return app


def _prepare(data_dir: DataDir, *, create_root: bool = True) -> str | None:
    try:
        data_dir.ensure(create_root=create_root)
    except OSError as exc:
        return str(exc)
    return data_dir.check_writable()


def _handle(
    settings: ApiSettings,
    data_dir: DataDir,
    actions: Actions,
    admission: Admission,
    watchdog: Watchdog,
) -> Response:
    query = request.environ.get("QUERY_STRING", "").encode("latin-1")
    # Look at action and q from the URL before reading a body that may be 1 GB:
    # a disabled action, a blocked queue or an oversized body is refused up front.
    peek = dict(parse_qsl(query.decode("latin-1"), keep_blank_values=True))
    client = admission.admit(request.environ, request.headers.get("Authorization"))
    _check_early(settings, actions, peek, client)
    # A declared body, even of length 0 (an empty raw message), or a chunked one.
    has_body = (
        bool(request.content_length)
        or (request.method == "POST" and bool(request.content_type))
        or "chunked" in request.headers.get("Transfer-Encoding", "").lower()
    )
    with body_deadline(
        request.environ,
        watchdog,
        timeout=settings.body_timeout_seconds,
        min_rate=settings.body_min_rate,
    ):
        params = read_params(
            query=query,
            content_type=request.content_type,
            stream=request.stream,
            has_body=has_body,
            new_upload=lambda: Upload(data_dir, settings.max_message_bytes),
            max_field_bytes=settings.max_field_bytes,
        )
    try:
        return _dispatch(actions, params, client)
    finally:
        params.close()


def _check_early(
    settings: ApiSettings, actions: Actions, peek: dict[str, str], client: Client | None
) -> None:
    limit = settings.max_message_bytes * FORM_OVERHEAD + settings.max_field_bytes
    if request.content_length and request.content_length > limit:
        request.environ["zoscii.action"] = _action_label(peek.get("action", ""))
        raise TooLarge(f"Message larger than the maximum of {settings.max_message_bytes} bytes.")
    action = peek.get("action")
    if action:
        request.environ["zoscii.action"] = _action_label(action)
        actions.handler(action)
        if action in ("publish", "fetch"):
            if peek.get("q"):
                actions.check_queue(action, peek["q"])
                actions.authorize(client, action, peek["q"])
        else:
            actions.authorize(client, action, None)


def _dispatch(actions: Actions, params: RequestParams, client: Client | None) -> Response:
    action = params.text("action")
    if not action:
        return Response(WELCOME, mimetype="text/plain")
    request.environ["zoscii.action"] = _action_label(action)
    handler = actions.handler(action)
    if request.method == "HEAD" and action in WRITE_ACTIONS:
        raise WrongMethod(f"Action '{action}' changes data: use GET or POST, not HEAD.")
    actions.authorize(client, action, params.text("q"))
    return handler(request, params)


def _action_label(action: str) -> str:
    """Bounded label values: an attacker's action names must not grow /metrics."""
    return action if action in ACTIONS else "invalid"


def _error_response(exc: ZosciiError) -> Response:
    status = next((code for kind, code in STATUS_OF if isinstance(exc, kind)), 500)
    response = envelope(error=str(exc), status=status)
    if status == 503:
        response.headers["Retry-After"] = "1"
    if isinstance(exc, RateLimited):
        response.headers["Retry-After"] = str(exc.retry_after)
    if status == 405:
        response.headers["Allow"] = "GET, POST"
    if status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="zoscii", Basic realm="zoscii"'

    return response


def _volume_fault(data_dir: DataDir, exc: OSError, action: str) -> Response:
    """An OSError the core does not classify: 503 when the data volume cannot take
    writes (the reason /healthz gives), otherwise an unexpected error."""
    problem = data_dir.check_writable()
    if problem is None:
        log.exception("unexpected error in %s", action)
        return envelope(error="Internal server error.", status=500)
    log.error("%s failed, data volume not usable: %s (%s)", action, problem, exc)
    response = envelope(error="The data volume is not writable; try again later.", status=503)
    response.headers["Retry-After"] = "5"
    return response
