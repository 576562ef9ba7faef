"""Reading a batch fetch: a ``multipart/mixed`` reply of several messages, streamed.

The api's batch (``fetch`` with ``count``) frames every part with its own
``Content-Length``, so each part is taken by count, never by searching for the boundary:
a message that contains the boundary text stays intact, and a part is copied into its
sink chunk by chunk while it arrives. Nothing but the current chunk is held here, so a
batch of large messages costs as much memory as one chunk.

The reader is strict: it accepts the exact framing the api writes (no preamble, no
epilogue, a Content-Length on every part) and checks every part as a single fetch is
checked: a message name, strictly after the previous name (the pointer first), the
declared length exact, the client's size limit. Anything else is a ``ProtocolError``
and the whole batch is to be discarded by the caller.
"""

from __future__ import annotations

import io
import re
import tempfile
from collections.abc import Iterator
from email.message import Message as _MimeHeaders
from pathlib import Path
from typing import BinaryIO, cast

import requests
from requests.structures import CaseInsensitiveDict

from zosciimq.client.errors import (
    BadHeaders,
    BadMessageName,
    NotZosciiReply,
    OutOfOrder,
    ReplyTooLarge,
    TruncatedReply,
)
from zosciimq.client.replies import READ_CHUNK, Received, ReplyInfo, Sink, SinkFactory
from zosciimq.core.names import parse_name
from zosciimq.errors import InvalidInput
from zosciimq.protocol import COUNT, LAST

MULTIPART = "multipart/mixed"
MAX_LINE = 1024  # a delimiter or part header line; the api's are under 150 bytes
_BOUNDARY = re.compile(r"[0-9A-Za-z'()+_,\-./:=? ]{0,69}[0-9A-Za-z'()+_,\-./:=?]")


def is_batch(response: requests.Response) -> bool:
    return _media_type(response) == MULTIPART


def read_batch(
    response: requests.Response,
    open_sink: SinkFactory,
    *,
    after: str | None,
    count: int,
    max_bytes: int | None,
    max_header_bytes: int,
) -> list[Received]:
    """Stream every part of a batch reply into ``open_sink(info)``, checking each one.

    ``after``: the fetch pointer; every part must sort after the one before it (the
    pointer first). None: no order (a work-queue lease answers redeliveries first).
    ``info.headers`` carries each part's own headers (its receipt, for a lease)."""
    status = response.status_code
    if status != 200:
        raise NotZosciiReply(f"HTTP {status} on a batch reply", status=status)
    boundary = _boundary(response)
    reader = _Reader(response.iter_content(READ_CHUNK))
    delimiter = b"--" + boundary.encode("ascii")
    received: list[Received] = []
    previous = after
    while True:
        line = reader.line()
        if line == delimiter + b"--":
            break
        if line != delimiter:
            raise NotZosciiReply(f"batch reply: expected a part delimiter, got {_snippet(line)}")
        if len(received) == count:
            raise NotZosciiReply(f"batch reply has more than the {count} message(s) asked for")
        name, size, headers = _part_headers(reader, max_header_bytes)
        if previous is not None and not name > previous:
            raise OutOfOrder(f"batch part {name} does not sort after {previous}", status=status)
        if max_bytes is not None and size > max_bytes:
            raise ReplyTooLarge(
                f"message {name} of {size} bytes is over the maximum of {max_bytes}", status=status
            )
        sink = open_sink(ReplyInfo(name, 0, size, size, headers))
        reader.copy(size, sink, name)
        if reader.exact(2) != b"\r\n":
            raise NotZosciiReply(f"batch part {name}: no CRLF after its {size} bytes")
        received.append(Received(name=name, size=size, offset=0, total_length=size))
        previous = name if after is not None else None
    if not reader.at_end():
        raise NotZosciiReply("batch reply: data after the closing delimiter")
    if not received:
        raise NotZosciiReply("batch reply without any message")
    _check_summary(response, received)
    return received


class BatchMessage:
    """One message of a batch: in memory, or in an unnamed temporary file when large.

    ``data`` reads it whole (from the file if spooled); ``open()`` gives a readable
    file object from the start without loading it. ``close()`` frees the temporary file.
    """

    __slots__ = ("_data", "file", "name", "size")

    def __init__(
        self, name: str, size: int, *, data: bytes | None = None, file: BinaryIO | None = None
    ) -> None:
        self.name, self.size, self._data, self.file = name, size, data, file

    @property
    def spooled(self) -> bool:
        return self.file is not None

    @property
    def data(self) -> bytes:
        if self._data is not None:
            return self._data
        assert self.file is not None
        self.file.seek(0)
        return self.file.read()

    def open(self) -> BinaryIO:
        if self.file is None:
            return io.BytesIO(self._data or b"")
        self.file.seek(0)
        return self.file

    def close(self) -> None:
        if self.file is not None:
            self.file.close()

    def __enter__(self) -> BatchMessage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = "file" if self.file is not None else "memory"
        return f"BatchMessage({self.name!r}, {self.size} bytes in {where})"


class Spooler:
    """A sink factory keeping parts in memory up to ``memory_limit`` bytes in all, the
    rest in temporary files (in ``spool_dir``, default the system's temp directory)."""

    def __init__(self, memory_limit: int, spool_dir: Path | str | None = None) -> None:
        self.memory_left = memory_limit
        self.spool_dir = None if spool_dir is None else str(spool_dir)
        self.sinks: list[tuple[str, BinaryIO]] = []

    def __call__(self, info: ReplyInfo) -> Sink:
        size = info.content_length
        sink: BinaryIO
        if size is not None and size <= self.memory_left:
            self.memory_left -= size
            sink = io.BytesIO()
        elif size is None:  # a single reply of unknown length: to disk once it is large
            spool = tempfile.SpooledTemporaryFile(  # noqa: SIM115 - owned by BatchMessage
                max_size=self.memory_left, prefix="zoscii-batch-", dir=self.spool_dir
            )
            sink = cast(BinaryIO, spool)  # a file's methods, as a BinaryIO has
        else:
            sink = tempfile.TemporaryFile(  # noqa: SIM115 - owned by BatchMessage
                prefix="zoscii-batch-", dir=self.spool_dir
            )
        self.sinks.append((info.name, sink))
        return sink

    def messages(self, received: list[Received]) -> list[BatchMessage]:
        out = []
        for part, (name, sink) in zip(received, self.sinks, strict=True):
            assert part.name == name
            if isinstance(sink, io.BytesIO):
                out.append(BatchMessage(name, part.size, data=sink.getvalue()))
            else:
                out.append(BatchMessage(name, part.size, file=sink))
        return out

    def discard(self) -> None:
        for _, sink in self.sinks:
            sink.close()
        self.sinks.clear()


class _Reader:
    """Lines and exact byte counts over the reply's chunks (one chunk buffered at a time)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._buffer = b""
        self._pos = 0  # what comes before it is consumed

    def _available(self) -> int:
        return len(self._buffer) - self._pos

    def _more(self) -> bool:
        for chunk in self._chunks:
            if chunk:
                self._buffer = self._buffer[self._pos :] + chunk
                self._pos = 0
                return True
        return False

    def line(self, limit: int = MAX_LINE) -> bytes:
        """The next line without its CRLF."""
        while True:
            end = self._buffer.find(b"\r\n", self._pos, self._pos + limit + 2)
            if end >= 0:
                line, self._pos = self._buffer[self._pos : end], end + 2
                return line
            if self._available() >= limit + 2:
                raise NotZosciiReply(f"batch reply: a line longer than {limit} bytes")
            if not self._more():
                raise TruncatedReply("batch reply ended in the middle of a line")

    def exact(self, size: int) -> bytes:
        while self._available() < size:
            if not self._more():
                raise TruncatedReply(f"batch reply ended {size - self._available()} bytes early")
        data, self._pos = self._buffer[self._pos : self._pos + size], self._pos + size
        return data

    def copy(self, size: int, sink: Sink, name: str) -> None:
        """``size`` bytes into ``sink`` as they arrive."""
        left = size
        while left:
            if not self._available() and not self._more():
                raise TruncatedReply(
                    f"message {name}: {size - left} bytes received, Content-Length said {size}"
                )
            end = min(len(self._buffer), self._pos + left)
            sink.write(self._buffer[self._pos : end])  # the whole chunk: no copy
            left -= end - self._pos
            self._pos = end

    def at_end(self) -> bool:
        """True when the reply has nothing more (read to its end, so the connection is
        left clean for the next request)."""
        return not self._available() and not self._more()


def _part_headers(
    reader: _Reader, max_header_bytes: int
) -> tuple[str, int, CaseInsensitiveDict[str]]:
    """The part's message name, length and headers, from its header block."""
    headers = _MimeHeaders()
    total = 0
    while line := reader.line():
        total += len(line) + 2
        if total > max_header_bytes:
            raise BadHeaders(f"batch part headers over {max_header_bytes} bytes")
        key, colon, value = line.partition(b":")
        if not colon or not key.strip() or not line.isascii():
            raise NotZosciiReply(f"batch part: not a header line {_snippet(line)}")
        headers[key.decode("ascii").strip()] = value.decode("ascii").strip()
    name = headers.get_filename()
    if not isinstance(name, str) or headers.get("Content-Disposition") is None:
        raise BadMessageName("batch part without a usable file name in Content-Disposition")
    try:
        parse_name(name)
    except InvalidInput:
        raise BadMessageName(
            f"batch part file name {_snippet(name.encode())} is not a message name"
        ) from None
    lengths = headers.get_all("Content-Length") or []
    if len(lengths) != 1 or not lengths[0].isdigit():
        raise NotZosciiReply(f"batch part {name}: needs exactly one numeric Content-Length")
    return name, int(lengths[0]), CaseInsensitiveDict(headers.items())


def _check_summary(response: requests.Response, received: list[Received]) -> None:
    """``X-ZOSCII-Count`` and ``X-ZOSCII-Last``, when sent, must agree with the parts."""
    count = response.headers.get(COUNT)
    if count is not None and count.strip() != str(len(received)):
        raise NotZosciiReply(
            f"batch reply: {COUNT} {count[:20]!r} but {len(received)} part(s)"
        )
    last = response.headers.get(LAST)
    if last is not None and last.strip() != received[-1].name:
        raise NotZosciiReply(f"batch reply: {LAST} {last[:80]!r} is not the last part")


def _boundary(response: requests.Response) -> str:
    headers = _MimeHeaders()
    headers["Content-Type"] = response.headers.get("Content-Type", "")
    boundary = headers.get_param("boundary")
    if not isinstance(boundary, str) or not _BOUNDARY.fullmatch(boundary):
        raise NotZosciiReply(f"batch reply without a valid boundary: {_content_type(response)}")
    return boundary


def _media_type(response: requests.Response) -> str:
    return response.headers.get("Content-Type", "").split(";")[0].strip().lower()


def _content_type(response: requests.Response) -> str:
    return response.headers.get("Content-Type", "(no content type)")[:100]


def _snippet(raw: bytes, limit: int = 80) -> str:
    return repr(raw[:limit]) + ("..." if len(raw) > limit else "")
