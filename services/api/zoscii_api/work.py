"""Work queues over HTTP: consume, ack, requeue, deadletter, extend (consumer groups).

A queue can be read by pointer (fetch) and by consumer groups at once; see
``zosciimq.core.groups`` for the semantics. Here only the parameters and the replies:

* ``consume``: q, group, count (1..max batch), lease (seconds), wait (long-poll),
  consumer (a name for logs and stats). One message: the binary reply with
  ``X-ZOSCII-Receipt``, ``X-ZOSCII-Deliveries``, ``X-ZOSCII-Lease-Until`` and, with a
  TTL, ``X-ZOSCII-TTL``; with ``count``, a ``multipart/mixed`` batch whose parts carry
  the same headers. Nothing to deliver: the envelope, 200.
* ``ack``, ``requeue`` (delay, ttl), ``deadletter``: ``receipt`` (one) or ``receipts``
  (a JSON list). A ``receipt`` that no longer holds its message: 409; ``receipts``
  (even a list of one): 200 with each one's outcome in ``result``. A retry of a
  settlement that succeeded (its reply lost) answers as the first one did.
* ``extend``: receipt, lease: more time for long work.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from werkzeug.wrappers import Request

from zoscii_api.context import context_of
from zoscii_api.metrics import ApiMetrics
from zoscii_api.params import RequestParams, whole_number
from zoscii_api.responses import Answer, batch_response, envelope, message_response
from zoscii_api.settings import ApiSettings
from zoscii_api.waiting import QueueWatcher
from zosciimq.core.groups import ConsumerGroups, Delivery, Outcome, clean_group
from zosciimq.core.names import clean_queue
from zosciimq.errors import Fenced, InvalidInput
from zosciimq.protocol import delivery_headers

MAX_RECEIPTS = 1000


@dataclass
class WorkActions:
    settings: ApiSettings
    groups: ConsumerGroups
    metrics: ApiMetrics
    watcher: QueueWatcher

    def consume(self, request: Request, params: RequestParams) -> Answer:
        queue, group = _queue_and_group(params)
        count = _number(params.text("count"), "count") or 0
        if count > self.settings.max_batch_count:
            raise InvalidInput(f"count must be at most {self.settings.max_batch_count}.")
        lease = _number(params.text("lease"), "lease") or self.settings.lease_seconds
        if not 0 < lease <= self.settings.max_lease_seconds:
            raise InvalidInput(f"lease must be 1 to {self.settings.max_lease_seconds} seconds.")
        wait = min(_number(params.text("wait"), "wait"), self.settings.max_wait_seconds)
        consumer = params.text("consumer") or "-"
        deadline = time.monotonic() + wait
        while True:
            generation = self.watcher.generation(queue)
            got = self.groups.consume(
                queue, group, count=count or 1, lease=lease, consumer=consumer
            )
            if got:
                self.metrics.fetched.labels(queue).inc(len(got))
                return self._reply(request, got, batch=bool(count))
            left = deadline - time.monotonic()
            # Woken by a publish, or each second: a lease that ran out or a requeue's
            # delay makes a message deliverable without any publish.
            if left <= 0 or not self.watcher.wait_counted(
                context_of(request.environ), queue, generation, min(left, 1.0)
            ):
                return envelope(message="No messages for this group.")

    def _reply(self, request: Request, got: list[Delivery], *, batch: bool) -> Answer:
        if not batch:
            (delivery,) = got
            response = message_response(
                request, delivery.name, delivery.file, delivery.size, offset=0, length=0
            )
            response.headers.update(_headers(delivery))
            return response
        return batch_response(
            [(d.name, d.file, d.size) for d in got], part_headers=[_headers(d) for d in got]
        )

    def ack(self, request: Request, params: RequestParams) -> Answer:
        queue, group = _queue_and_group(params)
        receipts, many = _receipts(params)
        return _outcomes(self.groups.ack(queue, group, receipts), "acked", many=many)

    def requeue(self, request: Request, params: RequestParams) -> Answer:
        queue, group = _queue_and_group(params)
        delay = _number(params.text("delay"), "delay")
        ttl = params.text("ttl")
        receipts, many = _receipts(params)
        outcomes = self.groups.requeue(
            queue,
            group,
            receipts,
            delay=delay,
            ttl=None if ttl in (None, "") else _number(ttl, "ttl"),
        )
        if any(o.result == "ok" for o in outcomes):
            self.watcher.notify(queue)
        return _outcomes(outcomes, "requeued", many=many)

    def deadletter(self, request: Request, params: RequestParams) -> Answer:
        queue, group = _queue_and_group(params)
        receipts, many = _receipts(params)
        outcomes = self.groups.dead_letter(queue, group, receipts)
        return _outcomes(outcomes, "dead-lettered", many=many)

    def extend(self, request: Request, params: RequestParams) -> Answer:
        queue, group = _queue_and_group(params)
        receipt = _receipts(params)[0][0]
        lease = _number(params.text("lease"), "lease") or self.settings.lease_seconds
        if not 0 < lease <= self.settings.max_lease_seconds:
            raise InvalidInput(f"lease must be 1 to {self.settings.max_lease_seconds} seconds.")
        until = self.groups.extend(queue, group, receipt, lease)
        return envelope(message="Lease extended.", result={"lease_until": until})


def _queue_and_group(params: RequestParams) -> tuple[str, str]:
    return clean_queue(params.text("q") or ""), clean_group(params.text("group"))


def _receipts(params: RequestParams) -> tuple[list[str], bool]:
    """The receipts, and whether they came as a list (answered with outcomes, not 409)."""
    one, many = params.text("receipt"), params.text("receipts")
    if one and many:
        raise InvalidInput("Give 'receipt' or 'receipts', not both.")
    if one:
        return [one], False
    if not many:
        raise InvalidInput("Missing receipt (receipt, or receipts as a JSON list).")
    try:
        receipts = json.loads(many)
    except (ValueError, RecursionError):  # RecursionError: a list nested 100,000 deep
        raise InvalidInput("Parameter 'receipts' is not valid JSON.") from None
    if not isinstance(receipts, list) or not all(isinstance(r, str) for r in receipts):
        raise InvalidInput("Parameter 'receipts' must be a JSON list of strings.")
    if not receipts or len(receipts) > MAX_RECEIPTS:
        raise InvalidInput(f"Give 1 to {MAX_RECEIPTS} receipts.")
    return receipts, True


def _outcomes(outcomes: list[Outcome], done: str, *, many: bool) -> Answer:
    if not many and outcomes[0].result != "ok":
        raise Fenced(
            f"Receipt does not hold {outcomes[0].name or 'its message'} any more "
            f"({outcomes[0].result}: acked, requeued, dead-lettered or leased again)."
        )
    ok = sum(o.result == "ok" for o in outcomes)
    return envelope(
        message=f"{ok} of {len(outcomes)} {done}.",
        result=[{"receipt": o.receipt, "result": o.result} for o in outcomes],
    )


def _headers(delivery: Delivery) -> dict[str, str]:
    return delivery_headers(
        delivery.receipt, delivery.deliveries, delivery.lease_until, delivery.ttl_left
    )


def _number(raw: str | None, name: str) -> int:
    """Seconds and counts of the work actions: at most 9 digits."""
    return whole_number(raw, name, max_digits=9)
