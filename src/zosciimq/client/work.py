"""Work queues (consumer groups) on the client side: leased messages and outcomes.

A pointer consumer (consumer.py) reads a queue alone. The consumers of a *group* share
it: ``ZosciiClient.lease`` hands each message to one of them for ``lease`` seconds,
with a receipt; the holder then acks it (done), requeues it (try again later),
dead-letters it (never going to work), or extends the lease (long work). A receipt
whose lease ran out and went to another consumer is refused: ``Fenced`` (HTTP 409)
for one receipt, an ``Outcome`` of ``"fenced"`` in a list. See ``worker.py`` for the
loop that does all of this for a handler function.

Dead letters of a group are the queue ``<queue>--<group>--dead``: read it like any
queue (``dead_letter_queue``), and replay it with ``zoscii dead replay``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO, Literal

from zosciimq.client.errors import NotZosciiReply
from zosciimq.client.fetch_batch import BatchMessage
from zosciimq.core import groups
from zosciimq.errors import InvalidInput
from zosciimq.protocol import DELIVERIES, LEASE_UNTIL, RECEIPT, TTL

OutcomeResult = Literal["ok", "fenced", "unknown"]
_RESULTS = ("ok", "fenced", "unknown")


class LeasedMessage:
    """One message leased from a consumer group.

    ``receipt`` is what ack/requeue/dead_letter/extend_lease take (or give the message
    itself). ``deliveries``: 1 the first time, more after a requeue or a lease that ran
    out. ``lease_until``: Unix time the lease ends unless extended. ``ttl``: seconds
    the message had left to live when it was delivered (None: no TTL). The bytes are
    in memory, or in an unnamed temporary file when the batch was large (``spooled``):
    ``data`` reads them whole, ``open()`` gives a file object from the start.
    ``close()`` (or ``with``) frees the temporary file.
    """

    __slots__ = (
        "_body",
        "deliveries",
        "group",
        "lease_until",
        "name",
        "queue",
        "receipt",
        "size",
        "ttl",
    )

    def __init__(
        self,
        *,
        queue: str,
        group: str,
        body: BatchMessage,
        receipt: str,
        deliveries: int,
        lease_until: float,
        ttl: float | None,
    ) -> None:
        self.queue, self.group, self._body = queue, group, body
        self.name, self.size = body.name, body.size
        self.receipt, self.deliveries = receipt, deliveries
        self.lease_until, self.ttl = lease_until, ttl

    @property
    def data(self) -> bytes:
        return self._body.data

    @property
    def spooled(self) -> bool:
        return self._body.spooled

    def open(self) -> BinaryIO:
        return self._body.open()

    def close(self) -> None:
        self._body.close()

    def __enter__(self) -> LeasedMessage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"LeasedMessage({self.queue}/{self.group} {self.name!r}, {self.size} bytes, "
            f"delivery {self.deliveries})"
        )


@dataclass(frozen=True)
class Outcome:
    """What became of one receipt (the server's Outcome schema): ``ok``; ``fenced``,
    its message was requeued or leased again to someone else; ``unknown``, it was
    finished already (acked or dead-lettered) or never delivered."""

    receipt: str
    result: OutcomeResult

    @property
    def ok(self) -> bool:
        return self.result == "ok"


Receipt = str | LeasedMessage


def receipt_of(item: Receipt) -> str:
    receipt = item.receipt if isinstance(item, LeasedMessage) else item
    if not isinstance(receipt, str) or ":" not in receipt:
        raise ValueError(f"not a receipt: {str(receipt)[:80]!r}")
    return receipt


def receipts_of(items: Iterable[Receipt]) -> list[str]:
    receipts = [receipt_of(item) for item in items]
    if not receipts:
        raise ValueError("give at least one receipt")
    return receipts


def dead_letter_queue(queue: str, group: str) -> str:
    """The queue where ``group``'s dead letters of ``queue`` go (the server's rule);
    ``ValueError`` when the name would be too long for a queue."""
    try:
        return groups.dead_letter_queue(queue, group)
    except InvalidInput as exc:
        raise ValueError(str(exc)) from None


def leased(queue: str, group: str, body: BatchMessage, headers: Mapping[str, str]) -> LeasedMessage:
    """A message of a consume reply, from its (or its part's) headers."""
    receipt = headers.get(RECEIPT, "")
    if not receipt.startswith(f"{body.name}:"):
        raise NotZosciiReply(f"leased message {body.name} without a receipt for it")
    ttl = headers.get(TTL)
    return LeasedMessage(
        queue=queue,
        group=group,
        body=body,
        receipt=receipt,
        deliveries=_number(headers, DELIVERIES, int),
        lease_until=_number(headers, LEASE_UNTIL, float),
        ttl=None if ttl is None else _number(headers, TTL, float),
    )


def outcomes(result: Any, receipts: list[str]) -> list[Outcome]:
    """The envelope's ``result`` of ack/requeue/deadletter: one outcome per receipt, in
    the order they were sent."""
    if not isinstance(result, list) or len(result) != len(receipts):
        raise NotZosciiReply(f"expected {len(receipts)} outcome(s), got {str(result)[:80]!r}")
    out = []
    for sent, item in zip(receipts, result, strict=True):
        if (
            not isinstance(item, dict)
            or item.get("receipt") != sent
            or item.get("result") not in _RESULTS
        ):
            raise NotZosciiReply(f"not an outcome for {sent}: {str(item)[:80]!r}")
        out.append(Outcome(sent, item["result"]))
    return out


def _number(headers: Mapping[str, str], header: str, kind: type[int] | type[float]) -> Any:
    value = headers.get(header)
    try:
        return kind(str(value).strip())
    except ValueError:
        raise NotZosciiReply(f"header {header}: {str(value)[:40]!r} is not a number") from None
