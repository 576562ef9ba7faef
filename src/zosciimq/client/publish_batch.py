"""Batch publish: many messages in one request, as a streamed body.

The api's batch publish (this project's improvement; the original does not know it)::

    POST /?action=publish&q=<queue>&batch=1[&r=<default days>]
    Content-Type: multipart/form-data; boundary=...

    one part named "msg" per message, byte-exact, with optional part headers
    X-ZOSCII-Nonce: <nonce>   X-ZOSCII-Retention: <days>

or, cheaper for the server to read (no part headers, no boundary to search for), the
framed body ``FramedBody``::

    Content-Type: application/vnd.zoscii.batch

    <length>[ n=<nonce>&r=<days>]\n<length bytes>   per message, then   end\n

answers the envelope with ``result`` = the names given, in order, ``null`` for a message
whose nonce had been used already (nothing written for it). A batch is all or nothing:
a bad part is an error (400/413) and nothing of that request is written.

The original ignores ``batch=1``: given several ``msg`` parts it publishes only the last
one and answers ``result: []``. Sending it a batch of more than one message would lose
the others silently, so a client sends a batch of several only to a server it has seen
answer one (``ZosciiClient.capabilities.batch_publish``). While that is unknown, the first
request carries exactly one message, with its nonce and retention as ``n=`` and ``r=``
(the api takes ``n`` for a batch of one), which either server stores once however
often it is retried: a ``result`` list of one entry means batches work, ``[]`` means
they do not, and from then on every message is a single publish.

A server of this project that takes the framed body says so on every batch reply
(``Accept-Post``, ``ZosciiClient.capabilities.framed_publish``); until one did, batches
are multipart, which every version of it reads. A framed batch refused by an api of an
earlier version (a rolling upgrade behind one address: it refuses before writing
anything) goes again as multipart, and so does every later batch of that client.

The body (``MultipartBody`` or ``FramedBody``): the framing in memory, the messages read
from their bytes or files piece by piece as the request is sent, so a batch of large
files costs one read block of memory. It has a length (the request carries
Content-Length) and can be rewound, so a request that lost its connection is sent again
whole, with the same nonces: a retry never stores a message twice.
"""

from __future__ import annotations

import bisect
import logging
import os
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from zosciimq.client.errors import NotZosciiReply
from zosciimq.client.payload import MessageSource, Payload
from zosciimq.client.replies import Envelope, Published
from zosciimq.core.names import parse_name
from zosciimq.errors import InvalidInput
from zosciimq.protocol import FRAME_END, FRAMED_BATCH, NONCE, RETENTION, frame_head

if TYPE_CHECKING:
    from zosciimq.client.client import ZosciiClient

log = logging.getLogger(__name__)

DEFAULT_PUBLISH_BATCH_SIZE = 100
DEFAULT_PUBLISH_BATCH_BYTES = 64 << 20  # the api's default ZOSCII_MAX_BATCH_BYTES
READ_BLOCK = 1 << 16

# (messages acknowledged so far, message bytes sent so far); the bytes go back when a
# request that lost its connection is sent again.
PublishProgress = Callable[[int, int], None]


@dataclass(frozen=True)
class BatchItem:
    """One message of ``publish_many`` with its own nonce and/or retention.

    ``data`` is anything ``publish`` takes: bytes, a str (the text, UTF-8), a file
    object, an iterable of bytes, or a ``pathlib.Path`` (that file, opened when its
    request is built). ``nonce`` None: a fresh uuid4 is used. ``retention_days`` None:
    the call's ``retention_days``, else the server's default.
    """

    data: MessageSource
    nonce: str | None = None
    retention_days: int | None = None


# How an api that reads no framed body refuses one (400, before writing anything).
MULTIPART_ONLY = "A batch is a multipart/form-data body of 'msg' parts."


class BatchBody:
    """A batch body of messages and their framing, read piece by piece.

    File-like for requests and urllib3: ``read``, ``tell``, ``seek`` (a retry rewinds
    it), ``len()`` (the Content-Length). Message bytes come from memory or from their
    file at the moment they are sent; nothing else is buffered. ``parts``: each
    message's payload and its options (``nonce``, ``retention``), which the two
    formats spell their own way.
    """

    content_type = ""

    def __init__(
        self,
        parts: Sequence[tuple[Payload, Mapping[str, str]]],
        *,
        on_read: Callable[[int], None] | None = None,
    ) -> None:
        self.count = len(parts)
        self.on_read = on_read
        self._starts: list[int] = []  # where each piece begins in the body
        self._pieces: list[bytes | Payload] = []
        self._data_before: list[int] = []  # message bytes before each piece
        self._length = 0
        self._data = 0
        self._pos = 0
        self._frame(parts)

    def _frame(self, parts: Sequence[tuple[Payload, Mapping[str, str]]]) -> None:
        """Add the pieces of the body: framing and payloads, in order (``_add``)."""
        raise NotImplementedError

    def _add(self, piece: bytes | Payload) -> None:
        self._starts.append(self._length)
        self._pieces.append(piece)
        self._data_before.append(self._data)
        size = len(piece) if isinstance(piece, bytes) else piece.size
        self._length += size
        if not isinstance(piece, bytes):
            self._data += size

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> Iterator[bytes]:
        while block := self.read(READ_BLOCK):
            yield block

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: self._length}[whence]
        if not 0 <= base + offset <= self._length:
            raise ValueError(f"seek to {base + offset} outside the body of {self._length} bytes")
        self._pos = base + offset
        self._report()
        return self._pos

    def read(self, size: int | None = -1) -> bytes:
        left = self._length - self._pos if size is None or size < 0 else size
        out = []
        while left > 0 and self._pos < self._length:
            index = bisect.bisect_right(self._starts, self._pos) - 1
            piece, offset = self._pieces[index], self._pos - self._starts[index]
            if isinstance(piece, bytes):
                block = piece[offset : offset + left]
            else:
                block = _read_payload(piece, offset, min(left, piece.size - offset))
            out.append(block)
            self._pos += len(block)
            left -= len(block)
        self._report()
        return b"".join(out)

    def data_sent(self) -> int:
        """Message bytes (not framing) before the current position."""
        index = bisect.bisect_right(self._starts, self._pos) - 1
        if index < 0:
            return 0
        inside = 0 if isinstance(self._pieces[index], bytes) else self._pos - self._starts[index]
        return self._data_before[index] + inside

    def _report(self) -> None:
        if self.on_read is not None:
            self.on_read(self.data_sent())


class MultipartBody(BatchBody):
    """``multipart/form-data``, one ``msg`` part per message: what every version of the
    api reads. The boundary is 128 random bits, so it does not occur in the messages
    (the server finds parts by it)."""

    HEADERS = {"nonce": NONCE, "retention": RETENTION}

    def _frame(self, parts: Sequence[tuple[Payload, Mapping[str, str]]]) -> None:
        self.boundary = f"zoscii-{uuid.uuid4().hex}"
        self.content_type = f"multipart/form-data; boundary={self.boundary}"
        for number, (payload, options) in enumerate(parts, 1):
            self._add(self._part_head(number, options))
            self._add(payload)
            self._add(b"\r\n")
        self._add(f"--{self.boundary}--\r\n".encode("ascii"))

    def _part_head(self, number: int, options: Mapping[str, str]) -> bytes:
        lines = [
            f"--{self.boundary}",
            f'Content-Disposition: form-data; name="msg"; filename="m{number}"',
            "Content-Type: application/octet-stream",
            *(f"{self.HEADERS[key]}: {value}" for key, value in options.items()),
        ]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")


class FramedBody(BatchBody):
    """``application/vnd.zoscii.batch`` (``zosciimq.protocol``, beside the api's
    decoder): a line before each message and ``end`` after the last, which the api reads
    with a few C calls a message."""

    content_type = FRAMED_BATCH

    def _frame(self, parts: Sequence[tuple[Payload, Mapping[str, str]]]) -> None:
        headers = MultipartBody.HEADERS
        for payload, options in parts:
            self._add(frame_head(payload.size, {headers[k]: v for k, v in options.items()}))
            self._add(payload)
        self._add(FRAME_END)


def _read_payload(payload: Payload, offset: int, size: int) -> bytes:
    if payload.data is not None:
        return payload.data[offset : offset + size]
    assert payload.file is not None
    payload.file.seek(payload.start + offset)
    block = payload.file.read(min(size, READ_BLOCK))
    if not block:
        raise OSError(
            f"a message file ended {payload.size - offset} bytes early (it shrank while sent)"
        )
    return block


def reply_names(result: Any, count: int) -> list[str | None] | None:
    """The names a batch reply gives for ``count`` messages; None for the original's ``[]``.

    Each entry is a message name or None (its nonce had been used); the names must
    strictly increase. Anything else is not a reply this client can trust.
    """
    if result == []:
        return None
    if not isinstance(result, list) or len(result) != count:
        raise NotZosciiReply(
            f"batch publish of {count} message(s) answered with result {str(result)[:120]!r}"
        )
    previous = ""
    for name in result:
        if name is None:
            continue
        if not isinstance(name, str):
            raise NotZosciiReply(f"batch publish answered {str(name)[:80]!r} for a name")
        try:
            parse_name(name)
        except InvalidInput:
            raise NotZosciiReply(f"batch publish answered {name[:80]!r}, not a name") from None
        if not name > previous:
            raise NotZosciiReply(f"batch publish answered {name} after {previous}: out of order")
        previous = name
    return list(result)


@dataclass
class _Taken:
    """A message taken from the caller's input and not acknowledged yet."""

    item: BatchItem
    payload: Payload | None = None

    @property
    def size(self) -> int:
        assert self.payload is not None
        return self.payload.size


class BatchRun:
    """One ``publish_many``/``publish_iter`` call: takes the input lazily, sends it in
    requests of at most ``batch_size`` messages and ``batch_bytes`` message bytes, and
    yields a ``Published`` per message, in order, as each request is acknowledged.

    On any error the exception gets ``published`` (every ``Published`` of this call so
    far) and ``remaining`` (the ``BatchItem``s taken from the input and not acknowledged,
    with the nonces that were sent) before it propagates.
    """

    def __init__(
        self,
        client: ZosciiClient,
        queue: str,
        *,
        retention_days: int | None,
        batch_size: int,
        batch_bytes: int,
        on_progress: PublishProgress | None,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if batch_bytes < 1:
            raise ValueError("batch_bytes must be at least 1")
        self.client = client
        self.queue = queue
        self.retention_days = retention_days
        self.batch_size = batch_size
        self.batch_bytes = batch_bytes
        self.on_progress = on_progress
        self.published: list[Published] = []
        self.unacknowledged: list[_Taken] = []
        self.taken = 0  # how many messages were taken from the input
        self.bytes_done = 0

    def run(self, messages: Iterable[MessageSource | BatchItem]) -> Iterator[Published]:
        source = iter(messages)
        carry: _Taken | None = None
        try:
            while True:
                first = carry or self._take(source)
                carry = None
                if first is None:
                    return
                if self._singles_only() or first.size > self.batch_bytes:
                    yield self._single(first)
                    continue
                chunk, size = [first], first.size
                limit = self.batch_size if self.client.capabilities.batch_publish else 1
                while len(chunk) < limit:
                    following = self._take(source)
                    if following is None:
                        break
                    if size + following.size > self.batch_bytes:
                        carry = following
                        break
                    chunk.append(following)
                    size += following.size
                yield from self._batch(chunk)
        except BaseException as exc:
            remaining = self._give_back()
            _note(exc, list(self.published), remaining)
            raise

    def item(self, message: MessageSource | BatchItem) -> BatchItem:
        """``message`` as a BatchItem with its nonce (a fresh one unless given)."""
        item = message if isinstance(message, BatchItem) else BatchItem(message)
        days = item.retention_days
        if days is not None and (isinstance(days, bool) or not isinstance(days, int)):
            raise TypeError(f"retention_days must be an int, not {days!r}")
        if not item.nonce:
            return replace(item, nonce=str(uuid.uuid4()))
        nonce = item.nonce
        if not (nonce.isascii() and nonce.isprintable()) or nonce != nonce.strip():
            # The server refuses it anyway (400); this keeps it out of the part headers.
            raise ValueError(f"nonce {nonce[:80]!r} cannot be sent: use [A-Za-z0-9_-]")
        return item

    # --- taking the input ---------------------------------------------------------------
    def _take(self, source: Iterator[MessageSource | BatchItem]) -> _Taken | None:
        try:
            message = next(source)
        except StopIteration:
            return None
        taken = _Taken(self.item(message))
        self.taken += 1
        self.unacknowledged.append(taken)  # before opening it: an unreadable one is remaining
        taken.payload = Payload.from_source(taken.item.data, self.client.max_message_bytes)
        return taken

    def _singles_only(self) -> bool:
        client = self.client
        if client.original:
            return True
        # A server without batch fetch (the original) has no batch publish either.
        known = client.capabilities
        return known.batch_publish is False or known.batch_fetch is False

    # --- sending ------------------------------------------------------------------------
    def _single(self, taken: _Taken) -> Published:
        assert taken.payload is not None and taken.item.nonce is not None  # given one when taken
        published = self.client._publish_payload(
            self.queue,
            taken.payload,
            retention_days=self._retention(taken.item),
            nonce=taken.item.nonce,
        )
        self._acknowledge([taken], [published])
        return published

    def _batch(self, chunk: list[_Taken]) -> Iterator[Published]:
        probe = self.client.capabilities.batch_publish is None
        params = {"action": "publish", "q": self.queue, "batch": "1"}
        parts: list[tuple[Payload, Mapping[str, str]]] = []
        if len(chunk) == 1:
            # One message: its nonce and retention on the request (n=, r=), which the
            # original also reads, so even a probe answered by it is safe to retry.
            retention = self._retention(chunk[0].item)
            if retention is not None:
                params["r"] = str(retention)
            assert chunk[0].payload is not None and chunk[0].item.nonce is not None
            params["n"] = chunk[0].item.nonce
            parts.append((chunk[0].payload, {}))
        else:
            if self.retention_days is not None:
                params["r"] = str(self.retention_days)
            for taken in chunk:
                assert taken.payload is not None and taken.item.nonce is not None
                options = {"nonce": taken.item.nonce}
                if taken.item.retention_days is not None:
                    options["retention"] = str(taken.item.retention_days)
                parts.append((taken.payload, options))
        framed = self.client.capabilities.framed_publish is True and len(parts) > 1
        try:
            envelope = self._send(params, FramedBody if framed else MultipartBody, parts)
        except InvalidInput as exc:
            if not framed or MULTIPART_ONLY not in str(exc):
                raise
            # An api of an earlier version behind the same address (a rolling upgrade):
            # it refused the body before writing anything, so the same batch goes again,
            # and no batch of this client goes framed any more.
            log.info("%s reads multipart batches only; multipart from now on", self.client.url)
            self.client.capabilities.framed_publish = False
            envelope = self._send(params, MultipartBody, parts)
        names = reply_names(envelope.result, len(chunk))
        if names is None:
            if self.client.capabilities.batch_publish is not False:
                log.info(
                    "%s answered a batch publish as a single one: it does not know batches "
                    "(the original implementation); single publishes from now on",
                    self.client.url,
                )
            self.client.capabilities.batch_publish = False
            if len(chunk) > 1:
                raise NotZosciiReply(
                    f"the server answered a batch of {len(chunk)} messages as a single "
                    "publish: at most the last one was stored, and which is unknown"
                )
            published = [Published(nonce=chunk[0].item.nonce, message=envelope.message)]
        else:
            if probe:
                log.debug("%s answers batch publishes", self.client.url)
                self.client.capabilities.batch_publish = True
            published = [
                Published(
                    nonce=taken.item.nonce,
                    message=envelope.message,
                    name=name,
                    duplicate=name is None,
                )
                for taken, name in zip(chunk, names, strict=True)
            ]
        self._acknowledge(chunk, published)
        yield from published

    def _send(
        self,
        params: dict[str, str],
        kind: type[BatchBody],
        parts: Sequence[tuple[Payload, Mapping[str, str]]],
    ) -> Envelope:
        """One batch request; a reply naming the framed body in Accept-Post lets the
        client send frames from then on, unless one was refused already."""
        body = kind(parts, on_read=self._progress_within)
        with self.client._exchange(
            "POST", params, body=body, headers={"Content-Type": body.content_type}
        ) as response:
            envelope = self.client._envelope(response)
            known = self.client.capabilities
            if known.framed_publish is None and FRAMED_BATCH in response.headers.get(
                "Accept-Post", ""
            ):
                known.framed_publish = True
        return envelope

    def _retention(self, item: BatchItem) -> int | None:
        return item.retention_days if item.retention_days is not None else self.retention_days

    # --- bookkeeping --------------------------------------------------------------------
    def _acknowledge(self, chunk: list[_Taken], published: list[Published]) -> None:
        assert self.unacknowledged[: len(chunk)] == chunk
        del self.unacknowledged[: len(chunk)]
        for taken in chunk:
            assert taken.payload is not None
            self.bytes_done += taken.payload.size
            taken.payload.close()
        self.published += published
        if self.on_progress is not None:
            self.on_progress(len(self.published), self.bytes_done)

    def _progress_within(self, data_sent: int) -> None:
        if self.on_progress is not None:
            self.on_progress(len(self.published), self.bytes_done + data_sent)

    def _give_back(self) -> list[BatchItem]:
        """The unacknowledged items, re-sendable: a caller's file rewound to where it
        was, a stream that was copied to a temporary file replaced by that copy."""
        remaining = []
        for taken in self.unacknowledged:
            item, payload = taken.item, taken.payload
            if payload is not None:
                try:
                    if payload.spooled:
                        item = replace(item, data=payload.detach())
                    elif payload.file is not None and not isinstance(item.data, os.PathLike):
                        payload.rewind()
                except (OSError, ValueError):
                    pass
                payload.close()
            remaining.append(item)
        self.unacknowledged.clear()
        return remaining


def _note(exc: BaseException, published: list[Published], remaining: list[BatchItem]) -> None:
    """Tell the caller how far it got, on whatever was raised (typed error or OSError)."""
    try:
        exc.published = published  # type: ignore[attr-defined]
        exc.remaining = remaining  # type: ignore[attr-defined]
    except AttributeError:
        pass
