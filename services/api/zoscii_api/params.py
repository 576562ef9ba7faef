"""Request parameters, byte-exact, from every way a client may send them.

Werkzeug's form parsing decodes values to text, which corrupts every non-UTF-8
message, and the original replicator sends binary messages exactly that way
(urlencoded POST). So parameters are parsed here from the raw bytes:

* the query string, percent-decoded to bytes;
* ``application/x-www-form-urlencoded`` bodies: whole when they are small (the usual
  publish), as a stream when they are large;
* ``multipart/form-data`` bodies, through werkzeug's incremental (sans-IO) decoder;
* ``application/vnd.zoscii.batch`` bodies: a batch publish as length-prefixed frames
  (``zosciimq.protocol.read_frames``), the cheap way to send many small messages;
* any other body: the message itself (this project's raw-body publish).

``msg`` goes straight into an Upload on disk as it arrives, whatever its size; every
other field is small and kept in memory, up to ``max_field_bytes``. Form values
override query values, as PHP's ``$_REQUEST`` does. With ``batch=1`` (in the query, or a
form field before the first ``msg``) every ``msg`` part of a multipart body is a message
of its own, with its part headers (see ``BatchPart``); a framed body is always a batch.
"""

from __future__ import annotations

import binascii
import io
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any, Protocol, cast
from urllib.parse import unquote_to_bytes

from werkzeug.datastructures import Headers
from werkzeug.http import parse_options_header
from werkzeug.sansio.multipart import Data, Epilogue, Field, File, MultipartDecoder, NeedData

from zosciimq.core import Upload
from zosciimq.errors import InvalidInput, TooLarge, ZosciiError
from zosciimq.protocol import FRAMED_BATCH, HEADER_PREFIX, read_frames

CHUNK = 1 << 16
RAW_CHUNK = 1 << 20  # big reads: gunicorn copies its read-ahead buffer on every read
WHOLE_FORM_BYTES = 1 << 20  # urlencoded bodies up to this size are decoded in one go
MSG = "msg"
MAX_KEY_BYTES = 64
FIELDS_PER_LIMIT = 2  # all the fields of a request: at most twice max_field_bytes
_OPTION_PREFIX = HEADER_PREFIX.lower()


class Sink(Protocol):
    def write(self, data: bytes) -> None: ...


@dataclass
class BatchPart:
    """One message of a batch publish, with its part's own ``X-ZOSCII-*`` headers by
    lower-case name (``x-zoscii-nonce``, ``-retention``, ``-ttl``; the first of a name
    wins, as werkzeug's ``Headers.get``)."""

    upload: Upload
    options: dict[str, str] = field(default_factory=dict)

    @staticmethod
    def options_of(headers: Headers | None) -> dict[str, str]:
        """A multipart part's ``X-ZOSCII-*`` headers, by lower-case name."""
        # One pass over the few headers of a part: Headers.get raises and catches a
        # KeyError for every absent name, three of them per message.
        options: dict[str, str] = {}
        for name, value in headers.items() if headers is not None else ():
            if name[: len(_OPTION_PREFIX)].lower() == _OPTION_PREFIX:
                options.setdefault(name.lower(), value)
        return options


@dataclass
class RequestParams:
    """Small parameters as bytes, and the message(s) (if any) already on disk."""

    fields: dict[str, bytes] = field(default_factory=dict)
    upload: Upload | None = None
    batch: list[BatchPart] | None = None  # set when the request asked for a batch

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
        for part in self.batch or ():
            part.upload.discard()


def whole_number(raw: str | None, name: str, *, max_digits: int = 19) -> int:
    """A parameter that is a count, a size or a number of seconds: absent or empty is 0."""
    if raw is None or raw == "":
        return 0
    if not raw.isascii() or not raw.isdigit() or len(raw) > max_digits:
        raise InvalidInput(f"Parameter '{name}' must be a whole number.")
    return int(raw)


class _Budget:
    """Bytes a whole batch (or all the fields) may still bring: refused while they
    arrive, not after."""

    def __init__(self, limit: int) -> None:
        self.limit, self.left = limit, limit


class _FieldBuffer:
    def __init__(self, name: str, limit: int, budget: _Budget) -> None:
        self.name, self.limit, self.data = name, limit, bytearray()
        self.budget = budget

    def write(self, data: bytes) -> None:
        if len(self.data) + len(data) > self.limit:
            raise InvalidInput(f"Parameter '{self.name}' is longer than {self.limit} bytes.")
        self.budget.left -= len(data)
        if self.budget.left < 0:
            raise InvalidInput(
                f"The parameters other than 'msg' are longer than {self.budget.limit} bytes."
            )
        self.data += data


class _Budgeted:
    def __init__(self, upload: Upload, budget: _Budget) -> None:
        self.upload, self.budget = upload, budget

    def write(self, data: bytes) -> None:
        self.budget.left -= len(data)
        if self.budget.left < 0:
            raise TooLarge(f"Batch larger than the maximum of {self.budget.limit} bytes.")
        self.upload.write(data)


class ParamCollector:
    """Receives fields from a parser; routes ``msg`` to an Upload, the rest to memory."""

    def __init__(
        self,
        params: RequestParams,
        new_upload: Callable[[], Upload],
        limit: int,
        *,
        max_parts: int = 0,
        max_batch_bytes: int = 0,
        before_message: Callable[[dict[str, bytes]], None] | None = None,
    ):
        self.params, self.new_upload, self.limit = params, new_upload, limit
        self.max_parts = max_parts
        self.batch_budget = _Budget(max_batch_bytes)
        # Every field is kept in memory: many distinct names of ``limit`` bytes each must
        # not add up to a body's worth (no action needs more than one big field).
        self.fields_budget = _Budget(FIELDS_PER_LIMIT * limit)
        self.before_message = before_message
        self._buffer: _FieldBuffer | None = None
        self._unchecked = True  # fields changed since before_message last saw them

    def open(self, name: str, headers: Headers | None = None) -> Sink:
        self.close()
        if name != MSG:
            self._buffer = _FieldBuffer(name, self.limit, self.fields_budget)
            return self._buffer
        if self.params.batch is not None:
            return self.open_part(BatchPart.options_of(headers))
        self._message_starts()
        if self.params.upload is not None:  # a repeated msg replaces the earlier one
            self.params.upload.discard()
        self.params.upload = self.new_upload()
        return self.params.upload

    def open_part(self, options: dict[str, str]) -> Sink:
        """The next message of a batch, with its own options (``BatchPart``)."""
        assert self.params.batch is not None
        self._message_starts()
        if len(self.params.batch) >= self.max_parts:
            raise InvalidInput(f"A batch holds at most {self.max_parts} messages.")
        upload = self.new_upload()
        self.params.batch.append(BatchPart(upload, options))
        return _Budgeted(upload, self.batch_budget)

    def close(self) -> None:
        if self._buffer is not None:
            name, value = self._buffer.name, bytes(self._buffer.data)
            self.params.fields[name] = value
            self._buffer = None
            self._unchecked = True
            if name == "batch":
                self.start_batch(value)

    def _message_starts(self) -> None:
        """``before_message`` with the fields so far; again for a later message only when
        fields came in between (a batch's thousand messages are admitted once)."""
        if self.before_message is not None and self._unchecked:
            self.before_message(self.params.fields)
        self._unchecked = False

    def start_batch(self, flag: bytes) -> None:
        """``batch=1`` before the first message: every ``msg`` from now on is one more."""
        if flag not in (b"", b"0", b"1"):
            raise InvalidInput("Parameter 'batch' must be 0 or 1.")
        if flag == b"1" and self.params.batch is None:
            if self.params.upload is not None:
                raise InvalidInput("'batch=1' must come before the first message.")
            self.params.batch = []


def unquote_plus_bytes(raw: bytes) -> bytes:
    """Percent-decode a form value to bytes (``+`` is a space), at C speed.

    ``urllib.parse.unquote_to_bytes`` walks the escapes in Python (about 90 us for a
    binary 1 KB message). Quoted-printable decoding in C does the same job once ``%``
    is spelled ``=`` (and a literal ``=`` is escaped as ``=3D``). It differs only on
    malformed escapes and line breaks, which a length check catches: every valid escape
    shrinks the text by exactly two bytes, anything else by less. Those inputs take the
    reference path, so the result is always that of ``unquote_to_bytes``.
    """
    raw = raw.replace(b"+", b" ")
    if b"%" not in raw:
        return raw
    if b"\n" not in raw and b"\r" not in raw:
        decoded = binascii.a2b_qp(raw.replace(b"=", b"=3D").replace(b"%", b"="))
        if len(decoded) == len(raw) - 2 * raw.count(b"%"):
            return decoded
    return unquote_to_bytes(raw)


def _key_name(raw: bytes) -> str:
    try:
        return unquote_plus_bytes(raw).decode("ascii")
    except UnicodeDecodeError:
        raise InvalidInput("Parameter names must be ASCII.") from None


def decode_urlencoded(data: bytes, collector: ParamCollector) -> None:
    """A whole ``a=1&b=2`` buffer: what the streaming decoder gives, in a few C calls."""
    for pair in data.split(b"&"):
        key, _, value = pair.partition(b"=")
        if len(key) > MAX_KEY_BYTES:
            raise InvalidInput("Parameter name too long.")
        if not key:
            continue  # no name: nowhere to put the value
        sink = collector.open(_key_name(key))
        if value:
            sink.write(unquote_plus_bytes(value))
        collector.close()


def query_fields(query: bytes, limit: int, budget: int | None = None) -> dict[str, bytes]:
    """The query string's parameters as bytes (``msg`` too: a URL is at most 8 KB).
    ``budget``: what all the fields but ``msg`` may bring together, a repeated one each
    time, as the streaming decoder counts them (``form_fields``)."""
    fields: dict[str, bytes] = {}
    left = budget
    for pair in query.split(b"&"):
        key, _, value = pair.partition(b"=")
        if len(key) > MAX_KEY_BYTES:
            raise InvalidInput("Parameter name too long.")
        if key:
            value = unquote_plus_bytes(value)
            name = _key_name(key)
            if name != MSG:
                if len(value) > limit:
                    raise InvalidInput(f"Parameter '{name}' is longer than {limit} bytes.")
                if left is not None:
                    left -= len(value)
                    if left < 0:
                        raise InvalidInput(
                            f"The parameters other than 'msg' are longer than {budget} bytes."
                        )
            fields[name] = value
    return fields


def form_fields(body: bytes, limit: int) -> dict[str, bytes]:
    """A small urlencoded body's parameters, ``msg`` among them, decoded whole: the one
    parse of a publish on the event loop (``Endpoint.publish``), with the streaming
    decoder's limits (each field ``limit`` bytes, all but ``msg`` together twice that)."""
    return query_fields(body, limit, FIELDS_PER_LIMIT * limit)


class UrlencodedDecoder:
    """A streaming ``a=1&b=2`` decoder for bodies of any size (``msg`` of 1 GB)."""

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
        return self.collector.open(_key_name(raw))

    def _write_value(self, piece: bytes, *, final: bool) -> None:
        piece = self._carry + piece
        self._carry = b""
        if not final:
            cut = piece.rfind(b"%", max(0, len(piece) - 2))
            if cut >= 0:
                piece, self._carry = piece[:cut], piece[cut:]
        if piece and self._sink is not None:
            self._sink.write(unquote_plus_bytes(piece))

    def _end_value(self) -> None:
        self._sink = None
        self.collector.close()


class _NullSink:
    def write(self, data: bytes) -> None:
        return None


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


def parse_multipart(stream: IO[bytes], boundary: str, collector: ParamCollector) -> None:
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
                sink = collector.open(event.name, event.headers)
            elif isinstance(event, Data) and sink is not None:
                sink.write(event.data)
                if not event.more_data:
                    collector.close()
                    sink = None


class WholeBody(io.RawIOBase):
    """A body of a declared length that refuses to end early: a client that went away
    mid-body must not have its message taken for a shorter whole one. (gunicorn's body
    reader ends at the connection's end without saying so.)"""

    def __init__(self, stream: IO[bytes], length: int) -> None:
        self.stream = stream
        self.left = length

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        want = self.left if size is None or size < 0 else min(size, self.left)
        if want == 0:
            return b""
        data = self.stream.read(want)
        if not data:
            raise InvalidInput(
                f"The request body ended {self.left} bytes before its Content-Length: the"
                " connection closed early. Nothing was stored."
            )
        self.left -= len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def read_params(
    *,
    query: dict[str, bytes],
    content_type: str | None,
    content_length: int | None,
    stream: IO[bytes],
    has_body: bool,
    new_upload: Callable[[], Upload],
    max_field_bytes: int,
    max_batch_parts: int = 0,
    max_batch_bytes: int = 0,
    before_message: Callable[[dict[str, bytes]], None] | None = None,
) -> RequestParams:
    """Everything the request carries; on any error the partial uploads are removed.

    ``query`` is the query string already decoded (``query_fields``): its ``msg``, if
    any, is written to an Upload here, unless the body brings the message.
    ``before_message(fields so far)`` runs as each message starts, before any of it is
    written: it raises to refuse the request there.
    """
    params = RequestParams(fields={k: v for k, v in query.items() if k != MSG})
    query_msg = query.get(MSG)
    try:
        collector = ParamCollector(
            params,
            new_upload,
            max_field_bytes,
            max_parts=max_batch_parts,
            max_batch_bytes=max_batch_bytes,
            before_message=before_message,
        )
        collector.start_batch(params.fields.get("batch", b""))
        if has_body:
            if content_length is not None:
                stream = cast(IO[bytes], WholeBody(stream, content_length))
            _read_body(params, collector, content_type, content_length, stream, query_msg)
        if params.batch is not None:
            if query_msg is not None:
                raise InvalidInput("A batch carries its messages in the body, not in 'msg'.")
        elif params.upload is None and query_msg is not None:
            params.upload = new_upload()
            params.upload.write(query_msg)
        return params
    except (ZosciiError, OSError):
        params.close()
        raise


def query_params(query: dict[str, bytes], new_upload: Callable[[], Upload]) -> RequestParams:
    """A request without a body (most fetches): the query string is all there is, and
    unless it carries a message or a batch flag, nothing to write or check."""
    if MSG in query or "batch" in query:
        return read_params(
            query=query,
            content_type=None,
            content_length=0,
            stream=io.BytesIO(),
            has_body=False,
            new_upload=new_upload,
            max_field_bytes=0,
        )
    return RequestParams(fields=query)


def _read_exactly(stream: IO[bytes], size: int) -> bytes:
    """The whole announced body: a read may return less (a slow client, a deadline's
    piece), so read until it is all there or the stream ends."""
    first = stream.read(size)
    if len(first) == size or not first:
        return first
    pieces = [first]
    left = size - len(first)
    while left > 0 and (piece := stream.read(left)):
        pieces.append(piece)
        left -= len(piece)
    return b"".join(pieces)


def _read_body(
    params: RequestParams,
    collector: ParamCollector,
    content_type: str | None,
    content_length: int | None,
    stream: IO[bytes],
    query_msg: bytes | None,
) -> None:
    mimetype, options = parse_options_header(content_type)
    if mimetype == "application/x-www-form-urlencoded":
        if content_length is not None and content_length <= WHOLE_FORM_BYTES:
            decode_urlencoded(_read_exactly(stream, content_length), collector)
        else:
            decoder = UrlencodedDecoder(collector)
            while chunk := stream.read(CHUNK):
                decoder.feed(chunk)
            decoder.finish()
    elif mimetype == "multipart/form-data":
        if "boundary" not in options:
            raise InvalidInput("multipart/form-data without a boundary.")
        parse_multipart(stream, options["boundary"], collector)
    elif mimetype == FRAMED_BATCH:
        if query_msg is not None:
            raise InvalidInput("A batch carries its messages in the body, not in 'msg'.")
        collector.start_batch(b"1")
        read_frames(stream, collector.open_part)
    else:
        if params.batch is not None:
            raise InvalidInput(
                f"A batch is a multipart/form-data body of 'msg' parts or a {FRAMED_BATCH} body."
            )
        upload = params.upload = collector.new_upload()
        while chunk := stream.read(RAW_CHUNK):
            upload.write(chunk)
        if query_msg is not None:  # msg in the URL and a raw body: one must be empty
            if upload.size and query_msg:
                raise InvalidInput("The message is both in the body and in 'msg'.")
            if not upload.size:
                upload.discard()
                params.upload = None
