"""Work-queue requests (consume, ack) as a client sends them, with requests: shared by the
storm tests, the e2e work-group tests and the work-queue benchmark.

A batch reply (``count=``) is ``multipart/mixed``; every part carries its
``Content-Length``, so it is cut by count, not by searching for the boundary (a binary
message may contain anything). A single reply is the message itself with the same
headers on the response.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import requests

TIMEOUT = 120
FORM = "application/x-www-form-urlencoded"


class WorkError(RuntimeError):
    """The api answered something a work-queue client does not expect."""


@dataclass(frozen=True)
class Leased:
    """One delivered message: its name, receipt, delivery count and bytes."""

    name: str
    receipt: str
    deliveries: int
    body: bytes


@dataclass(frozen=True)
class AckResult:
    """What one receipt of an ack request became: ``ok``, ``fenced`` or ``unknown``."""

    receipt: str
    result: str

    @property
    def name(self) -> str:
        return self.receipt.partition(":")[0]


def consume(
    session: requests.Session,
    base: str,
    queue: str,
    group: str,
    *,
    count: int = 0,
    lease: int = 30,
    wait: int = 0,
    consumer: str = "",
) -> list[Leased]:
    """``action=consume``: the leased messages, [] when the group has nothing for now.

    ``count`` 0 asks for one message (the binary reply), more for a batch (multipart)."""
    params = {"action": "consume", "q": queue, "group": group, "lease": str(lease)}
    if count:
        params["count"] = str(count)
    if wait:
        params["wait"] = str(wait)
    if consumer:
        params["consumer"] = consumer
    reply = session.get(base, params=params, timeout=TIMEOUT + wait)
    content_type = reply.headers.get("Content-Type", "")
    if reply.status_code != 200:
        raise WorkError(f"consume answered {reply.status_code}: {reply.content[:300]!r}")
    if content_type.startswith("application/json"):
        document = reply.json()
        if document.get("error"):
            raise WorkError(f"consume failed: {document}")
        return []
    if content_type.startswith("multipart/mixed"):
        return parse_batch(content_type, reply.content)
    disposition = reply.headers.get("Content-Disposition", "")
    return [
        Leased(
            name=disposition.split('filename="', 1)[1].rstrip('"'),
            receipt=reply.headers["X-ZOSCII-Receipt"],
            deliveries=int(reply.headers["X-ZOSCII-Deliveries"]),
            body=reply.content,
        )
    ]


def parse_batch(content_type: str, data: bytes) -> list[Leased]:
    """The parts of a ``multipart/mixed`` consume reply (or fetch reply: no receipts), in
    order."""
    boundary = content_type.split("boundary=", 1)[1].strip().strip('"').encode("ascii")
    opening, closing = b"--" + boundary + b"\r\n", b"--" + boundary + b"--\r\n"
    out: list[Leased] = []
    position = 0
    while True:
        if data.startswith(closing, position):
            return out
        if not data.startswith(opening, position):
            raise WorkError(f"batch reply malformed at byte {position}: {data[position:][:80]!r}")
        end = data.index(b"\r\n\r\n", position)
        headers: dict[str, str] = {}
        for line in data[position + len(opening) : end].decode("ascii").split("\r\n"):
            key, _, value = line.partition(":")
            headers[key.strip().lower()] = value.strip()
        size = int(headers["content-length"])
        start = end + 4
        out.append(
            Leased(
                name=headers["content-disposition"].split('filename="', 1)[1].rstrip('"'),
                receipt=headers.get("x-zoscii-receipt", ""),  # none in a fetch batch
                deliveries=int(headers.get("x-zoscii-deliveries", "0")),
                body=data[start : start + size],
            )
        )
        position = start + size + 2  # the part's closing CRLF


def ack(
    session: requests.Session, base: str, queue: str, group: str, receipts: list[str]
) -> list[AckResult]:
    """``action=ack`` of ``receipts`` in one request (a JSON list): each one's outcome.

    One receipt that no longer holds its message is answered 409: that is ``fenced``."""
    body = {"action": "ack", "q": queue, "group": group, "receipts": json.dumps(receipts)}
    reply = session.post(base, data=body, timeout=TIMEOUT)
    if reply.status_code == 409 and len(receipts) == 1:
        return [AckResult(receipts[0], "fenced")]
    if reply.status_code != 200:
        raise WorkError(f"ack answered {reply.status_code}: {reply.content[:300]!r}")
    document = reply.json()
    if document.get("error"):
        raise WorkError(f"ack failed: {document}")
    return [AckResult(r["receipt"], r["result"]) for r in document["result"]]


def ack_one(session: requests.Session, base: str, queue: str, group: str, receipt: str) -> int:
    """``action=ack`` with a single ``receipt``: the HTTP status (200, or 409 fenced)."""
    body = {"action": "ack", "q": queue, "group": group, "receipt": receipt}
    return session.post(base, data=body, timeout=TIMEOUT).status_code
