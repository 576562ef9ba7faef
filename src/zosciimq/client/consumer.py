"""Reading a queue message by message, with the pointer persisted between runs.

The pointer of a message is saved once the consumer is done with it, which is when it
asks for the next one, or leaves the ``with`` block without an exception. A consumer
that crashes while handling a message gets that message again after a restart
(at-least-once at the consumer, exactly-once on the wire); one that stops cleanly
resumes with the next message::

    with client.consume("orders", FilePointerStore("orders.pointer")) as consumer:
        for message in consumer:
            handle(message)
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from zosciimq.client.pointers import MemoryPointerStore, PointerStore

if TYPE_CHECKING:
    from zosciimq.client.client import Message, ZosciiClient


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
    ) -> None:
        """``follow``: poll for new messages instead of stopping at the end, until ``stop``."""
        self.client = client
        self.queue = queue
        self.store = pointer if pointer is not None else MemoryPointerStore()
        self.follow = follow
        self.poll_interval = poll_interval
        self.stop = stop or threading.Event()
        self.pointer = self.store.load()  # last committed
        self._delivered: str | None = None  # handed out, not yet committed

    def __iter__(self) -> Iterator[Message]:
        while not self.stop.is_set():
            self.commit()
            message = self.client.fetch(self.queue, self.pointer)
            if message is None:
                if not self.follow:
                    return
                self.stop.wait(self.poll_interval)
                continue
            self._delivered = message.name
            yield message

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
