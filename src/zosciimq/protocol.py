"""The HTTP wire protocol's names and framings, written once (PROTOCOL.md 3).

The api and the live service answer in these terms, the client and the gateways read
them, so every constant lives here and nowhere else: the JSON envelope's ``system`` and
``version``, the ``X-ZOSCII-*`` headers, and the framed batch body, whose encoder (the
client's) sits beside its decoder (the api's) so the two cannot drift apart. Standard
library only, as ``zosciimq.errors``: every service and the client import it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import IO, Any, Protocol
from urllib.parse import unquote_plus, urlencode

from zosciimq.errors import InvalidInput

# --- the JSON envelope -----------------------------------------------------------------
SYSTEM = "ZOSCII MQ"  # a reply whose "system" differs is not this protocol's
VERSION = "1.0"


def envelope_bytes(error: str, message: str, result: Any) -> bytes:
    """The envelope, compact and newline-terminated, its keys in the original's order."""
    document = {
        "system": SYSTEM,
        "version": VERSION,
        "error": error,
        "message": message,
        "result": result,
    }
    return (json.dumps(document, separators=(",", ":")) + "\n").encode()


def is_envelope(document: object) -> bool:
    """A JSON reply is an envelope when it names this system (a message may be JSON too)."""
    return isinstance(document, dict) and document.get("system") == SYSTEM


# --- headers ---------------------------------------------------------------------------
HEADER_PREFIX = "X-ZOSCII-"
NONCE = "X-ZOSCII-Nonce"  # a batch part's options (a frame's n, r, ttl)
RETENTION = "X-ZOSCII-Retention"
TTL = "X-ZOSCII-TTL"  # also on a delivery of a message that expires
OFFSET = "X-ZOSCII-Offset"  # an offset/length read: where it starts and the whole size
TOTAL_LENGTH = "X-ZOSCII-Total-Length"
COUNT = "X-ZOSCII-Count"  # a batch fetch: its parts and the last part's name
LAST = "X-ZOSCII-Last"
RECEIPT = "X-ZOSCII-Receipt"  # a work-queue delivery
DELIVERIES = "X-ZOSCII-Deliveries"
LEASE_UNTIL = "X-ZOSCII-Lease-Until"
# What a reply may carry, in the order CORS exposes them to a page's script.
REPLY_HEADERS = (OFFSET, TOTAL_LENGTH, COUNT, LAST, RECEIPT, DELIVERIES, LEASE_UNTIL, TTL)


def delivery_headers(
    receipt: str, deliveries: int, lease_until: float, ttl_left: float | None
) -> dict[str, str]:
    """A work-queue delivery's headers (the api's and the live service's consume)."""
    headers = {RECEIPT: receipt, DELIVERIES: str(deliveries), LEASE_UNTIL: f"{lease_until:.3f}"}
    if ttl_left is not None:
        headers[TTL] = str(int(ttl_left))
    return headers


def attachment(name: str) -> str:
    """The ``Content-Disposition`` that marks a reply as a message, not an envelope."""
    return f'attachment; filename="{name}"'


# --- a batch fetch: multipart/mixed, each part a message as fetch sends it ---------------
def batch_part_head(boundary: str, name: str, size: int, headers: Mapping[str, str]) -> bytes:
    """A part's delimiter and headers; its ``Content-Length`` lets a reader take the
    bytes by count, so a message that contains the boundary is still safe."""
    return (
        f"--{boundary}\r\n"
        "Content-Type: application/octet-stream\r\n"
        f"Content-Disposition: {attachment(name)}\r\n"
        + "".join(f"{key}: {value}\r\n" for key, value in headers.items())
        + f"Content-Length: {size}\r\n\r\n"
    ).encode("ascii")


def batch_closing(boundary: str) -> bytes:
    return f"--{boundary}--\r\n".encode("ascii")

# --- the framed batch body -------------------------------------------------------------
# ``<length>[ n=<nonce>&r=<days>&ttl=<seconds>]\n<length bytes>`` per message, then
# ``end\n``: a batch publish the api reads with a few C calls a message, where a
# multipart part costs a header block and a boundary search in Python.
FRAMED_BATCH = "application/vnd.zoscii.batch"
FRAME_END = b"end\n"  # tells a whole body from one cut at a message's end
MAX_FRAME_HEADER = 1024  # "<length> n=...&r=...&ttl=...": a nonce is at most 128 bytes
# A frame's option keys and the multipart part headers that carry the same options.
FRAME_KEYS = {NONCE: "n", RETENTION: "r", TTL: "ttl"}
_OPTION_HEADERS = {key: header.lower() for header, key in FRAME_KEYS.items()}
READ_BLOCK = 1 << 20  # big reads: gunicorn copies its read-ahead buffer on every read


def frame_head(size: int, options: Mapping[str, str]) -> bytes:
    """The line before a message of ``size`` bytes; ``options`` by header name."""
    head = str(size)
    if options:
        head += " " + urlencode({FRAME_KEYS[name]: value for name, value in options.items()})
    return f"{head}\n".encode("ascii")


class Sink(Protocol):
    def write(self, data: bytes) -> None: ...


def read_frames(stream: IO[bytes], open_part: Callable[[dict[str, str]], Sink]) -> None:
    """Decode a framed body: each message's bytes into ``open_part(options)``, its
    options by lower-case header name (as a multipart batch part's ``X-ZOSCII-*``).

    A body that ends anywhere before its ``end`` line, or goes on after it, is refused
    (``InvalidInput``): a batch that lost its tail is never taken for a smaller one.
    """
    reader = _FrameReader(stream)
    end = FRAME_END[:-1]
    while True:
        line = reader.line()
        if line is None:
            raise InvalidInput("Malformed batch body: it ends before its 'end' line.")
        if line == end:
            if not reader.at_end():
                raise InvalidInput("Malformed batch body: bytes after its 'end' line.")
            return
        size, _, options = line.partition(b" ")
        if not size.isdigit() or len(size) > 19:
            raise InvalidInput(
                f"Malformed batch body: {line[:40]!r} is not '<length>[ <options>]'."
            )
        reader.copy(int(size), open_part(_frame_options(options)))


def _frame_options(raw: bytes) -> dict[str, str]:
    """A frame's ``n=..&r=..&ttl=..``; any other key is refused, every value is ASCII."""
    options: dict[str, str] = {}
    for pair in raw.split(b"&") if raw else ():
        key, _, value = pair.partition(b"=")
        try:
            name = unquote_plus(key.decode("ascii"), encoding="ascii", errors="strict")
            text = unquote_plus(value.decode("ascii"), encoding="ascii", errors="strict")
        except UnicodeDecodeError:
            raise InvalidInput(f"Frame option {key[:20]!r} must be ASCII.") from None
        if not name:
            continue  # no name: nowhere to put the value, as in a query string
        header = _OPTION_HEADERS.get(name)
        if header is None:
            raise InvalidInput(
                f"Malformed batch body: unknown frame option '{name[:64]}' "
                "(n, r and ttl are known)."
            )
        options[header] = text
    return options


class _FrameReader:
    """A framed body read in big blocks: header lines and payload spans cut out of them."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self.data = b""
        self.at = 0

    def _more(self) -> bool:
        block = self.stream.read(READ_BLOCK)
        if not block:
            return False
        self.data = self.data[self.at :] + block if self.at < len(self.data) else block
        self.at = 0
        return True

    def line(self) -> bytes | None:
        """The next line without its LF; None when the body ends first."""
        while True:
            end = self.data.find(b"\n", self.at, self.at + MAX_FRAME_HEADER + 1)
            if end >= 0:
                line, self.at = self.data[self.at : end], end + 1
                return line
            if len(self.data) - self.at > MAX_FRAME_HEADER:
                raise InvalidInput(
                    f"Malformed batch body: a frame header longer than {MAX_FRAME_HEADER} bytes."
                )
            if not self._more():
                return None

    def copy(self, size: int, sink: Sink) -> None:
        """The next ``size`` bytes into ``sink``, as they arrive."""
        while size:
            if self.at == len(self.data) and not self._more():
                raise InvalidInput("Malformed batch body: it ends inside a message.")
            take = min(size, len(self.data) - self.at)
            sink.write(self.data[self.at : self.at + take])
            self.at += take
            size -= take

    def at_end(self) -> bool:
        return self.at == len(self.data) and not self._more()
