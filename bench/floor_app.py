"""The floors: the least an app under the api's gunicorn settings can do per request.

Both read the whole body, as the api must, and answer the same 77-byte JSON envelope.
What the api costs beyond them (parameter parsing, the queue, the disk) is the api's
own; what they cost is gunicorn and the loopback, plus Flask for ``app``:

* ``app``: a Flask app, as the api was before its publish path was mounted before
  Flask; the floor of anything routed through Flask;
* ``raw_app``: a bare WSGI callable, the floor of any Python app under this server;
* ``raw_asgi_app``: the same as an ASGI app under gunicorn's ``asgi`` worker, the floor
  of the loop server (``ZOSCII_API_SERVER=loop``).

    gunicorn --worker-class zoscii_api.gunicorn_worker.ThreadWorker ... 'bench.floor_app:raw_app'

And one that is no floor of the server but of the api's own endpoint, for publishing:

* ``publish_app``: the body decoded as the api decodes a whole form, its ``msg`` into
  an Upload, committed to the queue ``q`` by the queues the api opens with the same
  settings (``open_stores``; ``ZOSCII_DATA_DIR``, ``ZOSCII_DURABILITY``). The api's
  commit without the endpoint: no access control, metrics or request context. Ours
  minus it is what the endpoint costs; it minus the raw floor, what the core and the
  disk cost.
* ``publish_loop_app``: the same commit served from an event loop (an ASGI app, under
  gunicorn's own ``asgi`` worker), gathered as the api gathers them under
  ``ZOSCII_API_SERVER=loop`` (``zoscii_api.gather``). Ours on the loop minus it is what
  the endpoint costs there.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from flask import Flask, Response, request

from zoscii_api.gather import Gathered
from zoscii_api.params import query_fields
from zoscii_api.settings import ApiSettings
from zosciimq.core import QueueStore, Upload
from zosciimq.core.outgoing import Outgoing
from zosciimq.protocol import envelope_bytes
from zosciimq.service.stores import open_stores

ENVELOPE = envelope_bytes("", "ok", [])
HEADERS = [("Content-Type", "application/json"), ("Content-Length", str(len(ENVELOPE)))]
ASGI_HEADERS = [(name.lower().encode(), value.encode()) for name, value in HEADERS]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

app = Flask(__name__)


@app.route("/", defaults={"path": ""}, methods=["GET", "POST", "PUT"])
@app.route("/<path:path>", methods=["GET", "POST", "PUT"])
def answer(path: str) -> Response:
    request.get_data()  # the body, read in full and dropped
    return Response(ENVELOPE, mimetype="application/json")


def raw_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """Any method, any path: the body read in full and dropped, the envelope answered."""
    environ["wsgi.input"].read()
    start_response("200 OK", HEADERS)
    return [ENVELOPE]


async def raw_asgi_app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
    """``raw_app`` as an ASGI app, for gunicorn's asgi worker (the loop server's floor)."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": ASGI_HEADERS})
    await send({"type": "http.response.body", "body": ENVELOPE})


PUBLISHED = envelope_bytes("", "Message published.", [])
PUBLISHED_HEADERS = [("Content-Type", "application/json"), ("Content-Length", str(len(PUBLISHED)))]


@functools.cache
def _core() -> tuple[QueueStore, ApiSettings]:
    """The api's settings and queues, opened as the api opens them, at the first request."""
    settings = ApiSettings.from_env()
    queues = open_stores(settings.core, settings.policy, settings.max_deliveries).queues
    return queues, settings


def publish_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """``action=publish&q=...&msg=...`` (urlencoded) committed by the core, nothing else;
    a request without ``msg`` (the bench's health probe) gets the floors' envelope."""
    queues, settings = _core()
    body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
    fields = query_fields(body, settings.max_field_bytes)  # the api's decoding of a form
    if "msg" not in fields or "q" not in fields:
        start_response("200 OK", HEADERS)
        return [ENVELOPE]
    upload = Upload(queues.data_dir)
    try:
        upload.write(fields["msg"])
        message = Outgoing(upload, settings.core.default_retention_days, None)
        queues.publish_many(fields["q"].decode(), [message])
    finally:
        upload.discard()
    start_response("200 OK", PUBLISHED_HEADERS)
    return [PUBLISHED]


@functools.cache
def _gathered() -> Gathered:
    return Gathered(_core()[0])


async def publish_loop_app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
    """``publish_app`` as an ASGI app: the body read, the message committed with the
    others its worker's loop gathered meanwhile (``Gathered``)."""
    if scope["type"] == "lifespan":
        while (event := await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    chunks, more = [], True
    while more:
        event = await receive()
        chunks.append(event.get("body", b""))
        more = event.get("more_body", False)
    queues, settings = _core()
    fields = query_fields(b"".join(chunks), settings.max_field_bytes)
    reply = ENVELOPE
    if "msg" in fields and "q" in fields:
        upload = Upload(queues.data_dir)
        upload.write(fields["msg"])
        message = Outgoing(upload, settings.core.default_retention_days, None)
        await _gathered().publish(fields["q"].decode(), [message], release=upload.discard)
        reply = PUBLISHED
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(reply))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": reply})
