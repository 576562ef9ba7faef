"""Long-poll fetch and consume (``wait=``), answered from the event loop.

A fetch whose pointer is the follower's cursor waits at once (no read); any other reads
the disk first (``catch_up``), as the api would, and waits only when nothing is there.
Its answer is the api's: the next message (whole, or ``offset``/``length`` of it), or
with ``count`` a ``multipart/mixed`` batch, or after ``wait`` seconds the envelope "No
new messages." (200). Readers woken by the same round after the same pointer share one
encoded body.

A consume waits in its group's line (``GroupWaiter``, first come first served): each
round, and each second (leases run out, requeue delays end, without a publish), the
first waiter of each group leases in a thread, then the next, until one gets nothing.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import deque
from dataclasses import dataclass
from typing import Any, cast

from zoscii_live.follow import Follower, Hub, Item, Reader, first_after, read_items
from zoscii_live.http import Connection
from zoscii_live.metrics import LiveMetrics
from zoscii_live.replies import (
    envelope,
    message_headers,
    multipart,
    partial_headers,
    prefix_of,
)
from zosciimq.core.groups import ConsumerGroups, Delivery
from zosciimq.errors import RangeNotSatisfiable, ZosciiError
from zosciimq.protocol import delivery_headers

log = logging.getLogger(__name__)

JSON = "application/json"
MAX_ANSWERS = 1024  # answers a follower keeps for readers behind its cursor


@dataclass(frozen=True, slots=True)
class FetchAsk:
    """What a fetch asks for, beyond its pointer."""

    count: int  # 0: one message as binary; else a batch of up to count
    budget: int  # a batch's bytes (the first message always goes)
    offset: int
    length: int


class PointerWaiter(Reader):
    """A long-poll fetch parked on its queue's follower."""

    __slots__ = ("after", "ask", "conn", "fetcher", "follower", "timer")

    def __init__(
        self, fetcher: Fetcher, follower: Follower, conn: Connection, after: str, ask: FetchAsk
    ) -> None:
        self.fetcher = fetcher
        self.follower = follower
        self.conn = conn
        self.after = after
        self.ask = ask
        self.timer: asyncio.TimerHandle | None = None

    def deliver(self, items: list[Item], names: list[str], cache: dict[Any, Any]) -> None:
        start = first_after(names, self.after)
        if start == len(names):
            return
        self.leave()
        key = (start, self.ask)
        answer = cache.get(key)
        if answer is None:
            answer = self.fetcher.answer(self.follower.queue, items[start:], self.ask)
            if answer is not LARGE:  # the head's common part built once for all
                status, headers, body, count = answer
                answer = (prefix_of(status, headers), body, count)
            cache[key] = answer
        if answer is LARGE:  # over the inline limit: this reader gets it from the disk
            self.fetcher.hub.spawn(
                self.fetcher.serve(self.follower, self.conn, self.after, self.ask, 0.0)
            )
            return
        prefix, body, count = cast(tuple[bytes, bytes, int], answer)
        self.sent(cache, "longpoll", count, len(body))
        self.conn.kind = "http"
        self.conn.respond_prefixed(prefix, body)

    def fail(self, error: Exception) -> None:
        self.leave()
        self.conn.kind = "http"
        self.fetcher.error(self.conn, error)

    def expire(self) -> None:
        self.timer = None
        self.leave()
        empty = not self.after or self.follower.cursor == ""
        self.conn.kind = "http"
        self.conn.respond(
            200,
            {"Content-Type": JSON},
            envelope(message="Queue is empty." if empty else "No new messages."),
        )

    def leave(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.conn.on_close = None
        self.fetcher.hub.remove(self.follower, self)


LARGE = object()  # an answer that cannot be built from memory


class Fetcher:
    """``fetch`` with ``wait``: the immediate answer, the wait, the woken answer."""

    def __init__(self, hub: Hub, metrics: LiveMetrics, max_batch_bytes: int) -> None:
        self.hub = hub
        self.metrics = metrics
        self.max_batch_bytes = max_batch_bytes

    def start(self, conn: Connection, queue: str, after: str, ask: FetchAsk, wait: float) -> None:
        follower = self.hub.follower(queue)
        if not self._from_memory(conn, follower, after, ask, wait):
            self.hub.spawn(self.serve(follower, conn, after, ask, wait))

    def _from_memory(
        self, conn: Connection, follower: Follower, after: str, ask: FetchAsk, wait: float
    ) -> bool:
        """Parked (at the cursor) or answered (from the follower's recent messages)
        without a read; False when the disk must be read."""
        if follower.cursor is None:
            return False
        if after == follower.cursor:
            if wait <= 0:
                return False
            self._park(follower, conn, after, ask, wait)
            return True
        key = (after, ask)
        answer = follower.answers.get(key)
        if answer is None:
            items = follower.recent.after(after, ask.count or 1)
            if not items:
                return False
            built = self.answer(follower.queue, items, ask)
            if built is LARGE:
                return False
            status, headers, body, count = built
            answer = (prefix_of(status, headers), body, count)
            if len(follower.answers) >= MAX_ANSWERS:
                follower.answers.clear()
            follower.answers[key] = answer
        prefix, body, count = answer
        self.metrics.count(follower.queue, count, len(body), "longpoll")
        conn.respond_prefixed(prefix, body)
        return True

    async def serve(
        self, follower: Follower, conn: Connection, after: str, ask: FetchAsk, wait: float
    ) -> None:
        """From the disk until nothing is after ``after``, then wait (if ``wait``)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        try:
            await self.hub.warm(follower)
            while not conn.closed:
                if self._from_memory(conn, follower, after, ask, deadline - loop.time()):
                    return
                before = follower.rounds
                answered = await self._from_disk(conn, follower.queue, after, ask)
                if answered or conn.closed:
                    return
                if follower.rounds == before:  # no round moved on while we read
                    break
            left = deadline - loop.time()
            if left > 0 and not conn.closed:
                self._park(follower, conn, after, ask, left)
                return
            empty = not after or follower.cursor == ""
            conn.respond(
                200,
                {"Content-Type": JSON},
                envelope(message="Queue is empty." if empty else "No new messages."),
            )
        except Exception as exc:
            self.error(conn, exc)

    def _park(
        self, follower: Follower, conn: Connection, after: str, ask: FetchAsk, wait: float
    ) -> None:
        waiter = PointerWaiter(self, follower, conn, after, ask)
        self.hub.add(follower, waiter)
        waiter.timer = conn.loop.call_later(wait, waiter.expire)
        conn.on_close = waiter.leave
        conn.kind = "longpoll"
        conn.keep_only_the_answers_part()  # the waiter has its pointer and ask

    async def _from_disk(self, conn: Connection, queue: str, after: str, ask: FetchAsk) -> bool:
        """Answer from what is on disk now; False when nothing is after ``after``."""
        limit = ask.count or 1
        items = await self.hub.run(
            read_items, self.hub.queues, queue, after, limit, self.hub.settings.max_inline_bytes
        )
        if not items:
            return False
        answer = self.answer(queue, items, ask)
        if answer is LARGE:
            await self._send_large(conn, queue, items[0].name, after, ask)
            return True
        status, headers, body, count = answer
        self.metrics.count(queue, count, len(body), "longpoll")
        conn.respond(status, dict(headers), body)
        return True

    def answer(self, queue: str, items: list[Item], ask: FetchAsk) -> Any:
        """(status, headers, body, messages) for ``items`` (after the reader's pointer),
        or LARGE when a message it needs is not in memory."""
        if not ask.count:
            item = items[0]
            if item.data is None:
                return LARGE
            if ask.offset or ask.length:
                if ask.offset >= item.size:
                    raise RangeNotSatisfiable(
                        f"Offset {ask.offset} is at or past the end ({item.size} bytes).",
                        size=item.size,
                    )
                stop = (
                    item.size
                    if not ask.length or ask.offset + ask.length > item.size
                    else ask.offset + ask.length
                )
                return (
                    200,
                    partial_headers(item.name, ask.offset, item.size),
                    item.data[ask.offset : stop],
                    1,
                )
            return 200, message_headers(item.name), item.data, 1
        budget = min(ask.budget or self.max_batch_bytes, self.max_batch_bytes)
        chosen: list[tuple[str, bytes]] = []
        total = 0
        for item in items[: ask.count]:
            if chosen and total + item.size > budget:
                break
            if item.data is None:
                if not chosen:
                    return LARGE
                break  # the large one starts the next batch
            chosen.append((item.name, item.data))
            total += item.size
        headers, body = multipart(chosen)
        return 200, headers, body, len(chosen)

    async def _send_large(
        self, conn: Connection, queue: str, name: str, after: str, ask: FetchAsk
    ) -> None:
        """A message over the inline limit, read in pieces as the reader takes them."""
        found = await self.hub.run(self.hub.queues.fetch, queue, after)
        if found.file is None:  # deleted meanwhile: the api would answer the next one
            conn.respond(200, {"Content-Type": JSON}, envelope(message="No new messages."))
            return
        file, size = found.file, found.size
        try:
            start, stop = 0, size
            if ask.count:
                headers, prefix, suffix = _one_part(found.name, size)
                length = len(prefix) + size + len(suffix)
            else:
                prefix = suffix = b""
                if ask.offset or ask.length:
                    if ask.offset >= size:
                        raise RangeNotSatisfiable(
                            f"Offset {ask.offset} is at or past the end ({size} bytes).",
                            size=size,
                        )
                    start = ask.offset
                    if ask.length and ask.offset + ask.length < size:
                        stop = ask.offset + ask.length
                    headers = partial_headers(found.name, start, size)
                else:
                    headers = message_headers(found.name)
                length = stop - start
            self.metrics.count(queue, 1, stop - start, "longpoll")
            await conn.send_body(headers, length, prefix, file, start, stop, suffix, self.hub)
        finally:
            file.close()

    def error(self, conn: Connection, exc: Exception) -> None:
        if isinstance(exc, ZosciiError):
            conn.respond(
                exc.status, {"Content-Type": JSON, **exc.headers()}, envelope(error=str(exc))
            )
            return
        log.error("fetch failed: %s", exc, exc_info=not isinstance(exc, OSError))
        self.metrics.errors.labels("fetch").inc()
        conn.respond(500, {"Content-Type": JSON}, envelope(error="Internal server error."))


def _one_part(name: str, size: int) -> tuple[dict[str, str], bytes, bytes]:
    """A batch of one large message: its headers, the bytes before and after it."""
    headers, body = multipart([(name, b"")])
    head_end = body.index(b"\r\n\r\n") + 4
    return (
        headers,
        body[:head_end].replace(b"Content-Length: 0", b"Content-Length: %d" % size),
        body[head_end:],
    )


# --- consumer groups -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConsumeAsk:
    group: str
    count: int  # 0: one message as binary
    lease: int
    consumer: str


class GroupWaiter:
    __slots__ = ("ask", "conn", "follower", "timer", "work")

    def __init__(
        self, work: GroupWork, follower: Follower, conn: Connection, ask: ConsumeAsk
    ) -> None:
        self.work = work
        self.follower = follower
        self.conn = conn
        self.ask = ask
        self.timer: asyncio.TimerHandle | None = None

    def leave(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.conn.on_close = None
        line = self.follower.groups.get(self.ask.group)
        if line is not None:
            try:
                line.remove(self)
            except ValueError:
                pass
            if not line:
                del self.follower.groups[self.ask.group]

    def expire(self) -> None:
        self.timer = None
        self.leave()
        self.conn.kind = "http"
        self.conn.respond(
            200, {"Content-Type": JSON}, envelope(message="No messages for this group.")
        )

    def fail(self, error: Exception) -> None:
        self.leave()
        self.conn.kind = "http"
        self.work.fetcher.error(self.conn, error)


class GroupWork:
    """``consume`` with ``wait``."""

    def __init__(self, hub: Hub, groups: ConsumerGroups, fetcher: Fetcher) -> None:
        self.hub = hub
        self.groups = groups
        self.fetcher = fetcher
        hub.group_server = self.serve

    async def start(self, conn: Connection, queue: str, ask: ConsumeAsk, wait: float) -> None:
        follower = self.hub.follower(queue)
        try:
            rounds = follower.rounds
            if await self._lease_and_answer(conn, queue, ask):
                return
            if follower.rounds != rounds and await self._lease_and_answer(conn, queue, ask):
                return  # a round ran while we looked: look once more before waiting
        except Exception as exc:
            self.fetcher.error(conn, exc)
            return
        if wait <= 0 or conn.closed:
            conn.respond(
                200, {"Content-Type": JSON}, envelope(message="No messages for this group.")
            )
            return
        waiter = GroupWaiter(self, follower, conn, ask)
        follower.groups.setdefault(ask.group, deque()).append(waiter)
        waiter.timer = conn.loop.call_later(wait, waiter.expire)
        conn.on_close = waiter.leave
        conn.kind = "consume"
        conn.keep_only_the_answers_part()  # the waiter has its ask
        if follower.cursor is None:
            self.hub.spawn(self._warm(follower))

    async def _warm(self, follower: Follower) -> None:
        try:
            await self.hub.warm(follower)
        except Exception as exc:
            for line in list(follower.groups.values()):
                for waiter in list(line):
                    waiter.fail(exc)

    async def serve(self, follower: Follower) -> None:
        """Each group's waiters in turn, until one gets nothing (a round, or the tick)."""
        for group, line in list(follower.groups.items()):
            while line:
                waiter = line[0]
                try:
                    answered = await self._lease_and_answer(
                        waiter.conn, follower.queue, waiter.ask, waiter
                    )
                except Exception as exc:
                    waiter.fail(exc)
                    continue
                if not answered:
                    break
            if not line:
                follower.groups.pop(group, None)

    async def _lease_and_answer(
        self, conn: Connection, queue: str, ask: ConsumeAsk, waiter: GroupWaiter | None = None
    ) -> bool:
        got = await self.hub.run(self._lease, queue, ask)
        if not got:
            return False
        if waiter is not None:
            waiter.leave()
            conn.kind = "http"
        if conn.closed:  # gone while we leased: the messages go to the next consumer now
            await self.hub.run(self._release, queue, ask.group, [d for d, _ in got])
            return True
        self.fetcher.metrics.count(queue, len(got), sum(d.size for d, _ in got), "consume")
        if not ask.count:
            ((delivery, data),) = got
            if data is None:
                await self._send_large(conn, delivery)
                return True
            conn.respond(200, message_headers(delivery.name, _receipt_headers(delivery)), data)
            return True
        headers, body = multipart(
            [(d.name, data or b"") for d, data in got], [_receipt_headers(d) for d, _ in got]
        )
        conn.respond(200, headers, body)
        return True

    def _lease(self, queue: str, ask: ConsumeAsk) -> list[tuple[Delivery, bytes | None]]:
        """Lease and read (thread). A batch is read whole (as the api sends it); a single
        message over the inline limit is sent in pieces by ``_send_large``."""
        got = self.groups.consume(
            queue, ask.group, count=ask.count or 1, lease=ask.lease, consumer=ask.consumer
        )
        inline = self.hub.settings.max_inline_bytes
        result: list[tuple[Delivery, bytes | None]] = []
        for delivery in got:
            if not ask.count and delivery.size > inline:
                result.append((delivery, None))  # its file stays open for _send_large
                continue
            with delivery.file:
                result.append((delivery, os.pread(delivery.file.fileno(), delivery.size, 0)))
        return result

    def _release(self, queue: str, group: str, deliveries: list[Delivery]) -> None:
        for delivery in deliveries:
            if not delivery.file.closed:
                delivery.file.close()
            try:
                self.groups.extend(queue, group, delivery.receipt, 0)
            except (ZosciiError, OSError):
                pass  # finished or leased again meanwhile

    async def _send_large(self, conn: Connection, delivery: Delivery) -> None:
        try:
            headers = message_headers(delivery.name, _receipt_headers(delivery))
            await conn.send_body(
                headers, delivery.size, b"", delivery.file, 0, delivery.size, b"", self.hub
            )
        finally:
            delivery.file.close()


def _receipt_headers(delivery: Delivery) -> dict[str, str]:
    return delivery_headers(
        delivery.receipt, delivery.deliveries, delivery.lease_until, delivery.ttl_left
    )
