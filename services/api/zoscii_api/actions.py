"""The original's six actions: validate the parameters, call the core, shape the reply.
Every action's handler is looked up here (``Actions.handler``); the work-queue and admin
actions are in ``zoscii_api.work`` and ``zoscii_api.admin``.

Nothing here touches a path: every file-system effect goes through zosciimq.core.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import BinaryIO

from werkzeug.wrappers import Request

from zoscii_api.admin import AdminActions
from zoscii_api.context import context_of
from zoscii_api.gather import Gathered
from zoscii_api.metrics import ApiMetrics
from zoscii_api.params import RequestParams, whole_number
from zoscii_api.responses import Answer, batch_response, envelope, message_response
from zoscii_api.settings import ApiSettings
from zoscii_api.waiting import QueueWatcher
from zoscii_api.work import WorkActions
from zosciimq.core import DataStore, FetchResult, QueueStore, Upload, parse_name
from zosciimq.core.names import clean_nonce, clean_pointer, clean_queue, clean_retention
from zosciimq.core.nonces import scoped
from zosciimq.core.outgoing import Outgoing, PublishResult
from zosciimq.errors import ActionDisabled, InvalidInput, MissingMessage, QueueBlocked
from zosciimq.protocol import FRAMED_BATCH, NONCE, RETENTION, TTL

MAX_IDENTIFY_NAMES = 10_000
# A batch part's options, by the lower-case header names params gives them.
_NONCE, _RETENTION, _TTL = NONCE.lower(), RETENTION.lower(), TTL.lower()
Handler = Callable[[Request, RequestParams], Answer]


@dataclass(frozen=True)
class _Publishing:
    """A publish, checked and ready to commit."""

    queue: str
    messages: list[Outgoing]
    size: int  # of the messages' bytes, for the metrics
    batch: bool


@dataclass
class Actions:
    settings: ApiSettings
    queues: QueueStore
    store: DataStore
    metrics: ApiMetrics
    watcher: QueueWatcher
    work: WorkActions
    admin: AdminActions

    _handlers: dict[str, Handler] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # Built once: the endpoint looks the action up several times per request.
        self._handlers = {
            "publish": self.publish,
            "fetch": self.fetch,
            "store": self.store_message,
            "retrieve": self.retrieve,
            "scan": self.scan,
            "identify": self.identify,
            "consume": self.work.consume,
            "ack": self.work.ack,
            "requeue": self.work.requeue,
            "deadletter": self.work.deadletter,
            "extend": self.work.extend,
            **self.admin.handlers(),
        }

    def handler(self, action: str) -> Handler:
        handler = self._handlers.get(action)
        if handler is None:
            raise InvalidInput(f"Unknown action '{action[:40]}'.")
        if action not in self.settings.enabled_actions:
            raise ActionDisabled(f"Action '{action}' is disabled on this server.")
        return handler

    def check_queue(self, action: str, raw_queue: str | None) -> str:
        """Queue name rules, checked before any body is read when q is in the URL."""
        queue = clean_queue(raw_queue or "")
        if action == "publish" and queue in self.settings.blocked_queues:
            raise QueueBlocked(f"Publishing to queue '{queue}' is not allowed.")
        return queue

    # --- queues -----------------------------------------------------------------------
    def publish(self, request: Request, params: RequestParams) -> Answer:
        publishing = self._publishing(request, params)
        results = self.queues.publish_many(publishing.queue, publishing.messages)
        return self._published(publishing, results)

    async def publish_gathered(
        self, request: Request, params: RequestParams, gathered: Gathered
    ) -> Answer:
        """``publish`` on an event loop: the commit is shared with the publishes
        ``gathered`` meanwhile. Closes ``params``, once the commit is over (a client that
        left while it waited does not free the uploads a commit is writing)."""
        try:
            publishing = self._publishing(request, params)
        except BaseException:
            params.close()
            raise
        results = await gathered.publish(
            publishing.queue, publishing.messages, release=params.close
        )
        return self._published(publishing, results)

    def _publishing(self, request: Request, params: RequestParams) -> _Publishing:
        """What a publish asks for, checked: the queue and its messages.

        A batch (every ``msg`` part, or frame) is one commit, contiguous names, all or
        nothing. A part's ``X-ZOSCII-Nonce`` and ``X-ZOSCII-Retention`` headers (a
        frame's ``n`` and ``r``) are its own nonce and retention (``r`` is the default for
        the others; ``n`` only for a batch of one, so a client probing with one message
        can send a nonce the original also understands). The batch's size limits were
        enforced while it arrived (params).
        """
        queue = self.check_queue("publish", params.text("q"))
        raw_retention = params.text("r")
        # None: the queue policy's retention, else the default; the core decides it in
        # the commit, where it reads the queue's policy rule for the limits anyway.
        retention = clean_retention(raw_retention, 0) if raw_retention else None
        if params.batch is None:
            nonce = _nonce(request, params.text("n"))
            upload = _require_message(params)
            message = Outgoing(upload, retention, nonce, _expiry(params.text("ttl")))
            return _Publishing(queue, [message], upload.size, batch=False)
        parts = params.batch
        if not parts:
            raise MissingMessage("A batch needs at least one message.")
        shared_nonce = _nonce(request, params.text("n"))
        if shared_nonce and len(parts) > 1:
            raise InvalidInput(
                "A batch takes one nonce per message (X-ZOSCII-Nonce, a frame's n), not 'n'."
            )
        messages = []
        for number, part in enumerate(parts, 1):
            try:
                nonce = _nonce(request, part.options.get(_NONCE)) or shared_nonce
                raw_days = part.options.get(_RETENTION)
                days = clean_retention(raw_days, 0) if raw_days else retention
                expires_at = _expiry(part.options.get(_TTL, params.text("ttl")))
            except InvalidInput as exc:
                raise InvalidInput(f"Message {number} of the batch: {exc}") from None
            messages.append(Outgoing(part.upload, days, nonce, expires_at))
        return _Publishing(queue, messages, sum(p.upload.size for p in parts), batch=True)

    def _published(self, publishing: _Publishing, results: list[PublishResult]) -> Answer:
        """The reply to a committed publish. A batch's result lists the names given, in
        order, with null for a message whose nonce had been used (before, or by an
        earlier part)."""
        queue = publishing.queue
        if not publishing.batch:
            if results[0].duplicate:
                return envelope(message="Nonce already used.")
            self.watcher.notify(queue)
            self.metrics.published_messages(queue, 1, publishing.size)
            return envelope(message="Message published.")
        names = [result.name for result in results]
        published = sum(name is not None for name in names)
        if published:
            self.watcher.notify(queue)
        self.metrics.published_messages(queue, published, publishing.size)
        repeats = len(names) - published
        message = f"{published} message(s) published." + (
            f" {repeats} nonce(s) already used." if repeats else ""
        )
        reply = envelope(message=message, result=names)
        reply.headers["Accept-Post"] = BATCH_BODIES  # a client learns the framed body here
        return reply

    def fetch(self, request: Request, params: RequestParams) -> Answer:
        """The next message; with ``count`` a batch, with ``wait`` a long-poll.

        Long-poll reads the watcher's generation *before* looking, so a publish landing
        between "nothing there" and "wait" still wakes the request.
        """
        queue = clean_queue(params.text("q") or "")
        after = clean_pointer(_basename_check(params.text("after"), "after"))
        offset = whole_number(params.text("offset"), "offset")
        length = whole_number(params.text("length"), "length")
        count = whole_number(params.text("count"), "count")
        budget = whole_number(params.text("max_bytes"), "max_bytes")
        wait = min(whole_number(params.text("wait"), "wait"), self.settings.max_wait_seconds)
        if count and (offset or length):
            raise InvalidInput("A batch fetch (count) takes no offset or length.")
        if count > self.settings.max_batch_count:
            raise InvalidInput(f"count must be at most {self.settings.max_batch_count}.")
        deadline = time.monotonic() + wait
        while True:
            generation = self.watcher.generation(queue)
            if count:
                batch = self._batch(queue, after, count, budget)
                if batch is not None:
                    return batch
                empty = not after
            else:
                result = self.queues.fetch(queue, after)
                if result.file is not None:
                    return self._single(request, queue, result, offset, length)
                empty = result.queue_empty
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self.watcher.wait_counted(
                context_of(request.environ), queue, generation, remaining
            ):
                break
        return envelope(message="Queue is empty." if empty else "No new messages.")

    def _single(
        self, request: Request, queue: str, result: FetchResult, offset: int, length: int
    ) -> Answer:
        assert result.file is not None  # the caller's check
        response = message_response(
            request, result.name, result.file, result.size, offset=offset, length=length
        )
        self.metrics.fetched_messages(queue, 1, response.content_length or 0)
        return response

    def _batch(self, queue: str, after: str, count: int, budget: int) -> Answer | None:
        """Up to ``count`` messages within the byte budget; the first one always goes."""
        budget = min(budget or self.settings.max_batch_bytes, self.settings.max_batch_bytes)
        chosen: list[tuple[str, BinaryIO, int]] = []
        total = 0
        for name, file in self.queues.iter_after(queue, after, limit=count):
            size = os.fstat(file.fileno()).st_size
            if chosen and total + size > budget:
                file.close()
                break
            chosen.append((name, file, size))
            total += size
        if not chosen:
            return None
        self.metrics.fetched_messages(queue, len(chosen), total)
        return batch_response(chosen)

    # --- the store ---------------------------------------------------------------------
    def store_message(self, request: Request, params: RequestParams) -> Answer:
        retention = clean_retention(params.text("r"), self.settings.core.default_retention_days)
        nonce = _nonce(request, params.text("n"))
        unidentified = _flag(params.text("u"), "u")
        upload = _require_message(params)
        result = self.store.store(
            upload, retention_days=retention, nonce=nonce, unidentified=unidentified
        )
        if result.duplicate:
            return envelope(message="Nonce already used.")
        self.metrics.received_bytes.labels("store").inc(upload.size)
        return envelope(message="Message stored.", result=result.name)

    def retrieve(self, request: Request, params: RequestParams) -> Answer:
        raw = _basename_check(params.text("name"), "name")
        if not raw:
            raise InvalidInput("Missing name.")
        name, file, size = self.store.retrieve(raw)
        offset = whole_number(params.text("offset"), "offset")
        length = whole_number(params.text("length"), "length")
        response = message_response(request, name, file, size, offset=offset, length=length)
        self.metrics.sent_bytes.labels("retrieve").inc(response.content_length or 0)
        return response

    def scan(self, request: Request, params: RequestParams) -> Answer:
        return envelope(result=self.store.scan())

    def identify(self, request: Request, params: RequestParams) -> Answer:
        raw = params.utf8("names")
        if raw is None:
            raise InvalidInput("Missing names (a JSON list of store names).")
        try:
            names = json.loads(raw)
        except (ValueError, RecursionError):
            raise InvalidInput("Parameter 'names' is not valid JSON.") from None
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise InvalidInput("Parameter 'names' must be a JSON list of strings.")
        if len(names) > MAX_IDENTIFY_NAMES:
            raise InvalidInput(f"At most {MAX_IDENTIFY_NAMES} names per identify.")
        parsed = [parse_name(_basename_check(n, "names")) for n in names]
        renamed = self.store.identify(parsed)
        return envelope(message="Returned messages identified.", result=renamed)


BATCH_BODIES = f"multipart/form-data, {FRAMED_BATCH}"


def _nonce(request: Request, raw: str | None) -> str | None:
    """The clean nonce, kept to its client's own requests when access control is on
    (the request's context): a partner cannot use up another's nonces."""
    return scoped(clean_nonce(raw), context_of(request.environ).client)


def _expiry(raw: str | None) -> float | None:
    """``ttl`` seconds from now as a Unix time; absent or 0: no expiry (PHPMQ's 0)."""
    seconds = whole_number(raw, "ttl")
    return time.time() + seconds if seconds else None


def _require_message(params: RequestParams) -> Upload:
    if params.upload is None:
        raise MissingMessage("Missing message (msg).")
    return params.upload


def _basename_check(raw: str | None, name: str) -> str:
    """The original reduces these to a basename; here a path is an error, not a guess."""
    if raw and ("/" in raw or "\\" in raw or "\x00" in raw):
        raise InvalidInput(f"Parameter '{name}' must be a file name, not a path.")
    return raw or ""


def _flag(raw: str | None, name: str) -> bool:
    if raw in (None, "", "0"):
        return False
    if raw == "1":
        return True
    raise InvalidInput(f"Parameter '{name}' must be 0 or 1.")
