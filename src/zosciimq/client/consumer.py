"""Reading a queue message by message, with the pointer persisted between runs.

The pointer of a message is saved once the consumer is done with it, which is when it
asks for the next one, or leaves the ``with`` block without an exception. A consumer
that crashes while handling a message gets that message again after a restart
(at-least-once at the consumer, exactly-once on the wire); one that stops cleanly
resumes with the next message::

    with client.consume("orders", FilePointerStore("orders.pointer")) as consumer:
        for message in consumer:
            handle(message)

By default the consumer reads in batches (``fetch`` with ``count``: one request for up to
``batch_count`` messages) and, when following, long-polls (``wait``: the server holds the
request until a message arrives, so it is delivered at once instead of at the next poll).
Both are used only where the server has them; against the original implementation the
consumer falls back to one fetch per message and polling every ``poll_interval``. Batching
changes nothing about the pointer: it is still saved after every message, and messages
of a batch that were not handed out are simply fetched again next time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from zosciimq.client.fetch_batch import BatchMessage
from zosciimq.client.pointers import MemoryPointerStore, PointerStore

if TYPE_CHECKING:
    from zosciimq.client.client import Message, ZosciiClient

DEFAULT_BATCH_COUNT = 100
DEFAULT_WAIT_SECONDS = 20.0


class Consumer:
    def __init__(
        self,
        client: ZosciiClient,
        queue: str,
        pointer: PointerStore | None = None,
        *,
        follow: bool = False,
        poll_interval: float = 1.0,
        stop: threading.Event | None = None,
        batch: bool = True,
        batch_count: int = DEFAULT_BATCH_COUNT,
        batch_bytes: int | None = None,
        long_poll: bool = True,
        wait_seconds: float = DEFAULT_WAIT_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``follow``: wait for new messages instead of stopping at the end, until ``stop``.

        ``batch``/``batch_count``/``batch_bytes``: fetch up to that many messages (and
        bytes, the server's budget when None) per request. ``long_poll``/``wait_seconds``:
        when following, let the server hold an empty fetch that long; a ``stop`` set
        meanwhile takes effect when that request returns. Empty fetches are never closer
        together than ``poll_interval``, so a server that does not hold them (the
        original, or one at its limit of waiting requests) is polled at that pace.
        """
        if batch_count < 1:
            raise ValueError("batch_count must be at least 1")
        self.client = client
        self.queue = queue
        self.store = pointer if pointer is not None else MemoryPointerStore()
        self.follow = follow
        self.poll_interval = poll_interval
        self.stop = stop or threading.Event()
        self.batch_count = batch_count if batch else 1
        self.batch_bytes = batch_bytes
        self.wait_seconds = wait_seconds if long_poll and follow else 0.0
        self.monotonic = monotonic
        self.pointer = self.store.load()  # last committed
        self._delivered: str | None = None  # handed out, not yet committed

    def __iter__(self) -> Iterator[Message]:
        while not self.stop.is_set():
            self.commit()
            started = self.monotonic()
            parts: Sequence[Message | BatchMessage] = self._fetch()
            if not parts:
                if not self.follow:
                    return
                self.stop.wait(max(0.0, self.poll_interval - (self.monotonic() - started)))
                continue
            try:
                for number, part in enumerate(parts):
                    if number:
                        if self.stop.is_set():
                            return
                        self.commit()
                    message = _in_memory(part)  # a spooled part is read when its turn comes
                    self._delivered = message.name
                    yield message
            finally:
                for part in parts:
                    if isinstance(part, BatchMessage):
                        part.close()

    def _fetch(self) -> list[Message] | list[BatchMessage]:
        """The next messages after the pointer: a batch, or one, or none."""
        wait = self.wait_seconds or None
        if self.batch_count == 1:
            message = self.client.fetch(self.queue, self.pointer, wait=wait)
            return [] if message is None else [message]
        return self.client.fetch_batch(
            self.queue, self.pointer, self.batch_count, self.batch_bytes, wait
        )

    def commit(self) -> None:
        """Save the pointer of the message last handed out (done with it)."""
        if self._delivered is not None and self._delivered != self.pointer:
            self.store.save(self._delivered)
            self.pointer = self._delivered
        self._delivered = None

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        if exc_type is None:
            self.commit()


def _in_memory(part: Message | BatchMessage) -> Message:
    if not isinstance(part, BatchMessage):
        return part
    from zosciimq.client.client import Message

    with part:
        return Message(part.name, part.data, 0, part.size)
