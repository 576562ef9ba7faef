"""The live service's answers: which request is what, who may ask, and the operations
endpoints.

The protocol endpoint (``/`` and ``/index.php``) answers three actions, as the api does
(parameters in the query string, a GET or HEAD):

* ``fetch`` (with ``wait``): long-poll, ``waiting.Fetcher``;
* ``consume`` (with ``wait``): a consumer group's long-poll, ``waiting.GroupWork``;
* ``stream``: a queue followed live, ``stream.Streams``: Server-Sent Events for a
  request that accepts ``text/event-stream``, a WebSocket for an upgrade.

A fetch or consume without ``wait`` is answered too (the same way, at once): the proxy
sends only waiting ones here, and a mistake in routing costs nothing but efficiency.
Everything else is the api's (``POST`` included: its forms need the api's parser).

Admission is the api's (``zosciimq.ratelimit``): the same clients, rights, rate limit
and trusted proxies. A stream takes its token from ``access_token`` when there is no
``Authorization`` header (a browser's EventSource and WebSocket cannot send one).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
from typing import Any

from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from zoscii_live.follow import Hub
from zoscii_live.http import Connection, ConnectionLimits, Request
from zoscii_live.metrics import LiveMetrics
from zoscii_live.replies import envelope
from zoscii_live.settings import LiveSettings
from zoscii_live.stream import Streams
from zoscii_live.waiting import ConsumeAsk, FetchAsk, Fetcher, GroupWork
from zosciimq.core.groups import clean_group
from zosciimq.core.names import clean_pointer, clean_queue
from zosciimq.cors import Cors
from zosciimq.errors import (
    ActionDisabled,
    InvalidInput,
    ReadOnly,
    WrongMethod,
    ZosciiError,
)
from zosciimq.ratelimit import Admission
from zosciimq.service.stores import open_stores

log = logging.getLogger(__name__)

PATHS = frozenset({"/", "/index.php"})
JSON = "application/json"
_TOKEN = re.compile(r"[A-Za-z0-9._:-]+")
NOT_HERE = (
    "This is the live service: it answers fetch and consume (with wait) and stream. "
    "Other actions, and POST, are the api's."
)


class LiveApp:
    def __init__(self, settings: LiveSettings, metrics: LiveMetrics) -> None:
        self.settings = settings
        self.metrics = metrics
        stores = open_stores(settings.core, settings.policy, settings.max_deliveries)
        self.data_dir, self.queues, self.groups = stores.data_dir, stores.queues, stores.groups
        self.limits = ConnectionLimits(
            settings.max_connections,
            header_timeout=settings.header_timeout_seconds,
            idle_timeout=settings.idle_timeout_seconds,
            on_refused=metrics.refused.inc,
        )
        self.hub = Hub(settings, self.queues, metrics)
        self.fetcher = Fetcher(self.hub, metrics, settings.max_batch_bytes)
        self.work = GroupWork(self.hub, self.groups, self.fetcher)
        self.streams = Streams(self.hub, metrics)
        self.admission = Admission(
            settings.access,
            rate=settings.rate_limit,
            burst=settings.rate_burst,
            trusted_proxies=settings.trusted_proxies,
        )
        self.cors = Cors(settings.cors_origins)
        for kind in ("http", "longpoll", "consume", "sse", "websocket"):
            self.metrics.connections.labels(kind).set_function(
                functools.partial(self._open_connections, kind)
            )

    def _open_connections(self, kind: str) -> int:
        return sum(c.kind == kind for c in self.limits.open)

    def connection(self) -> Connection:
        """A new connection's protocol (``loop.create_server``'s factory)."""
        return Connection(self.limits, self)

    # --- requests ---------------------------------------------------------------------------
    def handle(self, conn: Connection, request: Request) -> None:
        request.request_id = _request_id(request.headers.get("x-request-id", ""))
        if self.cors.enabled:
            request.extra["cors"] = self.cors.headers(request.headers.get("origin"))
        path = request.path
        if path not in PATHS:
            self._operations(conn, request)
            return
        action = "invalid"
        try:
            if request.method == "OPTIONS":
                self._preflight(conn, request)
                return
            if request.method not in ("GET", "HEAD"):
                raise WrongMethod(NOT_HERE)
            if request.method == "HEAD" and request.text("action") == "stream":
                raise WrongMethod("A stream is a GET.")
            action = request.text("action") or ""
            if action not in ("fetch", "consume", "stream"):
                action = "invalid"
                raise InvalidInput(NOT_HERE)
            self._dispatch(conn, request, action)
            self.metrics.requested(action, "ok")
        except ZosciiError as exc:
            self.metrics.requested(action, str(exc.status))
            headers = {"Content-Type": JSON, **exc.headers()}
            conn.respond(exc.status, headers, envelope(error=str(exc)))

    def _dispatch(self, conn: Connection, request: Request, action: str) -> None:
        settings = self.settings
        if action not in settings.enabled_actions:
            raise ActionDisabled(f"Action '{action}' is disabled on this server.")
        authorization = request.headers.get("authorization")
        if authorization is None and action == "stream" and request.query.get("access_token"):
            authorization = "Bearer " + request.text("access_token")  # type: ignore[operator]
        environ = {
            "REMOTE_ADDR": conn.peer,
            "HTTP_X_FORWARDED_FOR": request.headers.get("x-forwarded-for"),
        }
        client = self.admission.admit(environ, authorization)
        queue = clean_queue(request.text("q") or "")
        if client is not None:
            settings.access.authorize(client, "fetch" if action == "stream" else action, queue)
        wait = min(_number(request.text("wait"), "wait"), settings.max_wait_seconds)
        if action == "fetch":
            after = clean_pointer(_basename(request.text("after"), "after"))
            ask = FetchAsk(
                count=_number(request.text("count"), "count"),
                budget=_number(request.text("max_bytes"), "max_bytes"),
                offset=_number(request.text("offset"), "offset"),
                length=_number(request.text("length"), "length"),
            )
            if ask.count and (ask.offset or ask.length):
                raise InvalidInput("A batch fetch (count) takes no offset or length.")
            if ask.count > settings.max_batch_count:
                raise InvalidInput(f"count must be at most {settings.max_batch_count}.")
            self.fetcher.start(conn, queue, after, ask, wait)
        elif action == "consume":
            self._consume(conn, request, queue, wait)
        else:
            self._stream(conn, request, queue)

    def _consume(self, conn: Connection, request: Request, queue: str, wait: int) -> None:
        settings = self.settings
        if settings.read_only:
            raise ReadOnly("This server serves a read-only copy: writes are refused.")
        if request.method == "HEAD":
            raise WrongMethod("Action 'consume' changes data: use GET or POST, not HEAD.")
        count = _number(request.text("count"), "count", 9)
        if count > settings.max_batch_count:
            raise InvalidInput(f"count must be at most {settings.max_batch_count}.")
        lease = _number(request.text("lease"), "lease", 9) or settings.lease_seconds
        if not 0 < lease <= settings.max_lease_seconds:
            raise InvalidInput(f"lease must be 1 to {settings.max_lease_seconds} seconds.")
        ask = ConsumeAsk(
            group=clean_group(request.text("group")),
            count=count,
            lease=lease,
            consumer=request.text("consumer") or "-",
        )
        self.hub.spawn(self.work.start(conn, queue, ask, wait))

    def _stream(self, conn: Connection, request: Request, queue: str) -> None:
        after = clean_pointer(_basename(request.text("after"), "after"))
        if not request.upgrade:
            if "text/event-stream" not in request.headers.get("accept", ""):
                raise InvalidInput(
                    "A stream is Server-Sent Events (Accept: text/event-stream) or a "
                    "WebSocket (an Upgrade: websocket request)."
                )
            resume = request.headers.get("last-event-id")
            if resume:  # a browser reconnecting: right after the last event it got
                after = clean_pointer(_basename(resume, "Last-Event-ID"))
        self.hub.spawn(self._open_stream(conn, request, queue, after))

    async def _open_stream(
        self, conn: Connection, request: Request, queue: str, after: str
    ) -> None:
        """The queue must exist before a stream starts: a missing one is a 404 (which
        ends a browser's EventSource), not a stream that ends at once and is retried."""
        try:
            await self.hub.warm(self.hub.follower(queue))
        except Exception as exc:
            self.fetcher.error(conn, exc)
            return
        if conn.closed:
            return
        if request.upgrade:
            self.streams.start_websocket(conn, request, queue, after)
        else:
            self.streams.start_sse(conn, queue, after)

    def _preflight(self, conn: Connection, request: Request) -> None:
        headers = self.cors.preflight(request.headers) or {}
        conn.respond(204, {"Allow": "GET, HEAD, OPTIONS", **headers}, b"")

    # --- /healthz, /metrics --------------------------------------------------------------------
    def _operations(self, conn: Connection, request: Request) -> None:
        if request.path == "/healthz":
            problem = self.problem()
            if problem is None:
                body = (json.dumps({"status": "ok", **self.details()}) + "\n").encode()
                conn.respond(200, {"Content-Type": JSON}, body)
            else:
                document = {"status": "unavailable", "reason": problem, **self.details()}
                body = (json.dumps(document) + "\n").encode()
                conn.respond(503, {"Content-Type": JSON}, body)
            return
        if request.path == "/metrics":
            try:  # label values are queue names: with access control on, a right (as the api)
                client = self.settings.access.authenticate(request.headers.get("authorization"))
                self.settings.access.authorize(client, "metrics")
            except ZosciiError as exc:
                conn.respond(
                    exc.status, {"Content-Type": JSON, **exc.headers()}, envelope(error=str(exc))
                )
                return
            conn.respond(
                200, {"Content-Type": CONTENT_TYPE_LATEST}, generate_latest(self.metrics.registry)
            )
            return
        conn.respond(404, {"Content-Type": JSON}, envelope(error="Not found."))

    def problem(self) -> str | None:
        """Why this service cannot serve now, or None."""
        root = self.data_dir.root
        if not root.is_dir():
            return f"data directory {root} does not exist"
        if not os.access(root, os.R_OK | os.X_OK):
            return f"data directory {root} is not readable"
        return None

    def details(self) -> dict[str, Any]:
        return {
            "watch": self.hub.mode,
            "connections": len(self.limits.open),
            "followed_queues": len(self.hub.followers),
        }


def _number(raw: str | None, name: str, max_digits: int = 19) -> int:
    """As the api's ``whole_number``: absent or empty is 0."""
    if raw is None or raw == "":
        return 0
    if not raw.isascii() or not raw.isdigit() or len(raw) > max_digits:
        raise InvalidInput(f"Parameter '{name}' must be a whole number.")
    return int(raw)


def _basename(raw: str | None, name: str) -> str:
    if raw and ("/" in raw or "\\" in raw or "\x00" in raw):
        raise InvalidInput(f"Parameter '{name}' must be a file name, not a path.")
    return raw or ""


def _request_id(given: str) -> str:
    if 0 < len(given) <= 64 and _TOKEN.fullmatch(given):
        return given
    return os.urandom(8).hex()
