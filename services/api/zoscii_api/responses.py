"""The two kinds of reply: the JSON envelope and a message as binary.

Small replies whose bytes are all there (envelopes, messages up to 64 KiB) are a
``Reply``; streamed ones (large messages, parts, batches) a werkzeug ``Response``.

A client tells them apart by ``Content-Disposition`` (PROTOCOL.md 3), never by the
body, since a stored message may itself be JSON.
"""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Iterator
from http import HTTPStatus
from typing import Any, BinaryIO

from werkzeug.wrappers import Request, Response
from werkzeug.wsgi import wrap_file

from zosciimq.errors import RangeNotSatisfiable
from zosciimq.protocol import (
    COUNT,
    LAST,
    OFFSET,
    TOTAL_LENGTH,
    attachment,
    batch_closing,
    batch_part_head,
    envelope_bytes,
)

READ_CHUNK = 1 << 20
SMALL_MESSAGE = 64 << 10  # sent from memory; larger ones with sendfile


class Reply:
    """A small reply whose body is all there: status, headers and bytes, handed to the
    WSGI server as they are.

    Every publish and most fetches answer with one. werkzeug's Response spends more on
    its general header machinery (about 20 us a reply) than such a reply needs; this
    has what the endpoint and the actions use of a Response (``status_code``,
    ``headers``, ``content_length``, the WSGI call), and answers HEAD without a body.
    Header values are the server's own (names, counts, ids), never a client's text.
    """

    __slots__ = ("body", "headers", "status_code")

    def __init__(
        self, body: bytes, status: int, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        self.body = body
        self.status_code = status
        self.headers = {"Content-Type": content_type, **(headers or {})}

    @property
    def content_length(self) -> int:
        return len(self.body)

    def __call__(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        headers = [*self.headers.items(), ("Content-Length", str(len(self.body)))]
        start_response(_status_line(self.status_code), headers)
        return [] if environ.get("REQUEST_METHOD") == "HEAD" else [self.body]


Answer = Reply | Response  # what an action answers: small and whole, or streamed


@functools.lru_cache(maxsize=64)
def _status_line(status: int) -> str:
    return f"{status} {HTTPStatus(status).phrase}"


def envelope(
    *, error: str = "", message: str = "", result: Any = None, status: int = 200
) -> Reply:
    if result is None and not error:
        body = _plain_envelope(message)  # the frequent replies ("Message published.")
    else:
        body = envelope_bytes(error, message, [] if result is None else result)
    return Reply(body, status, "application/json")


@functools.lru_cache(maxsize=64)
def _plain_envelope(message: str) -> bytes:
    return envelope_bytes("", message, [])


def message_response(
    request: Request, name: str, file: BinaryIO, size: int, *, offset: int, length: int
) -> Answer:
    """The whole message (zero-copy sendfile under gunicorn when it is large), or a part.

    ``offset``/``length`` is the original's partial read; HTTP ``Range`` is parsed by
    werkzeug. Either way the bytes come from the already-open file, so a message the
    cleaner deletes meanwhile is still served whole.
    """
    headers = {"Content-Disposition": attachment(name), "Accept-Ranges": "bytes"}
    if offset or length:
        if offset >= size:
            file.close()
            raise RangeNotSatisfiable(
                f"Offset {offset} is at or past the end ({size} bytes).", size=size
            )
        stop = size if length == 0 or offset + length > size else offset + length
        headers |= {OFFSET: str(offset), TOTAL_LENGTH: str(size)}
        return _part(file, offset, stop, headers, status=200)
    wanted = request.range if "HTTP_RANGE" in request.environ else None  # parsed only if sent
    if wanted is not None and wanted.units == "bytes" and len(wanted.ranges) == 1:
        # Other units and multiple ranges are ignored, as RFC 9110 allows: the whole message.
        span = wanted.range_for_length(size)
        if span is None:
            file.close()
            raise RangeNotSatisfiable("Requested range not satisfiable.", size=size)
        start, stop = span
        headers["Content-Range"] = f"bytes {start}-{stop - 1}/{size}"
        return _part(file, start, stop, headers, status=206)
    if size <= SMALL_MESSAGE:  # one read beats setting up sendfile for a few KB
        try:
            data = os.pread(file.fileno(), size, 0)
        finally:
            file.close()
        return Reply(data, 200, "application/octet-stream", headers)
    response = Response(
        wrap_file(request.environ, file, READ_CHUNK),
        mimetype="application/octet-stream",
        headers=headers,
        direct_passthrough=True,
    )
    response.content_length = size
    return response


def _part(file: BinaryIO, start: int, stop: int, headers: dict[str, str], status: int) -> Response:
    response = Response(
        _read_span(file, start, stop),
        status=status,
        mimetype="application/octet-stream",
        headers=headers,
        direct_passthrough=True,
    )
    response.content_length = stop - start
    return response


def _read_span(file: BinaryIO, start: int, stop: int) -> Iterator[bytes]:
    try:
        fd, position = file.fileno(), start
        while position < stop:
            chunk = os.pread(fd, min(READ_CHUNK, stop - position), position)
            if not chunk:
                return
            position += len(chunk)
            yield chunk
    finally:
        file.close()


def batch_response(
    messages: list[tuple[str, BinaryIO, int]],
    part_headers: list[dict[str, str]] | None = None,
) -> Response:
    """Several messages in one ``multipart/mixed`` reply, each part exactly as fetch sends it.

    Every part carries ``Content-Disposition: attachment; filename="<name>"`` and its
    ``Content-Length``, so a reader can take the bytes by count rather than by searching
    for the boundary, and a binary message that happens to contain it is still safe.
    The total length is known before the first byte, so it is sent as Content-Length.
    """
    boundary = f"zoscii-{uuid.uuid4().hex}"
    extra = part_headers or [{} for _ in messages]
    heads = [
        batch_part_head(boundary, name, size, more)
        for (name, _, size), more in zip(messages, extra, strict=True)
    ]
    closing = batch_closing(boundary)
    total = sum(len(h) + size + 2 for h, (_, _, size) in zip(heads, messages, strict=True))

    def body() -> Iterator[bytes]:
        try:
            for head, (_, file, size) in zip(heads, messages, strict=True):
                yield head
                yield from _read_span(file, 0, size)
                yield b"\r\n"
            yield closing
        finally:
            for _, file, _ in messages:
                file.close()

    response = Response(
        body(),
        mimetype="multipart/mixed",
        headers={
            COUNT: str(len(messages)),
            LAST: messages[-1][0],
        },
        direct_passthrough=True,
    )
    response.headers["Content-Type"] = f"multipart/mixed; boundary={boundary}"
    response.content_length = total + len(closing)
    return response
