"""Request parameters, byte-exact, from every way a client may send them.

Werkzeug's form parsing decodes values to text, which corrupts every non-UTF-8
message, and the original replicator sends binary messages exactly that way
(urlencoded POST). So parameters are parsed here from the raw bytes:

* the query string, percent-decoded to bytes;
* ``application/x-www-form-urlencoded`` bodies, decoded as a stream;
* ``multipart/form-data`` bodies, through werkzeug's incremental (sans-IO) decoder;
* any other body: the message itself (this project's raw-body publish).

``msg`` goes straight into an Upload on disk as it arrives, whatever its size; every
other field is small and kept in memory, up to ``max_field_bytes``. Form values
override query values, as PHP's ``$_REQUEST`` does.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import BinaryIO, Protocol
from urllib.parse import unquote_to_bytes

from werkzeug.http import parse_options_header
from werkzeug.sansio.multipart import Data, Epilogue, Field, File, MultipartDecoder, NeedData

from zosciimq.core import InvalidInput, Upload, ZosciiError

CHUNK = 1 << 16
RAW_CHUNK = 1 << 20  # big reads: gunicorn copies its read-ahead buffer on every read
MSG = "msg"
MAX_KEY_BYTES = 64


class Sink(Protocol):
    def write(self, data: bytes) -> None: ...


@dataclass
class RequestParams:
    """Small parameters as bytes, and the message (if any) already on disk."""

    fields: dict[str, bytes] = field(default_factory=dict)
    upload: Upload | None = None

    def text(self, name: str) -> str | None:
        """A parameter as ASCII text; anything else is invalid for every non-msg field."""
        raw = self.fields.get(name)
        if raw is None:
            return None
        try:
            return raw.decode("ascii")
        except UnicodeDecodeError:
            raise InvalidInput(f"Parameter '{name}' must be ASCII.") from None

    def utf8(self, name: str) -> str | None:
        raw = self.fields.get(name)
        if raw is None:
            return None
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidInput(f"Parameter '{name}' must be UTF-8.") from None

    def close(self) -> None:
        if self.upload is not None:
            self.upload.discard()


class _FieldBuffer:
    def __init__(self, name: str, limit: int) -> None:
        self.name, self.limit, self.data = name, limit, bytearray()

    def write(self, data: bytes) -> None:
        if len(self.data) + len(data) > self.limit:
            raise InvalidInput(f"Parameter '{self.name}' is longer than {self.limit} bytes.")
        self.data += data


class ParamCollector:
    """Receives fields from a parser; routes ``msg`` to an Upload, the rest to memory."""

    def __init__(self, params: RequestParams, new_upload: Callable[[], Upload], limit: int):
        self.params, self.new_upload, self.limit = params, new_upload, limit
        self._buffer: _FieldBuffer | None = None

    def open(self, name: str) -> Sink:
        self.close()
        if name == MSG:
            if self.params.upload is not None:  # a repeated msg replaces the earlier one
                self.params.upload.discard()
            self.params.upload = self.new_upload()
            return self.params.upload
        self._buffer = _FieldBuffer(name, self.limit)
        return self._buffer

    def close(self) -> None:
        if self._buffer is not None:
            self.params.fields[self._buffer.name] = bytes(self._buffer.data)
            self._buffer = None


def parse_query(query: bytes, collector: ParamCollector) -> None:
    decoder = UrlencodedDecoder(collector)
    decoder.feed(query)
    decoder.finish()


class UrlencodedDecoder:
    """A streaming ``a=1&b=2`` decoder: ``+`` is a space, ``%XX`` a byte, any size."""

    _KEY_END = re.compile(rb"[=&]")

    def __init__(self, collector: ParamCollector) -> None:
        self.collector = collector
        self._key = bytearray()
        self._sink: Sink | None = None  # set while inside a value
        self._carry = b""  # an incomplete %XX escape at a chunk's end

    def feed(self, data: bytes) -> None:
        position, length = 0, len(data)
        while position < length:
            if self._sink is None:
                match = self._KEY_END.search(data, position)
                end = match.start() if match else length
                self._key += data[position:end]
                if len(self._key) > MAX_KEY_BYTES:
                    raise InvalidInput("Parameter name too long.")
                if match is None:
                    return
                position = end + 1
                sink = self._open_key()
                if match.group() == b"&":
                    self.collector.close()  # a key with no value: empty value
                else:
                    self._sink = sink
            else:
                end = data.find(b"&", position)
                if end < 0:
                    self._write_value(data[position:], final=False)
                    return
                self._write_value(data[position:end], final=True)
                self._end_value()
                position = end + 1

    def finish(self) -> None:
        if self._sink is not None:
            self._write_value(b"", final=True)
            self._end_value()
        elif self._key:
            self._open_key()
            self.collector.close()

    def _open_key(self) -> Sink | None:
        raw, self._key = bytes(self._key), bytearray()
        if not raw:
            return _NullSink()
        try:
            name = _decode(raw).decode("ascii")
        except UnicodeDecodeError:
            raise InvalidInput("Parameter names must be ASCII.") from None
        return self.collector.open(name)

    def _write_value(self, piece: bytes, *, final: bool) -> None:
        piece = self._carry + piece
        self._carry = b""
        if not final:
            cut = piece.rfind(b"%", max(0, len(piece) - 2))
            if cut >= 0:
                piece, self._carry = piece[:cut], piece[cut:]
        if piece and self._sink is not None:
            self._sink.write(_decode(piece))

    def _end_value(self) -> None:
        self._sink = None
        self.collector.close()


class _NullSink:
    def write(self, data: bytes) -> None:
        return None


def _decode(raw: bytes) -> bytes:
    return unquote_to_bytes(raw.replace(b"+", b" "))


class _MultipartDecoder(MultipartDecoder):
    """werkzeug's decoder with its partial-delimiter window widened by the closing ``--``.

    Upstream (pallets/werkzeug#3285, werkzeug 3.1.9): when a read ends one byte into
    the closing ``--``, the CR before the delimiter is emitted as message data. Widening
    the window to the whole closing delimiter keeps those bytes back until more arrive.
    Remove when the pinned werkzeug has the fix (tests/api_fuzz pins the behaviour).
    """

    def _last_partial_boundary_index(self, data: bytes | bytearray) -> int:
        window = len(b"\r\n--" + self.boundary + b"--")
        complete_boundary_index = len(data) - window
        cut = len(data)
        for marker in (b"\n", b"\r"):
            position = data.rfind(marker)
            if position >= 0 and position >= complete_boundary_index:
                cut = min(cut, position)
        return cut


def parse_multipart(stream: BinaryIO, boundary: str, collector: ParamCollector) -> None:
    try:
        encoded = boundary.encode("latin-1")
    except UnicodeEncodeError:
        raise InvalidInput("Malformed multipart boundary.") from None
    decoder = _MultipartDecoder(encoded)
    sink: Sink | None = None
    finished = False
    while not finished:
        chunk = stream.read(CHUNK)
        decoder.receive_data(chunk or None)
        while True:
            try:
                event = decoder.next_event()
            except ValueError as exc:
                raise InvalidInput(f"Malformed multipart body: {exc}") from None
            if isinstance(event, NeedData):
                if not chunk:
                    raise InvalidInput("Malformed multipart body: it ends too early.")
                break
            if isinstance(event, Epilogue):
                finished = True
                break
            if isinstance(event, Field | File):
                sink = collector.open(event.name)
            elif isinstance(event, Data) and sink is not None:
                sink.write(event.data)
                if not event.more_data:
                    collector.close()
                    sink = None


def read_params(
    *,
    query: bytes,
    content_type: str | None,
    stream: BinaryIO,
    has_body: bool,
    new_upload: Callable[[], Upload],
    max_field_bytes: int,
) -> RequestParams:
    """Everything the request carries; on any error the partial upload is removed."""
    params = RequestParams()
    query_upload: Upload | None = None
    try:
        collector = ParamCollector(params, new_upload, max_field_bytes)
        parse_query(query, collector)
        query_upload, params.upload = params.upload, None
        if has_body:
            mimetype, options = parse_options_header(content_type)
            if mimetype == "application/x-www-form-urlencoded":
                decoder = UrlencodedDecoder(collector)
                while chunk := stream.read(CHUNK):
                    decoder.feed(chunk)
                decoder.finish()
            elif mimetype == "multipart/form-data":
                if "boundary" not in options:
                    raise InvalidInput("multipart/form-data without a boundary.")
                parse_multipart(stream, options["boundary"], collector)
            else:
                params.upload = new_upload()
                while chunk := stream.read(RAW_CHUNK):
                    params.upload.write(chunk)
                if query_upload is not None:  # msg in the URL and a raw body: one must be empty
                    if params.upload.size and query_upload.size:
                        raise InvalidInput("The message is both in the body and in 'msg'.")
                    if not params.upload.size:
                        params.upload.discard()
                        params.upload = None
        if params.upload is None:
            params.upload = query_upload
        elif query_upload is not None:
            query_upload.discard()
        return params
    except (ZosciiError, OSError):
        params.close()
        if query_upload is not None:
            query_upload.discard()
        raise
