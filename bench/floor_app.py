"""The floors: the least an app under the api's gunicorn settings can do per request.

Both read the whole body, as the api must, and answer the same 77-byte JSON envelope.
What the api costs beyond them (parameter parsing, the queue, the disk) is the api's
own; what they cost is gunicorn and the loopback, plus Flask for ``app``:

* ``app``: a Flask app, as the api was before its publish path was mounted before
  Flask; the floor of anything routed through Flask;
* ``raw_app``: a bare WSGI callable, the floor of any Python app under this server.

    gunicorn --worker-class zoscii_api.gunicorn_worker.ThreadWorker ... 'bench.floor_app:raw_app'

And one that is no floor of the server but of the api's own endpoint, for publishing:

* ``publish_app``: the body decoded as the api decodes a whole form, its ``msg`` into
  an Upload, committed to the queue ``q`` by the queues the api opens with the same
  settings (``open_stores``; ``ZOSCII_DATA_DIR``, ``ZOSCII_DURABILITY``). The api's
  commit without the endpoint: no access control, metrics or request context. Ours
  minus it is what the endpoint costs; it minus the raw floor, what the core and the
  disk cost.
* ``publish_loop_app``: the same commit served from an event loop (an ASGI app, under
  gunicorn's own ``asgi`` worker: no thread per request), each worker's requests
  gathered while its one commit thread commits the last of them, and committed
  together by ``QueueStore.publish_each``. What the api's publish path would cost on
  that design: the measurement behind issue 24's closing note.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from flask import Flask, Response, request

from zoscii_api.params import query_fields
from zoscii_api.settings import ApiSettings
from zosciimq.core import QueueStore, Upload
from zosciimq.core.outgoing import Outgoing, PublishResult
from zosciimq.protocol import envelope_bytes
from zosciimq.service.stores import open_stores

ENVELOPE = envelope_bytes("", "ok", [])
HEADERS = [("Content-Type", "application/json"), ("Content-Length", str(len(ENVELOPE)))]

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


Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
Waiting = tuple[Outgoing, "asyncio.Future[list[PublishResult]]"]
Outcome = list[PublishResult] | BaseException


class Gathered:
    """A worker's publishes, gathered on its event loop for its commit threads: while a
    queue's commit runs, the loop answers the last and gathers the next, so a commit
    covers every request for its queue that arrived during the one before (no thread
    waits per request, and no request waits for more than the commit before its own).
    One commit in flight per queue; the queues' commits run side by side. A request
    alone (nothing else waiting, nothing committing) is committed on the loop itself."""

    def __init__(self, queues: QueueStore, threads: int = 8) -> None:
        self.queues = queues
        self.waiting: dict[str, list[Waiting]] = {}  # by queue: the next round
        self.committing: set[str] = set()
        self.threads = ThreadPoolExecutor(threads, thread_name_prefix="commit")

    def publish(self, queue: str, message: Outgoing) -> asyncio.Future[list[PublishResult]]:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[list[PublishResult]] = loop.create_future()
        waiting = self.waiting.setdefault(queue, [])
        waiting.append((message, answer))
        if len(waiting) == 1 and queue not in self.committing:
            loop.call_soon(self._commit_next, queue)  # once the loop has read what is ready
        return answer

    def _commit_next(self, queue: str) -> None:
        callers = self.waiting.pop(queue, [])
        if not callers or queue in self.committing:
            return
        messages = [[message] for message, _ in callers]
        if len(callers) == 1 and not self.committing:
            # Alone on the loop: nothing to gather meanwhile, so no hand-off to a thread
            # (its wake-ups cost a lone client more than the loop's wait for the flush).
            outcomes: list[Outcome]
            try:
                outcomes = self.queues.publish_each(queue, messages)
            except Exception as exc:  # its caller gets it (a 500 in the bench)
                outcomes = [exc]
            self._answer(queue, callers, outcomes)
            return
        self.committing.add(queue)
        loop = asyncio.get_running_loop()
        committing = self.threads.submit(self.queues.publish_each, queue, messages)
        committing.add_done_callback(
            lambda done: loop.call_soon_threadsafe(self._committed, queue, callers, done)
        )

    def _committed(self, queue: str, callers: list[Waiting], done: Future[list[Outcome]]) -> None:
        self.committing.discard(queue)
        failed = done.exception()
        self._answer(queue, callers, [failed] * len(callers) if failed else done.result())

    def _answer(self, queue: str, callers: list[Waiting], outcomes: list[Outcome]) -> None:
        for (_, answer), outcome in zip(callers, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                answer.set_exception(outcome)
            else:
                answer.set_result(outcome)
        self._commit_next(queue)


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
        try:
            upload.write(fields["msg"])
            message = Outgoing(upload, settings.core.default_retention_days, None)
            await _gathered().publish(fields["q"].decode(), message)
            reply = PUBLISHED
        finally:
            upload.discard()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(reply))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": reply})
