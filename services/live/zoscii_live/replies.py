"""The bytes the live service writes: HTTP heads, the api's replies, stream events.

Everything a wake-up delivers is encoded once and written to every reader it is for:
the body of a long-poll answer (the same message for every reader waiting after the same
pointer), a Server-Sent Events chunk, a WebSocket frame (a server's frames are not
masked, so one frame's bytes serve every connection). Only an HTTP head differs per
request (its X-Request-ID), and it is small.

The replies are the api's, byte for byte where a client looks (``zoscii_api.responses``):
the JSON envelope, a message as ``application/octet-stream`` with ``Content-Disposition:
attachment; filename="<name>"``, and a batch as ``multipart/mixed`` whose parts carry
their own ``Content-Disposition`` and ``Content-Length``.
"""

from __future__ import annotations

import base64
import functools
import json
import uuid
from collections.abc import Iterable, Mapping
from http import HTTPStatus

from websockets.frames import Close, Frame, Opcode

from zosciimq import protocol

# Browsers reconnect an EventSource this long after it closed (SSE "retry").
SSE_RETRY_MS = 1000
SSE_HEARTBEAT = b": keep-alive\n\n"


@functools.lru_cache(maxsize=64)
def status_line(status: int) -> bytes:
    return f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n".encode("ascii")


def head(
    status: int,
    headers: Mapping[str, str] | Iterable[tuple[str, str]],
    *,
    length: int | None,
    keep_alive: bool,
) -> bytes:
    """A response head; ``length`` None: the body ends when the connection closes."""
    items = headers.items() if isinstance(headers, Mapping) else headers
    lines = [status_line(status)]
    lines.extend(f"{name}: {value}\r\n".encode("latin-1") for name, value in items)
    if length is not None:
        lines.append(b"Content-Length: %d\r\n" % length)
    lines.append(b"\r\n" if keep_alive and length is not None else b"Connection: close\r\n\r\n")
    return b"".join(lines)


def prefix_of(status: int, headers: Mapping[str, str]) -> bytes:
    """The part of a head that is the same for every reader of an answer: the status
    line and the headers; ``Connection.respond_prefixed`` adds the request's own."""
    return status_line(status) + b"".join(
        f"{name}: {value}\r\n".encode("latin-1") for name, value in headers.items()
    )


def envelope(*, error: str = "", message: str = "", result: object = None) -> bytes:
    if result is None and not error:
        return _plain_envelope(message)
    return protocol.envelope_bytes(error, message, [] if result is None else result)


@functools.lru_cache(maxsize=64)
def _plain_envelope(message: str) -> bytes:
    return protocol.envelope_bytes("", message, [])


def message_headers(name: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A message as fetch answers it (the api's ``message_response``)."""
    return {
        "Content-Type": "application/octet-stream",
        "Content-Disposition": protocol.attachment(name),
        "Accept-Ranges": "bytes",
        **(extra or {}),
    }


def partial_headers(name: str, offset: int, total: int) -> dict[str, str]:
    """An ``offset``/``length`` read of a message (the api's, without Accept-Ranges)."""
    return {
        "Content-Type": "application/octet-stream",
        "Content-Disposition": protocol.attachment(name),
        "Accept-Ranges": "bytes",
        protocol.OFFSET: str(offset),
        protocol.TOTAL_LENGTH: str(total),
    }


def multipart(
    parts: list[tuple[str, bytes]], part_headers: list[dict[str, str]] | None = None
) -> tuple[dict[str, str], bytes]:
    """A batch: the reply's headers and body (the api's ``batch_response``)."""
    boundary = f"zoscii-{uuid.uuid4().hex}"
    extra = part_headers or [{} for _ in parts]
    chunks: list[bytes] = []
    for (name, data), more in zip(parts, extra, strict=True):
        chunks.append(protocol.batch_part_head(boundary, name, len(data), more))
        chunks.append(data)
        chunks.append(b"\r\n")
    chunks.append(protocol.batch_closing(boundary))
    headers = {
        "Content-Type": f"multipart/mixed; boundary={boundary}",
        protocol.COUNT: str(len(parts)),
        protocol.LAST: parts[-1][0],
    }
    return headers, b"".join(chunks)


# --- Server-Sent Events -------------------------------------------------------------


def sse_start() -> bytes:
    """The first bytes of a stream: the reconnect delay."""
    return b"retry: %d\n\n" % SSE_RETRY_MS


def sse_message(name: str, data: bytes) -> bytes:
    """One message as an event whose ``id`` is its name (a browser's reconnect sends it
    back as ``Last-Event-ID``, and the stream resumes right after it).

    UTF-8 text without a carriage return goes as it is, one ``data:`` line per line
    (SSE joins them with LF, exactly as they were); anything else as ``event: binary``
    with the bytes in base64, since an event stream is text and a parser takes CR, LF
    and CRLF alike as a line's end.
    """
    prefix = b"id: " + name.encode("ascii") + b"\n"
    if b"\r" not in data:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            pass
        else:
            return prefix + b"".join(b"data: " + line + b"\n" for line in data.split(b"\n")) + b"\n"
    return prefix + b"event: binary\ndata: " + base64.b64encode(data) + b"\n\n"


def sse_large(name: str, size: int) -> bytes:
    """A message over the inline limit: its name and size; the reader fetches it
    (``fetch`` with ``after`` = the name before it)."""
    document = json.dumps({"name": name, "size": size}, separators=(",", ":"))
    return b"id: " + name.encode("ascii") + b"\nevent: large\ndata: " + document.encode() + b"\n\n"


def sse_disconnect(code: str, reason: str, last: str) -> bytes:
    """The last event of a stream the server ends: why, and where to resume."""
    document = json.dumps({"code": code, "reason": reason, "resume_after": last})
    return b"event: disconnect\ndata: " + document.encode() + b"\n\n"


# --- WebSocket ----------------------------------------------------------------------


def ws_message(name: str, data: bytes) -> bytes:
    """One message as one binary frame: its name (ASCII), a line feed, its bytes."""
    return Frame(Opcode.BINARY, name.encode("ascii") + b"\n" + data).serialize(mask=False)


def ws_notice(document: Mapping[str, object]) -> bytes:
    """A text frame with a JSON document (a large message's name and size)."""
    text = json.dumps(document, separators=(",", ":")).encode()
    return Frame(Opcode.TEXT, text).serialize(mask=False)


def ws_close(code: int, reason: str) -> bytes:
    return Frame(Opcode.CLOSE, Close(code, reason[:120]).serialize()).serialize(mask=False)


WS_PING = Frame(Opcode.PING, b"").serialize(mask=False)
