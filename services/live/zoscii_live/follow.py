"""Following queues: one follower per queue read here, one look per change, every reader
served from it.

A ``Follower`` knows its queue's ``cursor``: the highest visible name it has read. The
queue's index changing (``zosciimq.core.watch``: inotify, or a stat of the index every
poll interval) starts a *round*: the names after the cursor are read once, in a thread
(messages up to the inline limit with their bytes), and then, on the event loop,
delivered to every reader waiting on the queue: long-poll fetches (``PointerWaiter``),
streams (``Subscriber``) and consumer-group consumes (``GroupWaiter``, which lease their
own messages, in turn). A round that is running when the next change arrives runs again
afterwards, so changes coalesce: under load one round carries many messages.

Why nothing is missed and nothing is delivered twice:

* Only the visible (committed) part of the index is read (``QueueStore``), so nothing is
  delivered before its commit.
* The cursor moves, and readers receive what a round read, on the event loop only. A
  reader whose pointer equals the cursor is registered at once, with no read: anything
  committed later changes the index, which starts a round after the registration.
* A reader behind the cursor is first served from disk by its own reads (``catch_up``),
  then registered once a read finds nothing more *and* no round moved the cursor during
  that read (else it reads again).
* A reader never receives a name at or below its own pointer: deliveries are filtered
  by name, per reader (``bisect``), so a pointer ahead of the cursor is fine too.

The follower keeps the last messages its rounds read (``Recent``: up to
``RECENT_MESSAGES`` and ``RECENT_BYTES``). A reader a little behind the cursor, the
usual case when messages come faster than a reader asks again (a woken long-poll
asking for the next batch, streams reconnecting after a restart), is answered from
there, on the event loop, without a read: every visible name between the cache's
floor and the cursor is in it, in order, as the rounds read them.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import os
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from zoscii_live.metrics import LiveMetrics
from zoscii_live.settings import LiveSettings
from zosciimq.core import QueueStore
from zosciimq.core.watch import Changes, Unavailable, local_notifications
from zosciimq.errors import QueueNotFound

log = logging.getLogger(__name__)

T = TypeVar("T")
ROUND_MESSAGES = 1000  # names one round reads at most (it goes on at once if there are more)
ROUND_BYTES = 16 << 20  # message bytes one round holds at most
FOLLOWER_LINGER = 60.0  # seconds a follower nobody waits on is kept (its cursor stays warm)
# A round starts this long after the change that called it: the publisher's answer,
# through the same proxy and cores, leaves before the fan-out of its message to ten
# thousand readers does (about a quarter of a second of the live service's and nginx's
# CPU), and changes meanwhile join the round.
PUBLISHER_FIRST = 0.005
TICK = 1.0  # consumer groups are asked at least this often (leases run out, requeue delays)
SAFETY_POLL = 1.0  # with inotify, each followed index is still looked at this often
RECENT_MESSAGES = 4096  # messages a follower keeps for readers a little behind
RECENT_BYTES = 16 << 20  # and their bytes at most


@dataclass(slots=True)
class Item:
    """A message a round read: its bytes, or None when over the inline limit."""

    name: str
    size: int
    data: bytes | None


class Reader:
    """Anything registered on a follower, delivered to on the event loop."""

    __slots__ = ()

    @staticmethod
    def sent(cache: dict[Any, Any], kind: str, messages: int, size: int) -> None:
        """Counts for the metrics, added up over a round (``Hub._deliver``)."""
        key = ("sent", kind)
        total = cache.get(key)
        if total is None:
            cache[key] = [messages, size]
        else:
            total[0] += messages
            total[1] += size

    def deliver(self, items: list[Item], names: list[str], cache: dict[Any, Any]) -> None:
        raise NotImplementedError

    def fail(self, error: Exception) -> None:
        raise NotImplementedError


class Recent:
    """The messages the last rounds read, contiguous: every visible name after ``floor``
    up to the follower's cursor (``floor`` None: nothing is covered)."""

    __slots__ = ("bytes", "floor", "items", "names")

    def __init__(self) -> None:
        self.floor: str | None = None
        self.items: list[Item] = []
        self.names: list[str] = []
        self.bytes = 0

    def reset(self, cursor: str | None) -> None:
        self.floor = cursor
        self.items = []
        self.names = []
        self.bytes = 0

    def extend(self, items: list[Item]) -> None:
        """A round's messages (read with their bytes), after the ones kept; the oldest
        go beyond ``RECENT_MESSAGES`` or ``RECENT_BYTES`` (once a round, not a request)."""
        self.items.extend(items)
        self.names.extend(item.name for item in items)
        self.bytes += sum(item.size for item in items if item.data is not None)
        drop, total = 0, len(self.items)
        while drop < total and (total - drop > RECENT_MESSAGES or self.bytes > RECENT_BYTES):
            if self.items[drop].data is not None:
                self.bytes -= self.items[drop].size
            drop += 1
        if drop:
            self.floor = self.names[drop - 1]
            del self.items[:drop]
            del self.names[:drop]

    def after(self, pointer: str, limit: int) -> list[Item] | None:
        """Up to ``limit`` messages after ``pointer``, or None when the cache does not
        cover it."""
        if self.floor is None or pointer < self.floor:
            return None
        start = bisect.bisect_right(self.names, pointer)
        return self.items[start : start + limit]


@dataclass(eq=False)
class Follower:
    queue: str
    cursor: str | None = None  # None: not read yet
    readers: dict[Reader, None] = field(default_factory=dict)  # waiters and streams
    groups: dict[str, deque[Any]] = field(default_factory=dict)  # group -> GroupWaiters
    warm: asyncio.Future[None] | None = None
    running: bool = False
    again: bool = False
    rounds: int = 0  # rounds that moved the cursor
    token: tuple[int, int, int] | None = None  # the index's change token (polling)
    idle_since: float = field(default_factory=time.monotonic)
    recent: Recent = field(default_factory=Recent)
    read_until: float = 0.0  # rounds read the bytes until then (readers come back)
    # answers built from ``recent`` for readers behind the cursor, by (pointer, what
    # they ask): the readers a round woke ask again after the same names; emptied when
    # the cursor moves
    answers: dict[Any, Any] = field(default_factory=dict)

    @property
    def wants_bytes(self) -> bool:
        """A round reads the messages' bytes while pointer readers or streams follow
        the queue, and a while after the last one left: a woken long-poll is not
        registered again until it asks again, and must then find them in ``recent``."""
        return bool(self.readers) or time.monotonic() < self.read_until

    @property
    def busy(self) -> bool:
        return bool(self.readers) or any(self.groups.values())


class Hub:
    """Every follower of this process, the watch that wakes them, and the thread pool."""

    def __init__(self, settings: LiveSettings, queues: QueueStore, metrics: LiveMetrics) -> None:
        self.settings = settings
        self.queues = queues
        self.metrics = metrics
        self.pool = ThreadPoolExecutor(settings.threads, thread_name_prefix="live-core")
        self.followers: dict[str, Follower] = {}
        self.changes: Changes | None = None
        self.mode = "poll"
        self.group_server: Callable[[Follower], Any] | None = None  # app.GroupWork.serve
        self._tasks: set[asyncio.Task[Any]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None

    # --- start and stop ------------------------------------------------------------------
    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.mode = self._watch()
        self.metrics.watch_mode.labels(self.mode).set(1)
        self.spawn(self._ticker())

    def _watch(self) -> str:
        wanted = self.settings.watch
        root = self.settings.data_dir
        if wanted == "poll" or (wanted == "auto" and not local_notifications(root)):
            log.info("watching queues by polling their indexes every %d ms", self.settings.poll_ms)
            return "poll"
        try:
            self.changes = Changes(self.queues.data_dir)
        except (Unavailable, OSError) as exc:
            if wanted == "inotify":
                raise
            log.warning("no inotify (%s): polling every %d ms", exc, self.settings.poll_ms)
            return "poll"
        assert self._loop is not None
        self._loop.add_reader(self.changes.fileno(), self._on_changes)
        log.info("watching queues with inotify on %s", self.queues.data_dir.indexes)
        return "inotify"

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self.changes is not None and self._loop is not None:
            self._loop.remove_reader(self.changes.fileno())
            self.changes.close()
        self.pool.shutdown(wait=False, cancel_futures=True)

    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in the thread pool: every call into the core blocks on the disk."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, fn, *args)

    # --- followers -----------------------------------------------------------------------
    def follower(self, queue: str) -> Follower:
        follower = self.followers.get(queue)
        if follower is None:
            follower = self.followers[queue] = Follower(queue)
            self.metrics.followed_queues.set(len(self.followers))
        return follower

    async def warm(self, follower: Follower) -> None:
        """Until the follower's cursor is known (the queue's last visible name now).
        Raises QueueNotFound for a queue that does not exist."""
        if follower.cursor is not None:
            return
        if follower.warm is None:
            follower.warm = asyncio.get_running_loop().create_future()
            self.spawn(self._warm(follower, follower.warm))
        await asyncio.shield(follower.warm)

    async def _warm(self, follower: Follower, done: asyncio.Future[None]) -> None:
        try:
            token = await self.run(self._token, follower.queue)
            last = await self.run(self.queues.last_name, follower.queue)
        except Exception as exc:  # the waiters get it (QueueNotFound: 404)
            follower.warm = None
            if self.followers.get(follower.queue) is follower and not follower.busy:
                self._drop(follower)
            done.set_exception(exc)
            done.exception()  # retrieved: nobody may be waiting any more
            return
        if follower.cursor is None:
            follower.cursor, follower.token = last, token
            follower.recent.reset(last)
        done.set_result(None)
        if follower.again:
            self.look(follower)

    def changed(self, queue: str) -> None:
        follower = self.followers.get(queue)
        if follower is not None:
            self.look(follower)

    def look(self, follower: Follower) -> None:
        """Start a round, or ask the running one to go on once more."""
        if follower.running or follower.cursor is None:
            follower.again = True
            return
        follower.running = True
        self.spawn(self._round(follower))

    async def _round(self, follower: Follower) -> None:
        queue = follower.queue
        try:
            await asyncio.sleep(PUBLISHER_FIRST)
            while True:
                follower.again = False
                assert follower.cursor is not None
                wanted = follower.wants_bytes
                started = time.perf_counter()
                items = await self.run(self._read_after, queue, follower.cursor, wanted)
                self.metrics.round_seconds.observe(time.perf_counter() - started)
                if items:
                    follower.cursor = items[-1].name
                    follower.rounds += 1
                    follower.answers = {}
                    if wanted:
                        follower.recent.extend(items)
                    else:  # names only: nothing to serve from memory
                        follower.recent.reset(follower.cursor)
                    self._deliver(follower, items)
                if any(follower.groups.values()) and self.group_server is not None:
                    await self.group_server(follower)
                if not follower.again and len(items) < ROUND_MESSAGES:
                    break
        except QueueNotFound as exc:
            self._gone(follower, exc)
        except Exception as exc:
            log.error("queue %s: cannot read new messages: %s", queue, exc)
            self.metrics.errors.labels("round").inc()
            await asyncio.sleep(1.0)  # the next change or tick tries again
            follower.again = True
        finally:
            follower.running = False
        if follower.again and self.followers.get(queue) is follower:
            self.look(follower)

    def _read_after(self, queue: str, cursor: str, with_data: bool) -> list[Item]:
        """The visible messages after ``cursor`` (thread): names only when nobody reads
        bytes (consumer groups lease their own)."""
        if not with_data:
            names = self.queues.names_after(queue, cursor, ROUND_MESSAGES)
            return [Item(name, 0, None) for name in names]
        return read_items(
            self.queues, queue, cursor, ROUND_MESSAGES, self.settings.max_inline_bytes
        )

    def _deliver(self, follower: Follower, items: list[Item]) -> None:
        names = [item.name for item in items]
        cache: dict[Any, Any] = {}  # what one reader encoded, the next with the same start uses
        started = time.perf_counter()
        for reader in list(follower.readers):
            reader.deliver(items, names, cache)
        self.metrics.deliver_seconds.observe(time.perf_counter() - started)
        # Readers add what they were sent to the cache's "sent" entries: counted once here.
        for key, value in cache.items():
            if key[0] == "sent":
                self.metrics.count(follower.queue, value[0], value[1], key[1])
        if not follower.busy:
            follower.idle_since = time.monotonic()

    def _gone(self, follower: Follower, error: Exception) -> None:
        """The queue was deleted: every reader is told, the follower forgotten."""
        for reader in list(follower.readers):
            reader.fail(error)
        for waiters in follower.groups.values():
            for waiter in list(waiters):
                waiter.fail(error)
        self._drop(follower)

    def _drop(self, follower: Follower) -> None:
        if self.followers.get(follower.queue) is follower:
            del self.followers[follower.queue]
            self.metrics.followed_queues.set(len(self.followers))

    def add(self, follower: Follower, reader: Reader) -> None:
        follower.readers[reader] = None
        follower.read_until = time.monotonic() + FOLLOWER_LINGER

    def remove(self, follower: Follower, reader: Reader) -> None:
        follower.readers.pop(reader, None)
        if not follower.busy:
            follower.idle_since = time.monotonic()

    # --- wake-ups ------------------------------------------------------------------------
    def _on_changes(self) -> None:
        assert self.changes is not None
        try:
            queues = self.changes.read()
        except OSError as exc:
            log.error("inotify read failed: %s", exc)
            queues = None
        if queues is None:  # overflow, or the directory was replaced: look at them all
            for follower in list(self.followers.values()):
                self.look(follower)
            return
        for queue in queues:
            self.changed(queue)

    def _token(self, queue: str) -> tuple[int, int, int] | None:
        try:
            return self.queues.change_token(queue)
        except FileNotFoundError:
            return None

    def _tokens(self, queues: list[str]) -> dict[str, tuple[int, int, int] | None]:
        return {queue: self._token(queue) for queue in queues}

    async def _ticker(self) -> None:
        """Polling (every poll interval; with inotify, once a second as a safety net),
        consumer groups once a second, followers nobody needs dropped."""
        interval = self.settings.poll_ms / 1000 if self.mode == "poll" else SAFETY_POLL
        last_tick = 0.0
        while True:
            await asyncio.sleep(interval)
            followers = [f for f in self.followers.values() if f.cursor is not None]
            if followers:
                with contextlib.suppress(Exception):
                    tokens = await self.run(self._tokens, [f.queue for f in followers])
                    for follower in followers:
                        token = tokens.get(follower.queue)
                        if token != follower.token:
                            follower.token = token
                            self.look(follower)
            now = time.monotonic()
            if now - last_tick >= TICK:
                last_tick = now
                self._tick(now)

    def _tick(self, now: float) -> None:
        for follower in list(self.followers.values()):
            if any(follower.groups.values()):
                self.look(follower)
            elif (
                not follower.busy
                and not follower.running
                and now - follower.idle_since > FOLLOWER_LINGER
            ):
                self._drop(follower)


def read_items(queues: QueueStore, queue: str, after: str, limit: int, inline: int) -> list[Item]:
    """Up to ``limit`` visible messages after ``after`` with their bytes (those up to
    ``inline``), within ``ROUND_BYTES`` (thread)."""
    items: list[Item] = []
    total = 0
    with contextlib.closing(queues.iter_after(queue, after, limit)) as found:
        for name, file in found:
            with file:
                size = os.fstat(file.fileno()).st_size
                data = None
                if size <= inline:
                    if items and total + size > ROUND_BYTES:
                        break
                    data = _read_all(file.fileno(), size)
                    total += size
            items.append(Item(name, size, data))
    return items


def _read_all(fd: int, size: int) -> bytes:
    data = os.pread(fd, size, 0)
    while len(data) < size:  # a regular file gives all at once; just in case
        more = os.pread(fd, size - len(data), len(data))
        if not more:
            break
        data += more
    return data


def first_after(names: list[str], pointer: str) -> int:
    """The position of the first of ``names`` (sorted) that sorts after ``pointer``."""
    return bisect.bisect_right(names, pointer)
