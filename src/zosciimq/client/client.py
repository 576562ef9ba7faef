"""``ZosciiClient``: every action of the ZOSCII MQ API over one reused HTTP session.

Two modes:

* ``"default"``: small messages as urlencoded POST forms, large ones and files as a
  raw-body POST streamed from disk (this project's improvement), reads by GET, and
  HTTP ``Range`` for resuming store downloads.
* ``"original"`` (alias ``"compat"``): only what the original PHP implementation
  understands, every action as an urlencoded POST form, as its replikate.php does.
  Requests keep that exact shape: no ``count`` (batch) and no ``wait`` (long-poll) is
  ever sent, although the original would ignore them, so a strict proxy or firewall in
  front of an original server sees nothing new.

Batch fetch, batch publish (``publish_many``) and long-poll (this project's
improvements) are used in the default mode only. Whether a server knows batches is
learnt from its first reply to one and remembered per client
(``capabilities.batch_fetch``): ``multipart/mixed`` means yes; a single binary message
means no (the original ignores ``count``), and from then on the client makes single
fetches, returning that first message as a batch of one. Batch publish is learnt the same way
(``capabilities.batch_publish``, see publish_batch.py): the first request of a
``publish_many`` carries one message, and a reply without the name list (the
original's) means single publishes from then on, so no message is ever lost to a server
that would keep only the last part of a batch.

The urlencoded form is byte-exact for binary messages: requests percent-encodes the raw
bytes of a ``bytes`` value, and the server decodes them back to the same bytes.
"""

from __future__ import annotations

import http.client
import io
import json
import logging
import math
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import requests
import urllib3.exceptions

from zosciimq.client.capabilities import Capabilities
from zosciimq.client.consumer import Consumer
from zosciimq.client.download import Download, DownloadResult, Progress
from zosciimq.client.errors import (
    BadHeaders,
    DeadlineExceeded,
    Fenced,
    NotZosciiReply,
    Timeout,
    TransportError,
    TruncatedReply,
    ZosciiClientError,
)
from zosciimq.client.fetch_batch import BatchMessage, Spooler, is_batch, read_batch
from zosciimq.client.payload import MessageSource, Payload
from zosciimq.client.pointers import PointerStore
from zosciimq.client.publish_batch import (
    DEFAULT_PUBLISH_BATCH_BYTES,
    DEFAULT_PUBLISH_BATCH_SIZE,
    BatchItem,
    BatchRun,
    PublishProgress,
)
from zosciimq.client.replies import (
    Envelope,
    Published,
    Received,
    ReplyInfo,
    Sink,
    SinkFactory,
    check_headers,
    is_binary,
    read_envelope,
    receive_message,
)
from zosciimq.client.stream import Follow, Streamed, resolve
from zosciimq.client.transport import Deadline, TransportOptions, build_session, deadline
from zosciimq.client.work import (
    LeasedMessage,
    Outcome,
    Receipt,
    leased,
    outcomes,
    receipt_of,
    receipts_of,
)

log = logging.getLogger(__name__)

Mode = Literal["default", "original", "compat"]
DEFAULT_STREAM_THRESHOLD = 1 << 20
DEFAULT_BATCH_COUNT = 100
DEFAULT_BATCH_MEMORY = 8 << 20  # fetch_batch: parts beyond this many bytes go to temp files
DEFAULT_MAX_ENVELOPE_BYTES = 64 << 20
DEFAULT_MAX_HEADER_BYTES = 64 << 10


@dataclass(frozen=True)
class Message:
    """A message read whole into memory."""

    name: str
    data: bytes
    offset: int = 0
    total_length: int | None = None


def new_nonce() -> str:
    return str(uuid.uuid4())


class ZosciiClient:
    """A client for one server endpoint (``http://host/`` or ``http://host/index.php``)."""

    def __init__(
        self,
        url: str,
        *,
        mode: Mode = "default",
        options: TransportOptions | None = None,
        headers: Mapping[str, str] | None = None,
        auth: tuple[str, str] | requests.auth.AuthBase | None = None,
        session: requests.Session | None = None,
        max_message_bytes: int | None = None,
        max_envelope_bytes: int = DEFAULT_MAX_ENVELOPE_BYTES,
        max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
        stream_threshold: int = DEFAULT_STREAM_THRESHOLD,
    ) -> None:
        if mode not in ("default", "original", "compat"):
            raise ValueError(f"unknown mode {mode!r}: use 'default' or 'original'")
        self.url = url
        self.original = mode != "default"
        self.options = options or TransportOptions()
        self.session = session or build_session(self.options, dict(headers or {}))
        if auth is not None:
            self.session.auth = auth
        self.max_message_bytes = max_message_bytes
        self.max_envelope_bytes = max_envelope_bytes
        self.max_header_bytes = max_header_bytes
        self.stream_threshold = stream_threshold
        self.capabilities = Capabilities()  # what the server was seen to do

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> ZosciiClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- queues ------------------------------------------------------------------------
    def publish(
        self,
        queue: str,
        message: MessageSource,
        *,
        retention_days: int | None = None,
        nonce: str | None = None,
    ) -> Published:
        """Publish; a fresh nonce (uuid4) is used unless given, so retries never duplicate.

        ``message``: bytes, a str (the text, as UTF-8), a file object (sent from its
        position on, streamed), an iterable of bytes, or a ``pathlib.Path`` (that file).
        The reply names no message: ``name`` and ``duplicate`` are None.
        """
        payload = Payload.from_source(message, self.max_message_bytes)
        try:
            return self._publish_payload(
                queue, payload, retention_days=retention_days, nonce=nonce or new_nonce()
            )
        finally:
            payload.close()

    def publish_many(
        self,
        queue: str,
        messages: Iterable[MessageSource | BatchItem],
        *,
        retention_days: int | None = None,
        batch_size: int = DEFAULT_PUBLISH_BATCH_SIZE,
        batch_bytes: int = DEFAULT_PUBLISH_BATCH_BYTES,
        on_progress: PublishProgress | None = None,
    ) -> list[Published]:
        """Publish many messages, in order, in few requests; one ``Published`` each.

        ``messages``: anything ``publish`` takes (bytes, str text, file objects,
        iterables of bytes, ``pathlib.Path`` for a file), or ``BatchItem(data, nonce,
        retention_days)`` for a message's own nonce or retention. Each message gets a
        fresh uuid4 nonce unless given, and the request is retried with the same ones,
        so a lost reply never stores a message twice. ``retention_days``: the default
        for messages without their own (None: the server's default, 0 as shipped).

        Requests carry at most ``batch_size`` messages and ``batch_bytes`` message
        bytes (keep them within the server's ``ZOSCII_MAX_BATCH_COUNT``, 1000, and
        ``ZOSCII_MAX_BATCH_BYTES``, 64 MiB, or it answers 400/413). The body is
        streamed: files are read piece by piece as they are sent. A message larger
        than ``batch_bytes`` goes alone as a single publish (any size the server
        takes; its ``name`` is then None). Each batch is all or nothing on the server
        and its messages get contiguous, increasing names.

        Results: ``Published.name`` is the name given; for a message whose nonce had
        been used already (a repeat) ``name`` is None and ``duplicate`` True, and
        nothing was written for it. A server without batch publish (the original, see
        ``capabilities.batch_publish``) is detected by the first request, which carries one
        message only; every other message then goes as a single publish, whose reply
        names nothing (``name`` and ``duplicate`` None). That first message reaches
        the original without a nonce it understands: its ``nonce`` is None. No probe
        is made when ``fetch_batch`` already found the server without batches, and in
        the ``original`` mode every message is a single publish.

        On an error the typed error is raised (``TooLarge`` for 413, ``InvalidInput``
        for 400, ...; an ``OSError`` for an unreadable file) with two attributes:
        ``published``, the ``Published`` of the messages acknowledged before it (a
        prefix of ``messages``), and ``remaining``, the rest as ``BatchItem``s with
        the nonces that were sent. Nothing of the failed request was written, unless
        its reply was lost on the way: ``publish_many(queue, error.remaining)`` then
        finishes the job without storing anything twice (the repeats come back with
        ``duplicate`` True). Files given as objects are rewound for that; streams
        that cannot seek are in ``remaining`` as their temporary copies.

        ``on_progress(messages_acknowledged, message_bytes_sent)`` is called as the
        bodies are sent and after every request.
        """
        run = BatchRun(
            self,
            queue,
            retention_days=retention_days,
            batch_size=batch_size,
            batch_bytes=batch_bytes,
            on_progress=on_progress,
        )
        items = [run.item(message) for message in messages]  # nonces: checked, or new
        try:
            return list(run.run(items))
        except BaseException as exc:
            if isinstance(getattr(exc, "remaining", None), list):
                exc.remaining += items[run.taken :]  # type: ignore[attr-defined]
            raise

    def publish_iter(
        self,
        queue: str,
        messages: Iterable[MessageSource | BatchItem],
        *,
        retention_days: int | None = None,
        batch_size: int = DEFAULT_PUBLISH_BATCH_SIZE,
        batch_bytes: int = DEFAULT_PUBLISH_BATCH_BYTES,
        on_progress: PublishProgress | None = None,
    ) -> Iterator[Published]:
        """``publish_many`` for long or endless inputs: ``messages`` is taken lazily
        (one request's worth at a time) and a ``Published`` is yielded per message as
        soon as its request is acknowledged. On an error, ``remaining`` holds only the
        messages taken from ``messages`` and not acknowledged; the rest is still in
        your iterator.
        """
        run = BatchRun(
            self,
            queue,
            retention_days=retention_days,
            batch_size=batch_size,
            batch_bytes=batch_bytes,
            on_progress=on_progress,
        )
        return run.run(messages)

    def fetch(
        self,
        queue: str,
        after: str = "",
        *,
        offset: int = 0,
        length: int = 0,
        wait: float | None = None,
    ) -> Message | None:
        """The first message after ``after``, or None when there is nothing (new).

        ``wait``: seconds the server may hold the request until a message arrives
        (long-poll, capped by the server; ignored by the original and never sent in the
        original mode).
        """
        buffer = io.BytesIO()
        received = self.fetch_into(
            queue, after, lambda _info: buffer, offset=offset, length=length, wait=wait
        )
        if received is None:
            return None
        return Message(received.name, buffer.getvalue(), received.offset, received.total_length)

    def stream(
        self, queue: str, after: str = "", *, stop: threading.Event | None = None
    ) -> Iterator[Message]:
        """Follow ``queue`` live from ``after``: every message, in order, as it comes.

        Over the server's stream (Server-Sent Events of the live service); reconnects
        by itself and resumes right after the last message it yielded, so a caller that
        saves each name as its pointer loses nothing and sees nothing twice. A message
        over the stream's inline limit is fetched (it is gone if deleted meanwhile). A
        server without streams is followed by long-poll fetch. Ends when ``stop`` is set
        (checked between messages); errors other than the network's (a missing queue,
        no right) are raised.
        """
        for event in self.stream_events(queue, after, stop=stop):
            data = resolve(self, queue, event, stop)
            if data is not None:
                yield Message(event.name, data)

    def stream_events(
        self, queue: str, after: str = "", *, stop: threading.Event | None = None
    ) -> Iterator[Streamed]:
        """``stream`` without fetching large messages: those come with ``data`` None and
        the pointer to fetch them with (``Streamed.previous``), for a caller that streams
        them to disk itself (``zoscii tail``)."""
        return iter(Follow(self, queue, after, stop=stop))

    def fetch_into(
        self,
        queue: str,
        after: str,
        open_sink: SinkFactory,
        *,
        offset: int = 0,
        length: int = 0,
        headers: Mapping[str, str] | None = None,
        wait: float | None = None,
    ) -> Received | None:
        """Stream the next message into ``open_sink(info)``; None when there is none.

        The name is checked (a message name, sorting after ``after``) before the sink
        is opened; the body is checked against its declared length after. ``wait``: as
        for ``fetch``.
        """
        params = {"action": "fetch", "q": queue}
        if after:
            params["after"] = after
        if offset:
            params["offset"] = str(offset)
        if length:
            params["length"] = str(length)
        held = self._add_wait(params, wait)
        return self._read_message(params, open_sink, after=after, headers=headers, wait=held)

    def fetch_batch(
        self,
        queue: str,
        after: str = "",
        count: int = DEFAULT_BATCH_COUNT,
        max_bytes: int | None = None,
        wait: float | None = None,
        *,
        memory_limit: int = DEFAULT_BATCH_MEMORY,
        spool_dir: Path | str | None = None,
    ) -> list[BatchMessage]:
        """Up to ``count`` messages after ``after`` in one request; [] when there is none.

        ``max_bytes``: the batch's byte budget on the server (the first message always
        comes, whatever its size). ``wait``: long-poll seconds, as for ``fetch``. Parts
        are kept in memory up to ``memory_limit`` bytes in all and written to unnamed
        temporary files beyond that (``BatchMessage.spooled``); close the messages, or
        let them be collected, to free those. Against a server without batches (see
        ``capabilities.batch_fetch``) each call is a single fetch: at most one message.
        """
        spooler = Spooler(memory_limit, spool_dir)
        try:
            received = self.fetch_batch_into(
                queue, after, spooler, count=count, max_bytes=max_bytes, wait=wait
            )
            return spooler.messages(received)
        except BaseException:
            spooler.discard()
            raise

    def fetch_batch_into(
        self,
        queue: str,
        after: str,
        open_sink: SinkFactory,
        *,
        count: int = DEFAULT_BATCH_COUNT,
        max_bytes: int | None = None,
        wait: float | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> list[Received]:
        """Stream up to ``count`` messages after ``after``, each into ``open_sink(info)``.

        Every part is checked as a single fetch is (a message name, strictly after the
        one before it and the first after ``after``, its length exact, within
        ``max_message_bytes``) and streamed chunk by chunk into its own sink as it
        arrives. On an error the sinks opened so far hold incomplete data: discard them
        all. [] when there is nothing after ``after``.
        """
        if count < 1:
            raise ValueError("count must be at least 1")
        if max_bytes is not None and max_bytes < 1:
            raise ValueError("max_bytes must be at least 1 (or None: the server's budget)")
        params = {"action": "fetch", "q": queue}
        if after:
            params["after"] = after
        batch = count > 1 and not self.original and self.capabilities.batch_fetch is not False
        if batch:
            params["count"] = str(count)
            if max_bytes is not None:
                params["max_bytes"] = str(max_bytes)
        held = self._add_wait(params, wait)
        method = "POST" if self.original else "GET"
        with self._exchange(method, params, headers=headers, wait=held) as response:
            if batch and is_batch(response):
                if self.capabilities.batch_fetch is not True:
                    log.debug("%s answers batch fetches", self.url)
                    self.capabilities.batch_fetch = True
                return read_batch(
                    response,
                    open_sink,
                    after=after,
                    count=count,
                    max_bytes=self.max_message_bytes,
                    max_header_bytes=self.max_header_bytes,
                )
            if not is_binary(response):
                self._envelope(response)  # raises the typed error, if any
                return []
            if batch:
                log.info(
                    "%s answered a batch fetch with a single message: it does not know "
                    "batches (the original implementation); single fetches from now on",
                    self.url,
                )
                self.capabilities.batch_fetch = False
            received = receive_message(
                response, open_sink, max_bytes=self.max_message_bytes, after=after
            )
            return [received]

    def consume(self, queue: str, pointer: PointerStore | None = None, **options: Any) -> Consumer:
        """A ``Consumer`` of ``queue`` whose pointer lives in ``pointer`` (see consumer.py)."""
        return Consumer(self, queue, pointer, **options)

    # --- work queues (consumer groups) -------------------------------------------------
    def lease(
        self,
        queue: str,
        group: str,
        *,
        count: int = 1,
        lease: float | None = None,
        wait: float | None = None,
        consumer: str | None = None,
        memory_limit: int = DEFAULT_BATCH_MEMORY,
        spool_dir: Path | str | None = None,
    ) -> list[LeasedMessage]:
        """Lease up to ``count`` messages of ``queue`` for the consumer group ``group``
        (the server's ``consume``); [] when there is nothing to deliver.

        Each message is this caller's for ``lease`` seconds (whole, rounded up; None:
        the server's default, 30 as shipped): finish it with ``ack``, ``requeue`` or
        ``dead_letter``, or ask for more time with ``extend_lease``, before that, or it
        is delivered again to someone. Redeliveries come first, so a batch is not in
        name order. ``wait``: long-poll seconds, as for ``fetch``. ``consumer``: a name
        for this consumer in the group's state (``[A-Za-z0-9_-]``, logs and stats).
        Large batches spool to temporary files past ``memory_limit`` bytes, as
        ``fetch_batch`` does: close the messages to free them.

        Not part of the original implementation, which answers an error.
        """
        if count < 1:
            raise ValueError("count must be at least 1")
        params = {"action": "consume", "q": queue, "group": group}
        if count > 1:
            params["count"] = str(count)
        if lease is not None:
            params["lease"] = _whole_seconds(lease, "lease", minimum=1)
        if consumer:
            params["consumer"] = consumer
        held = self._add_wait(params, wait)
        spooler = Spooler(memory_limit, spool_dir)
        part_headers: list[Mapping[str, str]] = []

        def open_sink(info: ReplyInfo) -> Sink:
            part_headers.append(info.headers)
            return spooler(info)

        try:
            with self._exchange("POST", params, wait=held) as response:
                if is_batch(response):
                    received = read_batch(
                        response,
                        open_sink,
                        after=None,
                        count=count,
                        max_bytes=self.max_message_bytes,
                        max_header_bytes=self.max_header_bytes,
                    )
                elif is_binary(response):
                    received = [
                        receive_message(response, open_sink, max_bytes=self.max_message_bytes)
                    ]
                    part_headers[-1] = response.headers
                else:
                    self._envelope(response)  # raises the typed error, if any
                    return []
            bodies = spooler.messages(received)
            return [
                leased(queue, group, body, headers)
                for body, headers in zip(bodies, part_headers, strict=True)
            ]
        except BaseException:
            spooler.discard()
            raise

    def ack(self, queue: str, group: str, receipt: Receipt) -> None:
        """Finish the message for the group. ``Fenced`` (409) when the receipt no longer
        holds it (its lease ran out and it went to someone else, or it was requeued or
        dead-lettered); repeating an ack that succeeded succeeds again."""
        self._settle(queue, group, "ack", receipt_of(receipt))

    def ack_many(self, queue: str, group: str, receipts: Iterable[Receipt]) -> list[Outcome]:
        """Ack several receipts in one request; an ``Outcome`` each, in order (a
        single receipt refused by the server is reported as ``fenced``)."""
        return self._settle_many(queue, group, "ack", receipts_of(receipts))

    def requeue(
        self,
        queue: str,
        group: str,
        receipt: Receipt,
        *,
        delay: float | None = None,
        ttl: float | None = None,
    ) -> None:
        """End the lease now: the message goes behind the ones waiting and is delivered
        again after ``delay`` seconds (whole, rounded up). ``ttl``: a new time to live
        from now (0: none). ``Fenced`` as for ``ack``."""
        self._settle(queue, group, "requeue", receipt_of(receipt), _later(delay, ttl))

    def requeue_many(
        self,
        queue: str,
        group: str,
        receipts: Iterable[Receipt],
        *,
        delay: float | None = None,
        ttl: float | None = None,
    ) -> list[Outcome]:
        return self._settle_many(queue, group, "requeue", receipts_of(receipts), _later(delay, ttl))

    def dead_letter(self, queue: str, group: str, receipt: Receipt) -> None:
        """Give up on the message: it is copied to the group's dead-letter queue
        (``dead_letter_queue(queue, group)``) and finished here. ``Fenced`` as for
        ``ack``."""
        self._settle(queue, group, "deadletter", receipt_of(receipt))

    def dead_letter_many(
        self, queue: str, group: str, receipts: Iterable[Receipt]
    ) -> list[Outcome]:
        return self._settle_many(queue, group, "deadletter", receipts_of(receipts))

    def extend_lease(
        self, queue: str, group: str, receipt: Receipt, lease: float | None = None
    ) -> float:
        """Keep the message ``lease`` more seconds from now (None: the server's default
        lease); the Unix time the lease now ends. ``Fenced`` when it is not ours any
        more: stop working on it, someone else has it."""
        params = {"action": "extend", "q": queue, "group": group, "receipt": receipt_of(receipt)}
        if lease is not None:
            params["lease"] = _whole_seconds(lease, "lease", minimum=1)
        result = self._call(params, method="POST").result
        until = result.get("lease_until") if isinstance(result, dict) else None
        if not isinstance(until, (int, float)) or isinstance(until, bool):
            raise NotZosciiReply(f"extend: no lease_until in {str(result)[:80]!r}")
        return float(until)

    def _settle(
        self,
        queue: str,
        group: str,
        action: str,
        receipt: str,
        extra: Mapping[str, str] | None = None,
    ) -> None:
        params = {"action": action, "q": queue, "group": group, "receipt": receipt, **(extra or {})}
        self._call(params, method="POST")

    def _settle_many(
        self,
        queue: str,
        group: str,
        action: str,
        receipts: list[str],
        extra: Mapping[str, str] | None = None,
    ) -> list[Outcome]:
        params = {
            "action": action,
            "q": queue,
            "group": group,
            "receipts": json.dumps(receipts),
            **(extra or {}),
        }
        try:
            envelope = self._call(params, method="POST")
        except Fenced:
            if len(receipts) != 1:
                raise
            # The server answers a lone receipt with 409 instead of a list of one.
            return [Outcome(receipts[0], "fenced")]
        return outcomes(envelope.result, receipts)

    # --- the store -----------------------------------------------------------------------
    def store(
        self,
        message: MessageSource,
        *,
        retention_days: int | None = None,
        nonce: str | None = None,
        unidentified: bool = False,
    ) -> Published:
        """Store; ``name`` of the reply is the stored name (None when the nonce was used)."""
        nonce = nonce or new_nonce()
        params = {"action": "store", "n": nonce}
        if retention_days is not None:
            params["r"] = str(retention_days)
        if unidentified:
            params["u"] = "1"
        envelope = self._send_message(params, message)
        name = envelope.result if isinstance(envelope.result, str) and envelope.result else None
        return Published(nonce=nonce, message=envelope.message, name=name)

    def retrieve(self, name: str, *, offset: int = 0, length: int = 0) -> Message:
        buffer = io.BytesIO()
        received = self.retrieve_into(name, lambda _info: buffer, offset=offset, length=length)
        return Message(received.name, buffer.getvalue(), received.offset, received.total_length)

    def retrieve_into(
        self,
        name: str,
        open_sink: SinkFactory,
        *,
        offset: int = 0,
        length: int = 0,
        headers: Mapping[str, str] | None = None,
    ) -> Received:
        params = {"action": "retrieve", "name": name}
        if offset:
            params["offset"] = str(offset)
        if length:
            params["length"] = str(length)
        received = self._read_message(params, open_sink, expect_name=name, headers=headers)
        if received is None:
            raise NotZosciiReply("retrieve answered with an envelope that reports no error")
        return received

    def scan(self) -> list[str]:
        """Every unidentified (``-u``) store name."""
        return _names(self._call({"action": "scan"}).result)

    def identify(self, names: Iterable[str]) -> list[str]:
        """Mark store names as identified; returns the new names of those renamed."""
        # a form body: a long list of names would not fit in a URL
        params = {"action": "identify", "names": json.dumps(list(names))}
        envelope = self._call(params, method="POST")
        return _names(envelope.result)

    # --- operators (the "admin" right: the operator's token, or a client's) -------------------
    def queues(self, queue: str | None = None) -> list[dict[str, Any]]:
        """Every queue (or ``queue``) with messages, bytes, oldest/newest name and time,
        and its consumer groups with their lag (PROTOCOL.md 3, "Admin actions")."""
        params = {"action": "queues", **({"q": queue} if queue else {})}
        result = self._call(params).result
        if not isinstance(result, list):
            raise NotZosciiReply("queues answered without a list")
        return result

    def purge(self, queue: str, before: str | datetime | None = None) -> dict[str, Any]:
        """Delete the queue's messages, or those published before ``before`` (a time, or
        an ISO-8601 text with a zone) or sorting before it (a message name); the queue
        stays. Returns ``{"queue", "purged", "bytes", "before"}``."""
        params = {"action": "purge", "q": queue}
        if before is not None:
            params["before"] = _iso(before)
        return _mapping(self._call(params, method="POST").result, "purge")

    def delete_queue(self, queue: str) -> dict[str, Any]:
        """Delete the queue with its index and its consumer groups' state; a later
        publish makes it anew. Returns ``{"queue", "messages", "bytes", "groups"}``."""
        params = {"action": "delete", "q": queue}
        return _mapping(self._call(params, method="POST").result, "delete")

    def replay_pointer(self, queue: str, since: str | datetime) -> str:
        """The pointer to fetch after so the next message is the first published at or
        after ``since`` (whole seconds, UTC): the last name before it, "" for the start."""
        return str(self.replay(queue, since)["pointer"])

    def replay(self, queue: str, since: str | datetime) -> dict[str, Any]:
        """``replay_pointer`` with the rest of the answer: ``first`` and ``waiting``."""
        params = {"action": "replay", "q": queue, "since": _iso(since)}
        return _mapping(self._call(params, method="POST").result, "replay")

    def welcome(self) -> str:
        """The server's plain-text greeting: a cheap check that it is there."""
        with self._exchange("GET", {}) as response:
            return response.text

    # --- resumable downloads -------------------------------------------------------------
    def download(
        self,
        queue: str,
        dest: Path | str,
        *,
        after: str = "",
        on_progress: Progress | None = None,
    ) -> DownloadResult | None:
        """Fetch the message after ``after`` into ``dest``, resuming an interrupted try.

        None when there is no such message. ``on_progress(bytes_on_disk, total)``.
        """
        return Download(self, Path(dest), queue=queue, after=after, on_progress=on_progress).run()

    def download_stored(
        self, name: str, dest: Path | str, *, on_progress: Progress | None = None
    ) -> DownloadResult:
        """Retrieve a stored message into ``dest``, resuming an interrupted try."""
        result = Download(self, Path(dest), name=name, on_progress=on_progress).run()
        assert result is not None  # retrieve answers a message or raises
        return result

    # --- plumbing ------------------------------------------------------------------------
    def _publish_payload(
        self, queue: str, payload: Payload, *, retention_days: int | None, nonce: str
    ) -> Published:
        params = {"action": "publish", "q": queue, "n": nonce}
        if retention_days is not None:
            params["r"] = str(retention_days)
        envelope = self._send_payload(params, payload)
        return Published(nonce=nonce, message=envelope.message)

    def _send_message(self, params: dict[str, str], message: MessageSource) -> Envelope:
        payload = Payload.from_source(message, self.max_message_bytes)
        try:
            return self._send_payload(params, payload)
        finally:
            payload.close()

    def _send_payload(self, params: dict[str, str], payload: Payload) -> Envelope:
        if self.original or payload.size <= self.stream_threshold:
            return self._call({**params, "msg": payload.read_all()}, method="POST")
        with self._exchange(
            "POST",
            params,
            body=payload.body(),
            headers={"Content-Type": "application/octet-stream"},
        ) as response:
            return self._envelope(response)

    def _call(self, params: dict[str, Any], method: str | None = None) -> Envelope:
        method = method or ("POST" if self.original else "GET")
        with self._exchange(method, params) as response:
            return self._envelope(response)

    def _envelope(self, response: requests.Response) -> Envelope:
        if is_binary(response):
            raise NotZosciiReply("expected a JSON envelope, got a binary reply")
        return read_envelope(response, self.max_envelope_bytes)

    def _add_wait(self, params: dict[str, str], wait: float | None) -> float:
        """Ask for a long-poll of ``wait`` seconds (whole, rounded up); the seconds asked."""
        if wait is None or wait <= 0 or self.original:
            return 0.0
        seconds = math.ceil(wait)
        params["wait"] = str(seconds)
        return float(seconds)

    def _read_message(
        self,
        params: dict[str, str],
        open_sink: SinkFactory,
        *,
        after: str | None = None,
        expect_name: str | None = None,
        headers: Mapping[str, str] | None = None,
        wait: float = 0.0,
    ) -> Received | None:
        method = "POST" if self.original else "GET"
        with self._exchange(method, params, headers=headers, wait=wait) as response:
            if not is_binary(response):
                self._envelope(response)  # raises the typed error, if any
                return None
            return receive_message(
                response,
                open_sink,
                max_bytes=self.max_message_bytes,
                after=after,
                expect_name=expect_name,
            )

    @contextmanager
    def _exchange(
        self,
        method: str,
        params: dict[str, Any],
        *,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        wait: float = 0.0,
    ) -> Iterator[requests.Response]:
        """One request under the overall deadline, network failures turned into our errors.

        Form requests carry the parameters in the body; GET and raw-body POST in the URL.
        ``wait``: seconds the server may legitimately stay silent (a long-poll), added to
        the read timeout and the deadline.
        """
        form = method == "POST" and body is None
        limit = None if self.options.deadline is None else self.options.deadline + wait
        with deadline(limit) as current:
            try:
                response = self.session.request(
                    method,
                    self.url,
                    params=None if form else params,
                    data=params if form else body,
                    headers=dict(headers or {}),
                    timeout=(self.options.connect_timeout, self.options.read_timeout + wait),
                    stream=True,
                    allow_redirects=False,
                )
            except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
                raise _transport_error(
                    exc, expired=current is not None and current.expired
                ) from exc
            try:
                _check_deadline(current)  # a reply cut by the deadline can look complete
                check_headers(response, self.max_header_bytes)
                if 300 <= response.status_code < 400:
                    raise NotZosciiReply(
                        f"HTTP {response.status_code} redirect to "
                        f"{response.headers.get('Location', '?')[:200]!r}: use that URL",
                        status=response.status_code,
                    )
                yield response
                _check_deadline(current)
            except (requests.RequestException, urllib3.exceptions.HTTPError) as exc:
                # Only the reply's own read errors: a sink's OSError (local disk) passes.
                raise _transport_error(
                    exc, expired=current is not None and current.expired
                ) from exc
            finally:
                response.close()


def _check_deadline(current: Deadline | None) -> None:
    if current is not None:
        current.check()


def _transport_error(exc: BaseException, *, expired: bool) -> ZosciiClientError:
    """Name what went wrong on the wire, looking through requests' and urllib3's wrappers."""
    if expired:
        error: ZosciiClientError = DeadlineExceeded(f"overall deadline passed: {exc}")
    else:
        causes = list(_causes(exc))
        if any(isinstance(c, DeadlineExceeded) for c in causes):
            error = next(c for c in causes if isinstance(c, DeadlineExceeded))
        elif any(isinstance(c, (http.client.LineTooLong,)) for c in causes) or any(
            isinstance(c, http.client.HTTPException) and "more than" in str(c) for c in causes
        ):
            error = BadHeaders(f"unacceptable reply headers: {exc}")
        elif any(
            isinstance(c, (urllib3.exceptions.IncompleteRead, http.client.IncompleteRead))
            for c in causes
        ) or isinstance(exc, requests.exceptions.ChunkedEncodingError):
            error = TruncatedReply(f"reply body cut short: {exc}")
        elif any(isinstance(c, urllib3.exceptions.NewConnectionError) for c in causes):
            error = TransportError(f"cannot connect: {exc}")  # a subclass of the timeout, oddly
        elif isinstance(exc, requests.Timeout) or any(
            isinstance(c, (TimeoutError, urllib3.exceptions.TimeoutError)) for c in causes
        ):
            error = Timeout(f"timed out: {exc}")
        else:
            error = TransportError(f"cannot reach the server: {exc}")
    return error


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """Every exception wrapped in ``exc``: args, ``reason``, cause and context, once each."""
    seen: set[int] = set()
    stack = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        for arg in getattr(current, "args", ()):
            if isinstance(arg, BaseException):
                stack.append(arg)
        for attr in ("reason", "__cause__", "__context__"):
            inner = getattr(current, attr, None)
            if isinstance(inner, BaseException):
                stack.append(inner)


def _whole_seconds(value: float, name: str, *, minimum: int = 0) -> str:
    """The server takes whole seconds: round up, so a lease is never shorter than asked."""
    if not value >= minimum or value == float("inf"):
        raise ValueError(f"{name} must be at least {minimum} seconds, not {value!r}")
    return str(math.ceil(value))


def _later(delay: float | None, ttl: float | None) -> dict[str, str]:
    params = {}
    if delay:
        params["delay"] = _whole_seconds(delay, "delay")
    if ttl is not None:
        params["ttl"] = _whole_seconds(ttl, "ttl")
    return params


def _names(result: Any) -> list[str]:
    if not isinstance(result, list) or not all(isinstance(n, str) for n in result):
        raise NotZosciiReply(f"expected a list of names, got {str(result)[:80]!r}")
    return result


def _iso(moment: str | datetime) -> str:
    """A time for the admin actions: ISO-8601 with its zone (a naive datetime is refused
    here rather than guessed at by the server)."""
    if isinstance(moment, str):
        return moment
    if moment.tzinfo is None:
        raise ValueError("a naive datetime: give it a zone (e.g. datetime.now(UTC))")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _mapping(result: Any, action: str) -> dict[str, Any]:
    if not isinstance(result, dict):
        raise NotZosciiReply(f"{action} answered without a result object")
    return result
