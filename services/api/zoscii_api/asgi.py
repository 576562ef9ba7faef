"""The api under gunicorn's ``asgi`` worker: publishes on the event loop, the rest in threads.

``ZOSCII_API_SERVER=loop`` serves the api this way (``threads``, the default, is the
gthread worker: ``zoscii_api.gunicorn_worker``). Under gthread every request holds a
thread from its first byte to its last, and a publish pays two thread hand-offs and the
GIL passing between the publishers that share its commit: about 0.2-0.3 ms of CPU a
request before the api does anything, against 0.1 on an event loop (docs/benchmarks.md).

Here a request to the protocol endpoint whose body is small (``FAST_BODY_BYTES``) is
read on the loop; if it is a publish of one message, it is checked there and committed
with the other publishes the loop gathered meanwhile (``zoscii_api.gather``), and no
thread waits for it. Everything else (other actions, large or chunked bodies, the operations
routes) is the same WSGI app as under gthread, run in a thread of a pool of
``ZOSCII_THREADS``, its body read from the loop as it arrives, so a 1 GB upload is never
held in memory. Both ways apply the body deadline (``zoscii_api.deadlines``' rule: a
timeout, plus a second for every ``ZOSCII_BODY_MIN_RATE`` bytes received).
"""

from __future__ import annotations

import asyncio
import io
import logging
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from zoscii_api.deadlines import body_due, body_too_slow
from zoscii_api.endpoint import PATHS, Endpoint, error_response
from zoscii_api.gather import Gathered
from zoscii_api.logs import access_logger, write_access
from zoscii_api.responses import Answer
from zosciimq.addresses import ClientAddress
from zosciimq.errors import ClientTooSlow, InvalidInput

log = logging.getLogger(__name__)

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Coroutine[Any, Any, None]]
WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Any]

# A body up to this is read whole on the loop (a framed batch of 100 x 1 KB is ~103 KB);
# a larger one is read by its thread as it arrives.
FAST_BODY_BYTES = 256 << 10
SEND_CHUNK = 256 << 10  # a thread's reply goes to the loop in pieces of this size


class ClientLeft(InvalidInput):
    """The connection closed before the body's end: a short body is never taken for a
    whole one (a truncated message published)."""


class BodyReader:
    """A request's body from ASGI ``receive``, under the body deadline: it must arrive
    within ``timeout`` seconds plus one for every ``min_rate`` bytes received. The end of
    the body reads as b"" for ever after; a client that left before it, as ClientLeft."""

    def __init__(self, receive: Receive, *, timeout: float, min_rate: float) -> None:
        self.receive = receive
        self.timeout = timeout
        self.min_rate = min_rate
        self.started = time.monotonic()
        self.received = 0
        self.more = True

    async def chunk(self) -> bytes:
        while self.more:
            due = body_due(
                self.started, self.received, timeout=self.timeout, min_rate=self.min_rate
            )
            try:
                async with asyncio.timeout(max(due - time.monotonic(), 0.0)):  # no task a read
                    message = await self.receive()
            except TimeoutError:
                self.more = False
                raise body_too_slow(self.timeout, self.min_rate) from None
            if message["type"] != "http.request":  # http.disconnect: the client left
                self.more = False
                raise ClientLeft(
                    "The connection closed before the end of the request body: nothing was stored."
                )
            self.more = message.get("more_body", False)
            body: bytes = message.get("body", b"")
            self.received += len(body)
            if body:
                return body
        return b""

    async def read_all(self) -> bytes:
        chunks = []
        while chunk := await self.chunk():
            chunks.append(chunk)
        return b"".join(chunks)


class ThreadBody(io.RawIOBase):
    """``wsgi.input`` for a WSGI app in a thread: each read waits for the loop to bring
    the next piece of the body (so the client's pace is the reading's, as on a socket)."""

    def __init__(self, reader: BodyReader, loop: asyncio.AbstractEventLoop) -> None:
        self.reader = reader
        self.loop = loop
        self.pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if not self.pending:
            self.pending = asyncio.run_coroutine_threadsafe(self.reader.chunk(), self.loop).result()
        size = min(len(buffer), len(self.pending))
        buffer[:size] = self.pending[:size]
        self.pending = self.pending[size:]
        return size


class ApiServer:
    """The ASGI app: see the module's docstring."""

    def __init__(
        self,
        wsgi_app: WsgiApp,
        endpoint: Endpoint,
        gathered: Gathered,
        *,
        threads: int,
        body_timeout: float,
        body_min_rate: float,
        trusted_proxies: tuple[str, ...] = (),
    ) -> None:
        self.wsgi_app = wsgi_app
        self.endpoint = endpoint
        self.gathered = gathered
        self.body_timeout = body_timeout
        self.body_min_rate = body_min_rate
        self.threads = ThreadPoolExecutor(threads, thread_name_prefix="request")
        self.addresses = ClientAddress(trusted_proxies)
        self.access_log = access_logger()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.gathered.requests += 1
            try:
                await self._http(scope, receive, send)
            finally:
                self.gathered.requests -= 1
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        else:  # a WebSocket: the live service has them, not the api
            await send({"type": "websocket.close", "code": 1003})

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            event = await receive()
            if event["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif event["type"] == "lifespan.shutdown":
                self.threads.shutdown(wait=True)
                self.gathered.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.monotonic()
        sent = _Sent(send)
        reader = BodyReader(receive, timeout=self.body_timeout, min_rate=self.body_min_rate)
        if scope["path"] in PATHS and _small_body(scope):
            try:
                body = await reader.read_all()
            except (ClientTooSlow, ClientLeft) as exc:
                environ = wsgi_environ(scope, io.BytesIO())
                if isinstance(exc, ClientTooSlow):  # one that left hears nothing
                    await _send_answer(sent, scope, error_response(exc))
                self._log(environ, sent, started)
                return
            environ = wsgi_environ(scope, io.BytesIO(body))
            answer = await self.endpoint.publish(environ, body, self.gathered)
            if answer is not None:
                await _send_answer(sent, scope, answer)
                self._log(environ, sent, started)
                return
        else:  # whole reads (as gunicorn's body gives them) of what arrives meanwhile
            body_input = ThreadBody(reader, asyncio.get_running_loop())
            environ = wsgi_environ(scope, io.BufferedReader(body_input, FAST_BODY_BYTES))
        try:
            await self._in_thread(environ, sent)
        finally:
            self._log(environ, sent, started)

    def _log(self, environ: dict[str, Any], sent: _Sent, started: float) -> None:
        seconds = time.monotonic() - started
        write_access(self.access_log, self.addresses, environ, sent.status, sent.bytes, seconds)

    async def _in_thread(self, environ: dict[str, Any], send: _Sent) -> None:
        """Serve ``environ`` by the WSGI app in a thread of the pool. A small reply comes
        back to the loop whole (one hand-off); a large one is sent piece by piece."""
        loop = asyncio.get_running_loop()

        def send_now(message: Message) -> None:  # from the thread
            asyncio.run_coroutine_threadsafe(send(message), loop).result()

        try:
            last = await loop.run_in_executor(
                self.threads, _run_wsgi, self.wsgi_app, environ, send_now
            )
            for message in last:
                await send(message)
        except OSError as exc:  # the client left while its reply was sent
            log.debug("reply not sent: %s", exc)


class _Sent:
    """``send``, counting what it sent: for the access line."""

    __slots__ = ("bytes", "send", "status")

    def __init__(self, send: Send) -> None:
        self.send = send
        self.status = 0  # none sent (the client left first)
        self.bytes = 0

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
        else:
            self.bytes += len(message.get("body", b""))
        await self.send(message)


def _run_wsgi(
    app: WsgiApp, environ: dict[str, Any], send_now: Callable[[Message], None]
) -> list[Message]:
    """Call the WSGI app; the messages still to send when its reply fits ``SEND_CHUNK``
    (all of them), else those after what ``send_now`` has sent."""
    started: list[Message] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        started[:] = [_start_message(status, headers)]
        return None  # the legacy write() callable: nothing here uses it

    iterable = app(environ, start_response)
    try:
        pending: list[bytes] = []
        size = 0
        streaming = False
        for chunk in iterable:
            if not chunk:
                continue
            pending.append(chunk)
            size += len(chunk)
            if size >= SEND_CHUNK:
                if not streaming:
                    send_now(started[0])
                    streaming = True
                send_now(
                    {"type": "http.response.body", "body": b"".join(pending), "more_body": True}
                )
                pending, size = [], 0
        last = {"type": "http.response.body", "body": b"".join(pending)}
        return [last] if streaming else [started[0], last]
    finally:
        close = getattr(iterable, "close", None)
        if close is not None:
            close()


async def _send_answer(send: _Sent, scope: Scope, answer: Answer) -> None:
    """Send an answer whose body is all there (the endpoint's publishes and refusals)."""
    environ = {"REQUEST_METHOD": scope["method"]}
    started: list[Message] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        started.append(_start_message(status, headers))

    body = b"".join(answer(environ, cast(Any, start_response)))
    await send(started[0])
    await send({"type": "http.response.body", "body": body})


def _start_message(status: str, headers: list[tuple[str, str]]) -> Message:
    return {
        "type": "http.response.start",
        "status": int(status.split(" ", 1)[0]),
        "headers": [
            (name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers
        ],
    }


def _small_body(scope: Scope) -> bool:
    """Whether the request's body is known to be at most ``FAST_BODY_BYTES``: a length
    it declares (none: no body), not chunked."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            return value.isdigit() and int(value) <= FAST_BODY_BYTES
        if name == b"transfer-encoding":
            return False
    return True


def wsgi_environ(scope: Scope, body: Any) -> dict[str, Any]:
    """The WSGI environ (PEP 3333) of an ASGI HTTP request: what the endpoint and Flask
    read of it under gthread, the same way (a repeated header joined by commas)."""
    server = scope.get("server") or ("localhost", 80)
    client = scope.get("client")
    environ: dict[str, Any] = {
        "REQUEST_METHOD": scope["method"],
        "SCRIPT_NAME": "",
        "PATH_INFO": scope["path"].encode("utf-8").decode("latin-1"),
        "QUERY_STRING": scope["query_string"].decode("latin-1"),
        "SERVER_NAME": server[0],
        "SERVER_PORT": str(server[1] or 0),
        "SERVER_PROTOCOL": f"HTTP/{scope['http_version']}",
        "REMOTE_ADDR": client[0] if client else "",
        "REMOTE_PORT": str(client[1]) if client else "",
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": scope.get("scheme", "http"),
        "wsgi.input": body,
        "wsgi.input_terminated": True,  # read to its end (chunked bodies too), as gunicorn's
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    for raw_name, raw_value in scope["headers"]:
        name = raw_name.decode("latin-1")
        if name == "content-length":
            key = "CONTENT_LENGTH"
        elif name == "content-type":
            key = "CONTENT_TYPE"
        else:
            key = "HTTP_" + name.upper().replace("-", "_")
        value = raw_value.decode("latin-1")
        environ[key] = f"{environ[key]},{value}" if key in environ else value
    return environ
