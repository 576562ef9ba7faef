"""The protocol endpoint at ``/`` and ``/index.php``: one URL, dispatched by ``action``.

It is mounted in front of the Flask app as WSGI middleware (``app.wsgi_app``) and works
on werkzeug's Request and the replies of ``responses`` directly. Flask's routing,
contexts and response finalising cost about as much as gunicorn itself (measured: a
bare werkzeug handler answers 1.6x the requests of the same handler as a Flask view)
and buy nothing here: the endpoint is a single URL whose dispatch is by parameter, and
every publish and fetch goes through it. The operations routes (/healthz, /metrics,
/openapi.yaml) stay Flask views. With ``ZOSCII_DIRECT_ACCESS=local`` (the default) the
endpoint answers only peers of this host's networks and trusted proxies
(``addresses.DirectPeers``): the api's own port is not the public one.

Request flow, one way: HTTP (this module, params, responses) -> actions -> core -> disk.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import time
from collections.abc import Callable, Iterable
from typing import Any

from werkzeug.wrappers import Request

from zoscii_api.actions import Actions, Handler
from zoscii_api.admin import AdminGate
from zoscii_api.audit import Audit, queue_label
from zoscii_api.context import RequestContext
from zoscii_api.deadlines import Watchdog, body_deadline
from zoscii_api.gather import Gathered
from zoscii_api.metrics import ApiMetrics
from zoscii_api.params import (
    MSG,
    RequestParams,
    form_fields,
    query_fields,
    query_params,
    read_params,
)
from zoscii_api.responses import Answer, Reply, envelope
from zoscii_api.settings import ACTIONS, QUEUE_ACTIONS, ApiSettings
from zosciimq.access import ADMIN_ACTIONS, GROUP_ACTIONS, Client
from zosciimq.addresses import DirectPeers, attached_networks
from zosciimq.core import DataDir, Upload
from zosciimq.core.groups import clean_group
from zosciimq.cors import Cors
from zosciimq.errors import (
    Forbidden,
    InvalidInput,
    ReadOnly,
    TooLarge,
    VolumeUnavailable,
    WrongMethod,
    ZosciiError,
)
from zosciimq.protocol import FRAMED_BATCH
from zosciimq.ratelimit import Admission

log = logging.getLogger(__name__)

PATHS = frozenset({"/", "/index.php"})
URLENCODED = "application/x-www-form-urlencoded"
METHODS = frozenset({"GET", "POST", "HEAD"})
WRITE_ACTIONS = frozenset(
    {
        "publish",
        "store",
        "identify",
        "ack",
        "requeue",
        "deadletter",
        "extend",
        "consume",
        "purge",
        "delete",
    }
)
# The actions that take a message (``msg``, a raw body, a batch): every other action's
# body holds small fields only, and a message sent with one is refused before a byte of
# it is written, whatever the client's rights (issue 27: a reader's 200 MB ``msg`` on a
# fetch went to queues/temp).
MESSAGE_ACTIONS = frozenset({"publish", "store"})
WELCOME = "ZOSCII MQ 1.0: a file-based message queue. API description: /openapi.yaml\n"
NOT_PUBLIC = (
    "This is the api's own port, for this host and its network: clients use the proxy in "
    "front of it (ZOSCII_DIRECT_ACCESS=public makes this port public)."
)
READ_ONLY = "This server serves a read-only copy: writes are refused."
FORM_OVERHEAD = 3  # urlencoding at most triples a message
_TOKEN = re.compile(r"[A-Za-z0-9._:-]+")

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


class Endpoint:
    """The WSGI app of the protocol endpoint."""

    def __init__(
        self,
        settings: ApiSettings,
        data_dir: DataDir,
        actions: Actions,
        admission: Admission,
        metrics: ApiMetrics,
        audit: Audit,
    ) -> None:
        self.settings = settings
        self.admin_gate = AdminGate(
            settings.access, settings.admin_allow, admission.addresses, audit
        )
        self.direct_peers = (
            DirectPeers(attached_networks(), admission.addresses.trusted)
            if settings.direct_access == "local"
            else None
        )
        self.data_dir = data_dir
        self.actions = actions
        self.admission = admission
        self.metrics = metrics
        self.watchdog = Watchdog(name="body-deadlines")
        self.new_upload = functools.partial(Upload, data_dir, settings.max_message_bytes)
        self.cors = Cors(settings.cors_origins)

    def mount(self, other: WsgiApp) -> WsgiApp:
        """A WSGI app that serves the endpoint's paths here and everything else by ``other``."""

        def dispatch(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
            if environ.get("PATH_INFO") in PATHS:
                return self(environ, start_response)
            return other(environ, start_response)

        return dispatch

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        started = time.perf_counter()
        request, context = self._begin(environ)
        response: Answer
        if request.method == "OPTIONS" and self.cors.enabled:  # a browser's CORS preflight
            response = Reply(b"", 204, "text/plain", {"Allow": "GET, HEAD, POST, OPTIONS"})
            response.headers.update(self.cors.preflight(_lower_headers(environ)) or {})
        elif request.method not in METHODS:
            response = envelope(error="Method not allowed: use GET or POST.", status=405)
            response.headers["Allow"] = "GET, HEAD, POST"
        else:
            try:
                response = self._handle(request, context)
            except Exception as exc:
                response = self._fault(exc, context)
        return self._finish(environ, context, response, started)(environ, start_response)

    async def publish(
        self, environ: dict[str, Any], body: bytes, gathered: Gathered
    ) -> Answer | None:
        """The answer to a publish of one message whose whole body an event loop has read
        (``body``: a small urlencoded form, a raw message, or none): it is committed with
        the others ``gathered`` meanwhile, and no thread waits for it. None when the
        request is anything else, told by a parse with no effect (nothing counted,
        nothing written): the caller serves it as WSGI, in a thread.

        The same checks as ``_prepare``'s, in the same order, on parameters decoded once
        and whole: every field is known before the message is written, so none of the
        streaming parser's steps (``before_message``, the size check before the body)
        has anything left to decide.
        """
        started = time.perf_counter()
        fields = _small_publish(environ, body, self.settings.max_field_bytes)
        if fields is None:
            return None
        request, context = self._begin(environ)
        params = RequestParams()
        try:
            self._check_peer(environ, context)
            client = self._admission(environ, context)
            self._admit(request, context, client, fields)
            message = fields.pop(MSG, None)
            params.fields = fields
            if message is not None:
                params.upload = self.new_upload()
                params.upload.write(message)
        except Exception as exc:
            params.close()
            return self._finish(environ, context, self._fault(exc, context), started)
        try:  # the params are closed by the action, once their commit is over
            response = await self.actions.publish_gathered(request, params, gathered)
        except Exception as exc:
            response = self._fault(exc, context)
        return self._finish(environ, context, response, started)

    def _begin(self, environ: dict[str, Any]) -> tuple[Request, RequestContext]:
        request_id = _request_id(environ.get("HTTP_X_REQUEST_ID", ""))
        return Request(environ), RequestContext(request_id).attach(environ)

    def _finish(
        self, environ: dict[str, Any], context: RequestContext, response: Answer, started: float
    ) -> Answer:
        response.headers["X-Request-ID"] = context.request_id
        if self.cors.enabled:
            response.headers.update(self.cors.headers(environ.get("HTTP_ORIGIN")))
        self.metrics.answered(
            context.action, response.status_code, time.perf_counter() - started, context.waited
        )
        return response

    def _fault(self, exc: Exception, context: RequestContext) -> Answer:
        """The answer to what a request raised: its own status for a refusal, 507/503
        for a volume that cannot take it, 500 (logged) for anything unexpected."""
        context.label("invalid")
        if isinstance(exc, ZosciiError):
            return error_response(exc)
        if isinstance(exc, OSError):
            return self._volume_fault(exc, context.action)
        log.error("unexpected error in %s", context.action, exc_info=exc)
        return envelope(error="Internal server error.", status=500)

    def _handle(self, request: Request, context: RequestContext) -> Answer:
        handler, params = self._prepare(request, context)
        try:
            if handler is None:
                return Reply(WELCOME.encode(), 200, "text/plain; charset=utf-8")
            return handler(request, params)
        finally:
            params.close()

    def _prepare(
        self, request: Request, context: RequestContext
    ) -> tuple[Handler | None, RequestParams]:
        """The handler of the request's action (None: it names none) and its parameters,
        once it may run; the caller closes the parameters."""
        environ = request.environ
        settings = self.settings
        self._check_peer(environ, context)
        raw_query = environ.get("QUERY_STRING", "").encode("latin-1")
        query = query_fields(raw_query, settings.max_field_bytes)
        client = self._admission(environ, context)
        # Everything that can be decided before reading a body that may be 1 GB is
        # decided first: its size, and action and q when the URL has them.
        has_body = _has_body(environ)
        if has_body:
            content_type = environ.get("CONTENT_TYPE", "")
            self._check_size(request, context, query, content_type)
            if not _is_form(content_type):
                _check_raw_body(query, _mimetype(content_type))
        handler = self._admit(request, context, client, query)  # before a byte is written
        if not has_body:  # the URL is all there is: judged above
            return handler, query_params(query, self.new_upload)
        params = self._read_body(request, context, query, client)
        try:  # a form's fields override the URL's
            return self._admit(request, context, client, params.fields), params
        except BaseException:
            params.close()
            raise

    def _check_peer(self, environ: dict[str, Any], context: RequestContext) -> None:
        """Refuse a peer from outside this host's networks (``ZOSCII_DIRECT_ACCESS``)."""
        if self.direct_peers is not None and not self.direct_peers.allows(
            environ.get("REMOTE_ADDR")
        ):
            context.action = "invalid"
            raise Forbidden(NOT_PUBLIC)

    def _admission(self, environ: dict[str, Any], context: RequestContext) -> Client | None:
        """The request's client (None: no access control), once the rate limit and its
        credential admit it."""
        client = self.admission.admit(environ, environ.get("HTTP_AUTHORIZATION"))
        if client is not None:
            context.client = client.name
        return client

    def _read_body(
        self,
        request: Request,
        context: RequestContext,
        query: dict[str, bytes],
        client: Client | None,
    ) -> RequestParams:
        """The parameters and message(s) of a body, read under its deadline."""
        environ = request.environ
        settings = self.settings

        def before_message(fields: dict[str, bytes]) -> None:
            """Called as the message starts to arrive: nothing of it is written before
            the action and queue it is for are known and allowed."""
            known = {**query, **fields}
            action = _text(known, "action")
            if not action:
                if client is None:
                    return  # no access control: judged after the body, as the original
                raise InvalidInput(
                    "Send 'action' (and 'q') before the message: in the query string, or as "
                    "form fields ahead of the 'msg' part."
                )
            self._admit(request, context, client, known)
            if action not in MESSAGE_ACTIONS:
                raise InvalidInput(f"Action '{action}' takes no message: send it without 'msg'.")

        with body_deadline(
            environ,
            self.watchdog,
            timeout=settings.body_timeout_seconds,
            min_rate=settings.body_min_rate,
        ):
            return read_params(
                query=query,
                content_type=request.content_type,
                content_length=request.content_length,
                stream=request.stream,
                has_body=True,
                new_upload=self.new_upload,
                max_field_bytes=settings.max_field_bytes,
                max_batch_parts=settings.max_batch_count,
                max_batch_bytes=settings.max_batch_bytes,
                before_message=before_message,
            )

    def _check_size(
        self,
        request: Request,
        context: RequestContext,
        query: dict[str, bytes],
        content_type: str,
    ) -> None:
        settings = self.settings
        action = _action_label(_text(query, "action") or "")
        if action in ACTIONS and action not in MESSAGE_ACTIONS:
            # Small fields only (receipts, names...): a bigger body is refused unread.
            limit = settings.max_field_bytes * (FORM_OVERHEAD + 1)
            refusal = f"Action '{action}' takes no message: its body is at most {limit} bytes."
        else:
            limit = settings.max_message_bytes * FORM_OVERHEAD + settings.max_field_bytes
            if query.get("batch") == b"1" or _mimetype(content_type) == FRAMED_BATCH:
                limit = max(limit, settings.max_batch_bytes * FORM_OVERHEAD)
            refusal = f"Message larger than the maximum of {settings.max_message_bytes} bytes."
        if request.content_length and request.content_length > limit:
            context.action = action
            raise TooLarge(refusal)

    def _admit(
        self,
        request: Request,
        context: RequestContext,
        client: Client | None,
        fields: dict[str, bytes],
    ) -> Handler | None:
        """The handler of the action ``fields`` name, once this request may run it on the
        queue and group they name; None when they name no action. Raises why not.

        Asked up to three times for a body (the URL, the start of the message, the whole
        form), each time with what the body added; a form field overrides the URL. The
        same question again (most often) has the same answer: not judged twice.
        """
        action = _text(fields, "action")
        if not action:
            return None
        handler = self.actions.handler(action)  # unknown or switched off
        asked = (action, _text(fields, "q"), _text(fields, "group"))
        if context.admitted != asked:
            self._check(request, context, client, *asked)
            context.admitted = asked
        return handler

    def _check(
        self,
        request: Request,
        context: RequestContext,
        client: Client | None,
        action: str,
        raw_queue: str | None,
        raw_group: str | None,
    ) -> None:
        context.action = action  # a known one: handler() refused the others
        if action in WRITE_ACTIONS:
            if self.settings.read_only:
                raise ReadOnly(READ_ONLY)
            if request.method == "HEAD" and action not in ADMIN_ACTIONS:  # those: POST
                raise WrongMethod(f"Action '{action}' changes data: use GET or POST, not HEAD.")
        queue = None
        if action in QUEUE_ACTIONS:
            if raw_queue is None and client is None:
                return  # a missing q is reported by the action itself
            queue = context.queue = self.actions.check_queue(action, raw_queue)
        if action in ADMIN_ACTIONS:
            admin_queue = queue_label(raw_queue)
            if admin_queue:  # for the access line (the action checks the name itself)
                context.queue = admin_queue
            self.admin_gate.admit(request.environ, context, action, admin_queue, client)
        elif client is not None:
            # A group action's group is judged once known (URL or form; the action
            # answers a missing one): groups belong to clients (zosciimq.access).
            group = clean_group(raw_group) if raw_group and action in GROUP_ACTIONS else None
            self.settings.access.authorize(client, action, queue, group)

    def _volume_fault(self, exc: OSError, action: str) -> Answer:
        """An OSError the core does not classify: 503 when the data volume cannot take
        writes (the reason /healthz gives), otherwise an unexpected error."""
        if self.settings.read_only:
            return error_response(ReadOnly(READ_ONLY))
        problem = self.data_dir.check_writable()
        if problem is None:
            log.exception("unexpected error in %s", action)
            return envelope(error="Internal server error.", status=500)
        log.error("%s failed, data volume not usable: %s (%s)", action, problem, exc)
        return error_response(
            VolumeUnavailable("The data volume is not writable; try again later.")
        )


def error_response(exc: ZosciiError) -> Answer:
    """The envelope with the error's own status and headers (``zosciimq.errors``)."""
    response = envelope(error=str(exc), status=exc.status)
    response.headers.update(exc.headers())
    return response


def _small_publish(environ: dict[str, Any], body: bytes, limit: int) -> dict[str, bytes] | None:
    """The parameters of a publish of one message, ``msg`` among them: the URL's, over
    which a urlencoded form's fields go (as PHP's ``$_REQUEST``), or the URL's and a raw
    body as the message. None for any other request, or one the general path must
    refuse (it says why). Batches (framed, multipart, ``batch=1``) go to a thread too:
    their hundred uploads are as many file creations, which would hold the loop
    (measured: 4 clients' framed batches 25 % slower on the loop than in threads). A
    request that does not spell "publish" (a fetch) is let go before anything is decoded;
    one that escapes it (``%70ublish``) is served by the general path, as rightly."""
    if environ.get("REQUEST_METHOD") not in ("GET", "POST"):
        return None
    query = environ.get("QUERY_STRING", "").encode("latin-1")
    if b"publish" not in query and b"publish" not in body:
        return None  # a fetch, most often: decoded once, by the general path
    mimetype = _mimetype(environ.get("CONTENT_TYPE"))
    if mimetype in ("multipart/form-data", FRAMED_BATCH):
        return None
    try:
        fields = query_fields(query, limit)
        if mimetype == URLENCODED:
            fields.update(form_fields(body, limit))
        elif body:  # the message itself, unless the URL has one too (refused)
            if fields.get(MSG):
                return None
            fields[MSG] = body
        elif _has_body(environ):  # an empty raw message, or the URL's
            fields.setdefault(MSG, b"")
    except InvalidInput:
        return None
    if fields.get("action") != b"publish" or "batch" in fields:
        return None
    return fields


def _text(fields: dict[str, bytes], name: str) -> str | None:
    value = fields.get(name)
    return None if value is None else value.decode("latin-1")


def _has_body(environ: dict[str, Any]) -> bool:
    """A declared body, even of length 0 (an empty raw message), or a chunked one. (From
    the environ: werkzeug's properties cost more than a GET's whole parsing.)"""
    return (
        environ.get("CONTENT_LENGTH", "0") not in ("", "0")
        or (environ.get("REQUEST_METHOD") == "POST" and bool(environ.get("CONTENT_TYPE")))
        or "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower()
    )


def _mimetype(content_type: str | None) -> str:
    """What werkzeug's ``request.mimetype`` says, without parsing the options."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def _is_form(content_type: str | None) -> bool:
    return _mimetype(content_type) in (URLENCODED, "multipart/form-data")


def _check_raw_body(query: dict[str, bytes], mimetype: str) -> None:
    """A body that is not a form is a message (or a framed batch of them): only publish
    and store take one, and the URL must say which before a byte of it is read."""
    action = _text(query, "action")
    if mimetype == FRAMED_BATCH and action != "publish":
        raise InvalidInput(
            f"A {FRAMED_BATCH} body is a batch publish: put action=publish (with q) in the "
            "query string."
        )
    if action not in MESSAGE_ACTIONS:
        raise InvalidInput(
            "A body that is not a form is the message of a publish or store: put "
            "action=publish (with q) or action=store in the query string."
        )


def _lower_headers(environ: dict[str, Any]) -> dict[str, str]:
    """The request's headers by lower-case name (what a CORS preflight sends)."""
    return {
        key[5:].replace("_", "-").lower(): value
        for key, value in environ.items()
        if key.startswith("HTTP_") and isinstance(value, str)
    }


def _request_id(given: str) -> str:
    """The caller's X-Request-ID when it is a plain token (so logs can join a proxy's),
    else a new one: it goes into log lines, so nothing else is taken from the client."""
    if 0 < len(given) <= 64 and _TOKEN.fullmatch(given):
        return given
    return os.urandom(8).hex()


def _action_label(action: str) -> str:
    """Bounded label values: an attacker's action names must not grow /metrics."""
    return action if action in ACTIONS else "invalid"
