"""Reading a reply: a message as binary, or the JSON envelope, and nothing else.

Binary or JSON is decided by ``Content-Disposition`` (PROTOCOL.md 3), never by looking
at the body: a message may itself be JSON, even a perfect copy of an envelope. Every
reply is checked before any of it is used: header size, the file name, the order of the
name after the pointer, the declared length against the bytes that arrived, size limits.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.message import Message as _MimeHeaders
from typing import Any, Protocol

import requests

from zosciimq.client.errors import (
    BadHeaders,
    BadMessageName,
    NotZosciiReply,
    OutOfOrder,
    ReplyTooLarge,
    TruncatedReply,
    server_error,
)
from zosciimq.core.names import parse_name
from zosciimq.errors import InvalidInput
from zosciimq.protocol import OFFSET, TOTAL_LENGTH, is_envelope

READ_CHUNK = 1 << 16


class Sink(Protocol):
    def write(self, data: bytes, /) -> Any: ...


@dataclass(frozen=True)
class ReplyInfo:
    """What a checked binary reply says about itself, before its body is read."""

    name: str
    offset: int  # where the body starts within the message
    total_length: int | None  # the whole message's size, when known
    content_length: int | None  # the body's size, when declared
    # the part's own headers in a batch (a work-queue receipt, ...); {} for a single reply
    headers: Mapping[str, str] = field(default_factory=dict, compare=False)


SinkFactory = Callable[[ReplyInfo], Sink]


@dataclass(frozen=True)
class Envelope:
    """A successful JSON reply. ``message`` is for people: never branch on it."""

    message: str
    result: Any
    status: int
    raw: dict[str, Any]


@dataclass(frozen=True)
class Published:
    """Reply to publish/store, one per message for ``publish_many``.

    ``nonce``: what was sent, so a caller can retry with it (None: no nonce protects
    the message, see ``publish_many`` against the original). ``name``: the name given
    (store; batch publish), None when the nonce had been used already or when the
    server does not say (a single publish). ``duplicate``: True when the server said
    the nonce had been used, so nothing was written for it; False when it said it
    wrote the message; None when it does not say (single publish answers only a text
    for people, which clients must not read).
    """

    nonce: str | None
    message: str
    name: str | None = None
    duplicate: bool | None = None


@dataclass(frozen=True)
class Received:
    """A binary reply written to a sink."""

    name: str
    size: int  # bytes received in this reply
    offset: int = 0  # where they start in the message
    total_length: int | None = None  # the whole message's size, when the server said


def check_headers(response: requests.Response, max_header_bytes: int) -> None:
    total = sum(len(k) + len(v) + 4 for k, v in response.headers.items())
    if total > max_header_bytes:
        raise BadHeaders(
            f"reply headers of {total} bytes exceed {max_header_bytes}", status=response.status_code
        )


def disposition_name(response: requests.Response) -> str | None:
    """The file name of ``Content-Disposition: attachment; filename="..."``, if any."""
    value = response.headers.get("Content-Disposition")
    if not value:
        return None
    headers = _MimeHeaders()
    headers["Content-Disposition"] = value
    name = headers.get_filename()
    return name if isinstance(name, str) else None


def is_binary(response: requests.Response) -> bool:
    if disposition_name(response) is not None:
        return True
    if response.headers.get("Content-Disposition"):
        raise BadMessageName(
            "binary reply without a usable file name in Content-Disposition",
            status=response.status_code,
        )
    content_type = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if content_type == "application/octet-stream":
        raise BadMessageName(
            "binary reply without Content-Disposition: cannot tell which message it is",
            status=response.status_code,
        )
    return False


def read_envelope(response: requests.Response, max_bytes: int) -> Envelope:
    """Parse and check a JSON envelope; raise the typed error when ``error`` is set."""
    raw = read_limited(response, max_bytes)
    status = response.status_code
    try:
        body = json.loads(raw)
    except ValueError:
        raise NotZosciiReply(
            f"HTTP {status} {_content_type(response)} reply is not JSON: {_snippet(raw)}",
            status=status,
        ) from None
    if not is_envelope(body):
        raise NotZosciiReply(
            f"HTTP {status} JSON reply is not a ZOSCII MQ envelope: {_snippet(raw)}",
            status=status,
        )
    error = body.get("error", "")
    if not isinstance(error, str):
        raise NotZosciiReply(f"envelope 'error' is not a string: {_snippet(raw)}", status=status)
    if error:
        raise server_error(error, status=status, envelope=body)
    if not 200 <= status < 300:
        raise NotZosciiReply(f"HTTP {status} with an envelope that reports no error", status=status)
    message = body.get("message", "")
    return Envelope(
        message=message if isinstance(message, str) else "",
        result=body.get("result", []),
        status=status,
        raw=body,
    )


def receive_message(
    response: requests.Response,
    open_sink: SinkFactory,
    *,
    max_bytes: int | None,
    after: str | None = None,
    expect_name: str | None = None,
) -> Received:
    """Check a binary reply and stream its body into the sink ``open_sink(info)`` returns.

    ``after``: the fetch pointer the name must sort after. ``expect_name``: the name the
    reply must carry (retrieve, resumed downloads).
    """
    status = response.status_code
    name = disposition_name(response) or ""
    try:
        parse_name(name)
    except InvalidInput:
        raise BadMessageName(
            f"Content-Disposition file name {_snippet(name.encode())} is not a message name",
            status=status,
        ) from None
    if after is not None and not name > after:
        raise OutOfOrder(
            f"server returned {name}, which does not sort after {after}", status=status
        )
    if expect_name is not None and name != expect_name:
        raise BadMessageName(f"server returned {name}, expected {expect_name}", status=status)
    if status not in (200, 206):
        raise NotZosciiReply(f"HTTP {status} on a binary reply", status=status)
    declared = _int_header(response, "Content-Length")
    offset, total = _span(response)
    if max_bytes is not None and (total or declared or 0) > max_bytes:
        raise ReplyTooLarge(
            f"message {name} of {total or declared} bytes is over the maximum of {max_bytes}",
            status=status,
        )
    sink = open_sink(ReplyInfo(name, offset, total, declared))
    size = 0
    for chunk in response.iter_content(READ_CHUNK):
        size += len(chunk)
        if max_bytes is not None and offset + size > max_bytes:
            raise ReplyTooLarge(f"message {name} is over the maximum of {max_bytes}", status=status)
        sink.write(chunk)
    if declared is not None and size != declared:
        raise TruncatedReply(
            f"message {name}: {size} bytes received, Content-Length said {declared}", status=status
        )
    return Received(name=name, size=size, offset=offset, total_length=total)


def read_limited(response: requests.Response, max_bytes: int) -> bytes:
    declared = _int_header(response, "Content-Length")
    if declared is not None and declared > max_bytes:
        raise ReplyTooLarge(
            f"reply of {declared} bytes is over {max_bytes}", status=response.status_code
        )
    parts, size = [], 0
    for chunk in response.iter_content(READ_CHUNK):
        size += len(chunk)
        if size > max_bytes:
            raise ReplyTooLarge(f"reply is over {max_bytes} bytes", status=response.status_code)
        parts.append(chunk)
    body = b"".join(parts)
    if declared is not None and size != declared:
        raise TruncatedReply(
            f"reply of {size} bytes, Content-Length said {declared}", status=response.status_code
        )
    return body


def _span(response: requests.Response) -> tuple[int, int | None]:
    """Where a partial reply starts and the whole message's length (offset/length or Range)."""
    offset = _int_header(response, OFFSET)
    if offset is not None:
        return offset, _int_header(response, TOTAL_LENGTH)
    content_range = response.headers.get("Content-Range", "")
    if response.status_code == 206 and content_range.startswith("bytes "):
        span, _, total = content_range[6:].partition("/")
        start = span.partition("-")[0]
        if start.isdigit():
            return int(start), int(total) if total.isdigit() else None
        raise NotZosciiReply(f"unusable Content-Range {content_range!r}", status=206)
    return 0, _int_header(response, "Content-Length")


def _int_header(response: requests.Response, header: str) -> int | None:
    value = response.headers.get(header)
    if value is None:
        return None
    value = value.strip()
    if not value.isascii() or not value.isdigit():
        raise NotZosciiReply(f"header {header}: {value[:40]!r} is not a number")
    return int(value)


def _content_type(response: requests.Response) -> str:
    return response.headers.get("Content-Type", "(no content type)")[:60]


def _snippet(raw: bytes, limit: int = 80) -> str:
    """A short, log-safe view of a reply body (hostile servers send anything)."""
    return repr(raw[:limit]) + ("..." if len(raw) > limit else "")
