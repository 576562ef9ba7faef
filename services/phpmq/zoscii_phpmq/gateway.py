"""The PHPMQ gateway: connections, consumers and their windows, on the core's queues.

One asyncio event loop serves every connection; each blocking call into the core
(``QueueStore``, ``ConsumerGroups``: file locks, fsyncs) runs in a thread pool. What a
message does:

* **000 authenticate** (this gateway's addition, packet 06 = bearer token): with access
  control on, the first message of every connection; off, accepted and ignored.
* **001 send**: published to the queue (``clean_queue``), the TTL (seconds, 0 or absent:
  none) as the message's expiry for consumer groups, with the gateway's retention. A
  connection's 001s are committed in groups: every message a client has sent back to
  back and the gateway has received is read, and before the connection reads on they
  are committed together, one commit (one log flush) per queue, in their order
  (``_commit``; at most ``ZOSCII_PHPMQ_COMMIT_MESSAGES`` and ``..._COMMIT_BYTES`` a
  group). Contents of up to the core's ``INLINE_BYTES`` wait in memory and are written
  with the commit, in one call into the thread pool for the group; a larger one is
  streamed into an upload file as it arrives.
* **002 consume**: the connection becomes a consumer of the queue's group (``phpmq``, or
  the queue's own from ``ZOSCII_PHPMQ_QUEUE_GROUPS``) with a window of ``count``
  unacknowledged messages: messages are leased and dispatched (003) while fewer than
  ``count`` are unacknowledged; each 004, 005 or 006 frees a place and the window is
  topped up. A second 002 for the same queue changes the window.
* **004 / 005 / 006**: ack, requeue (behind the messages waiting, with the new TTL if
  the packet is there: 0 = none) and dead letter of the message whose id is given. The
  acks a connection has received are settled together, with its 001s, before it reads
  on: one settlement (one flush of the group's log) per queue and group.

The message id is the message's own: the 32 hex digits of its name's GUID, the same at
every delivery (a requeued or released message comes back with its id, as php-mq's own
server keeps it), so a client can tell a redelivery. The gateway keeps (queue, id) ->
the receipt of its latest delivery by this process: while the connection that received
it is open, and after it closed (bounded, ``ZOSCII_PHPMQ_MAX_IDS``), so an ack sent after
a reconnect still works, on any connection of this process; an ack names the message,
so it settles its latest delivery, whoever holds it. An id that is unknown (never
dispatched by this process, forgotten, already finished, or not of the named queue) or
fenced (delivered by another process meanwhile) is logged and answered by nothing:
PHPMQ has no error message.

Leases last ``ZOSCII_PHPMQ_LEASE_SECONDS`` and are renewed while their connection is
open, however long the client works. When a connection closes, its unacknowledged
messages are released at once (their lease ends now): they are delivered again first,
to whichever consumer asks next, in their order, each counted as a delivery (after
``ZOSCII_MAX_DELIVERIES`` they go to the dead letters). A stop (SIGTERM) does the same.

A frame that breaks the format, a missing token, a missing right, or a storage error
closes the connection with a logged reason (counted by reason); the process carries on.
Whatever ends a connection (the client's close, an error, a stop), the messages it had
sent in full before are committed first.
Rights are decided before a byte of content is read: a 001 from a connection without a
token, or for a queue its client may not write, is refused as its content packet starts.

Admission: a connection is *pending* until its first message is read (all but content,
within ``ZOSCII_PHPMQ_FIRST_MESSAGE_SECONDS``) and handled; then it is established and
may sit idle as long as it likes. Idle newcomers cannot lock anyone out: when the
gateway (``ZOSCII_PHPMQ_MAX_CONNECTIONS``) or an address
(``ZOSCII_PHPMQ_MAX_PENDING_PER_ADDRESS``, ``..._MAX_CONNECTIONS_PER_ADDRESS``) is full,
a new connection takes the slot of the oldest pending one, and is refused only when every
slot is held by an established connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import math
import os
import socket
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from zoscii_phpmq.metrics import PhpmqMetrics
from zoscii_phpmq.protocol import (
    FrameReader,
    Incoming,
    MessageType,
    PacketType,
    ProtocolError,
    dispatch,
)
from zoscii_phpmq.settings import Settings
from zosciimq.access import Client
from zosciimq.core import Outgoing, Upload
from zosciimq.core.groups import Delivery, Outcome
from zosciimq.core.names import clean_queue, parse_name
from zosciimq.core.restart import recover_at_start
from zosciimq.core.upload import INLINE_BYTES
from zosciimq.errors import (
    Fenced,
    Forbidden,
    InvalidInput,
    QueueFull,
    TryAgain,
    Unauthenticated,
    ZosciiError,
)
from zosciimq.service.stores import open_stores

log = logging.getLogger(__name__)

T = TypeVar("T")
FULL_LOOK_SECONDS = 1.0  # a waiting consumer asks the group at least this often
PUBLISH_RETRIES = 20  # a queue's 10,000 names of one second used up: wait for the next
MAX_NUMBER_DIGITS = 12
# Contents a lease reads at once (the rest are read one by one as they are dispatched).
DISPATCH_READ_BYTES = 1 << 20
ACTIONS = {
    MessageType.ACKNOWLEDGE: ("ack", "acked"),
    MessageType.REQUEUE: ("requeue", "requeued"),
    MessageType.DEAD_LETTER: ("deadletter", "dead_lettered"),
}


class Refused(ProtocolError):
    """Not a malformed frame, but still the end of the connection (no token, no right,
    a storage error): PHPMQ has nothing else to answer with."""


@dataclass(eq=False)
class Held:
    """A dispatched message, until this gateway sees it acked, requeued or dead-lettered."""

    token: str  # the message id of the 003: its name's GUID, 32 hex digits
    queue: str
    group: str
    receipt: str
    lease_until: float
    owner: Subscription | None  # None once its connection closed


class Ids:
    """(queue, message id) -> Held: those of open connections, and the last
    ``max_released`` of connections that closed (so an ack after a reconnect works). By
    queue: a dead-letter queue's copy has the name, so the id, of its original."""

    def __init__(self, max_released: int) -> None:
        self.max_released = max_released
        self.live: dict[tuple[str, str], Held] = {}
        self.released: OrderedDict[tuple[str, str], Held] = OrderedDict()

    def add(self, held: Held) -> None:
        key = (held.queue, held.token)
        self.released.pop(key, None)
        self.live[key] = held

    def get(self, queue: str, token: str) -> Held | None:
        key = (queue, token)
        return self.live.get(key) or self.released.get(key)

    def forget(self, held: Held) -> None:
        key = (held.queue, held.token)
        if self.live.get(key) is held:
            del self.live[key]
        if self.released.get(key) is held:
            del self.released[key]

    def release(self, held: Held) -> None:
        """Its connection closed: keep it a while for a late ack."""
        self.forget(held)
        held.owner = None
        if self.max_released:
            self.released[held.queue, held.token] = held
            while len(self.released) > self.max_released:
                self.released.popitem(last=False)


@dataclass(eq=False)
class Subscription:
    """A connection consuming one queue through its group, with a window."""

    conn: Connection
    queue: str  # clean
    name: str  # as the client wrote it in its 002: what its 003s carry
    group: str
    window: int
    inflight: dict[str, Held] = field(default_factory=dict)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


@dataclass
class Received:
    """A 001 read in full and not yet published: its content in memory, or the upload
    it was streamed into."""

    queue: str
    content: bytes | Upload
    size: int
    expires_at: float | None


@dataclass(eq=False)
class Connection:
    number: int
    peer: str
    address: str  # the peer's IP address, for the per-address limits
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    consumer: str  # its name in the group logs
    stop: asyncio.Future[None]
    client: Client | None = None
    first: bool = True
    pending: bool = True  # until its first message has been handled
    gone: bool = False  # its slot was given back (closed, or evicted)
    closing: bool = False
    subs: dict[str, Subscription] = field(default_factory=dict)
    upload: Upload | None = None  # the large content being streamed in
    # Read and not yet committed (``Gateway._commit``): 001s in their order, the bytes of
    # their contents, and the messages acked by 004s (a dict: in order, each once).
    sends: list[Received] = field(default_factory=list)
    send_bytes: int = 0
    acks: dict[Held, None] = field(default_factory=dict)
    write_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    task: asyncio.Task[Any] | None = None

    def __str__(self) -> str:
        return f"#{self.number} ({self.peer})"


class UploadSink:
    """A content packet streamed into an upload file, written in the thread pool."""

    def __init__(self, gateway: Gateway, upload: Upload) -> None:
        self.gateway = gateway
        self.upload = upload

    async def write(self, chunk: bytes) -> None:
        await self.gateway.run(self.upload.write, chunk)


class Gateway:
    def __init__(self, settings: Settings, metrics: PhpmqMetrics) -> None:
        self.settings = settings
        self.metrics = metrics
        stores = open_stores(settings.core, settings.policy, settings.max_deliveries)
        self.data_dir, self.queues, self.groups = stores.data_dir, stores.queues, stores.groups
        self.pool = ThreadPoolExecutor(settings.threads, thread_name_prefix="phpmq-core")
        self.ids = Ids(settings.max_ids)
        self.connections: set[Connection] = set()
        self.pending: dict[Connection, None] = {}  # oldest first
        self.by_address: dict[str, set[Connection]] = {}
        self.subscribers: dict[str, set[Subscription]] = {}
        self.server: asyncio.Server | None = None
        self.stopping = False
        self._numbers = itertools.count(1)
        self._keeper: asyncio.Task[None] | None = None

    # --- start and stop -----------------------------------------------------------------------
    async def start(self) -> tuple[str, int]:
        """Recover what a crash left, then listen; the bound (host, port)."""
        if self.data_dir.check_writable() is None:
            await self.run(recover_at_start, self.queues)
        self.server = await asyncio.start_server(
            self._accept, self.settings.host, self.settings.port, reuse_address=True
        )
        self._keeper = asyncio.create_task(self._keep_leases(), name="phpmq-leases")
        host, port = self.server.sockets[0].getsockname()[:2]
        log.info(
            "listening for PHPMQ clients on %s:%d (data %s, access control %s)",
            host,
            port,
            self.data_dir.root,
            "on" if self.settings.access.enabled else "off",
        )
        return host, port

    @property
    def serving(self) -> bool:
        return self.server is not None and self.server.is_serving() and not self.stopping

    async def stop(self) -> None:
        """Stop listening, let messages being handled finish (within the grace time),
        close every connection (their unacknowledged messages released), then return."""
        self.stopping = True
        if self.server is not None:
            self.server.close()
        for conn in list(self.connections):
            if not conn.stop.done():
                conn.stop.set_result(None)
        tasks = [c.task for c in self.connections if c.task is not None]
        if tasks:
            log.info("stopping: %d connection(s) to close", len(tasks))
            _, late = await asyncio.wait(tasks, timeout=self.settings.stop_grace_seconds)
            for conn in list(self.connections):
                if conn.task in late:
                    log.warning("connection %s: still busy after the grace time, closed", conn)
                    conn.writer.transport.abort()
            if late:
                await asyncio.wait(late, timeout=5)
        if self._keeper is not None:
            self._keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeper
        self.pool.shutdown(wait=True)
        self.queues.close()
        log.info("stopped")

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn`` in the thread pool (the core blocks on locks and the disk)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, functools.partial(fn, *args, **kwargs))

    # --- a connection -------------------------------------------------------------------------
    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = _peer(writer)
        address = peer.rpartition(":")[0] or peer
        refusal = self._make_room(address)
        if refusal is not None:
            self.metrics.connections.labels("refused").inc()
            log.warning("connection from %s refused: %s", peer, refusal)
            writer.transport.abort()
            return
        number = next(self._numbers)
        conn = Connection(
            number=number,
            peer=peer,
            address=address,
            reader=reader,
            writer=writer,
            consumer=f"phpmq-{os.getpid()}-{number}",
            stop=asyncio.get_running_loop().create_future(),
            task=asyncio.current_task(),
        )
        _tune(writer)
        self.connections.add(conn)
        self.pending[conn] = None
        self.by_address.setdefault(address, set()).add(conn)
        self.metrics.connections.labels("accepted").inc()
        self.metrics.open_connections.inc()
        log.debug("connection %s opened", conn)
        try:
            await self._serve(conn)
        finally:
            await self._close(conn)

    def _make_room(self, address: str) -> str | None:
        """Why a new connection from ``address`` is refused, or None once there is room
        for it (made by evicting the oldest pending connection where one must go)."""
        if self.stopping:
            return "stopping"
        settings = self.settings
        waiting = [c for c in self.pending if c.address == address]  # oldest first
        if len(waiting) >= settings.max_pending_per_address:
            self._evict(waiting.pop(0), f"{len(waiting) + 1} pending from {address}")
        here = len(self.by_address.get(address, ()))
        if settings.max_connections_per_address and here >= settings.max_connections_per_address:
            if not waiting:
                return f"{here} open from {address} (ZOSCII_PHPMQ_MAX_CONNECTIONS_PER_ADDRESS)"
            self._evict(waiting.pop(0), f"{here} open from {address}")
        if len(self.connections) >= settings.max_connections:
            if not self.pending:
                return f"{len(self.connections)} open, the maximum, none of them pending"
            self._evict(next(iter(self.pending)), f"{len(self.connections)} open, the maximum")
        return None

    def _evict(self, conn: Connection, why: str) -> None:
        """A pending connection gives its slot to a newer one (``why``: which limit)."""
        log.warning(
            "connection %s closed: evicted, no first message yet and its slot went to a "
            "newer connection (%s)",
            conn,
            why,
        )
        self.metrics.connections.labels("evicted").inc()
        self._leave(conn)
        conn.writer.transport.abort()

    def _leave(self, conn: Connection) -> None:
        """``conn``'s slot is free (once, whichever of close and eviction comes first)."""
        if conn.gone:
            return
        conn.gone = True
        self.connections.discard(conn)
        self.pending.pop(conn, None)
        mine = self.by_address.get(conn.address)
        if mine is not None:
            mine.discard(conn)
            if not mine:
                del self.by_address[conn.address]
        self.metrics.open_connections.dec()

    async def _serve(self, conn: Connection) -> None:
        frames = FrameReader(
            conn.reader,
            max_content_bytes=self.settings.max_message_bytes,
            timeout=self.settings.frame_timeout_seconds,
            min_rate=self.settings.min_rate,
            inline_bytes=INLINE_BYTES,
            open_sink=functools.partial(self._open_upload, conn),
            before_content=functools.partial(self._before_content, conn),
            before_read=functools.partial(self._commit, conn),
        )
        ended: ProtocolError | None = None
        try:
            await self._read_messages(conn, frames)
        except ProtocolError as exc:
            ended = exc
        except (ConnectionError, OSError) as exc:
            log.info("connection %s lost: %s", conn, exc)
        except Exception:
            self.metrics.protocol_errors.labels("internal").inc()
            log.exception("connection %s closed: internal error", conn)
        try:  # whatever ended it, what the client sent in full before is committed
            await self._commit(conn)
        except ProtocolError as exc:
            if ended is None:
                ended = exc
            else:
                self._closed(conn, exc)
        except Exception:
            self.metrics.protocol_errors.labels("internal").inc()
            log.exception("connection %s: internal error committing its last messages", conn)
        if ended is not None and not conn.gone:  # an evicted one's end was logged already
            self._closed(conn, ended)

    async def _read_messages(self, conn: Connection, frames: FrameReader) -> None:
        """Handle messages until the client ends the connection, or the gateway stops
        (what was received by then is handled: stop waits for that)."""
        loop = asyncio.get_running_loop()
        while True:
            deadline = None
            if conn.pending:
                deadline = loop.time() + self.settings.first_message_seconds
            try:
                if not await frames.wait(conn.stop, deadline):
                    log.debug("connection %s ended by the client", conn)
                    return
            except TimeoutError:
                raise ProtocolError(
                    "idle",
                    f"no first message within {self.settings.first_message_seconds:g} s "
                    "(ZOSCII_PHPMQ_FIRST_MESSAGE_SECONDS)",
                ) from None
            message = await frames.read_message(deadline)
            await self._handle(conn, message)
            if conn.pending and not conn.gone:  # established: idle as long as it likes
                conn.pending = False
                self.pending.pop(conn, None)

    def _closed(self, conn: Connection, exc: ProtocolError) -> None:
        """The connection ends for ``exc``: counted by its reason, and logged."""
        self.metrics.protocol_errors.labels(exc.reason).inc()
        log.warning("connection %s closed: %s (%s)", conn, exc.reason, exc.detail)

    async def _close(self, conn: Connection) -> None:
        conn.closing = True
        conn.writer.transport.abort()  # a dispatcher waiting on a full socket stops now
        for sub in conn.subs.values():
            sub.wake.set()
        tasks = [s.task for s in conn.subs.values() if s.task is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        await self._discard_upload(conn)
        left = [r.content for r in conn.sends if isinstance(r.content, Upload)]
        if left:  # never committed (an internal error): their temp files go
            conn.sends = []
            await self.run(_discard_all, left)
        held = [h for sub in conn.subs.values() for h in sub.inflight.values()]
        for sub in conn.subs.values():
            self.subscribers.get(sub.queue, set()).discard(sub)
            self.metrics.consumers.dec()
            sub.inflight.clear()
        if held:
            released = await self.run(self._release, held)
            for h in held:
                self.ids.release(h)
            self.metrics.unacked.dec(len(held))
            self.metrics.released.inc(released)
            log.info(
                "connection %s: %d unacknowledged message(s) released for redelivery",
                conn,
                released,
            )
            for queue in {h.queue for h in held}:
                self._wake(queue)
        self._leave(conn)

    def _release(self, held: list[Held]) -> int:
        """End the leases now (thread pool): delivered again first, in their order."""
        released = 0
        for h in held:
            try:
                self.groups.extend(h.queue, h.group, h.receipt, 0)
                released += 1
            except Fenced:
                pass  # finished or leased again meanwhile: nothing of ours to release
            except (ZosciiError, OSError) as exc:
                log.warning("%s: lease of %s not released (%s)", h.queue, h.receipt, exc)
        return released

    async def _open_upload(self, conn: Connection, length: int) -> UploadSink:
        await self._discard_upload(conn)
        conn.upload = await self.run(Upload, self.data_dir, self.settings.max_message_bytes)
        return UploadSink(self, conn.upload)

    async def _discard_upload(self, conn: Connection) -> None:
        upload, conn.upload = conn.upload, None
        if upload is not None:
            await self.run(upload.discard)

    # --- messages -----------------------------------------------------------------------------
    async def _handle(self, conn: Connection, message: Incoming) -> None:
        first, conn.first = conn.first, False
        if message.type is MessageType.AUTHENTICATE:
            if not first:
                raise ProtocolError("unexpected", "000 (authenticate) after the first message")
            self._authenticate(conn, message)
        elif first and self.settings.access.enabled:
            raise Refused(
                "unauthenticated",
                f"first message is {message.type.value:03d}, not 000 with a token",
            )
        elif message.type is MessageType.SEND:
            await self._receive(conn, message)
        elif message.type is MessageType.ACKNOWLEDGE:
            await self._acknowledge(conn, message)
        else:
            await self._commit(conn)  # what came before it takes effect first
            if message.type is MessageType.CONSUME:
                self._consume(conn, message)
            else:
                await self._finish(conn, message)

    def _authenticate(self, conn: Connection, message: Incoming) -> None:
        access = self.settings.access
        if not access.enabled:
            log.debug("connection %s: token ignored, access control is off", conn)
            return
        raw = message.fields[PacketType.TOKEN]
        try:
            conn.client = access.authenticate(f"Bearer {raw.decode('utf-8')}")
        except (Unauthenticated, UnicodeDecodeError):
            raise Refused("unauthenticated", "the token matches no client") from None
        log.info("connection %s: client %s", conn, conn.client.name if conn.client else "-")

    def _before_content(
        self, conn: Connection, message_type: MessageType, fields: Mapping[PacketType, bytes]
    ) -> None:
        """A content packet is about to arrive: is its sender allowed to send it? Decided
        from the message header and the packets before it, so nothing of a refused
        message reaches the disk."""
        access = self.settings.access
        if access.enabled and conn.client is None:
            raise Refused(
                "unauthenticated",
                f"content of a {message_type.value:03d} before a 000 with a valid token",
            )
        if message_type is not MessageType.SEND:
            return
        if PacketType.QUEUE in fields:
            self._check_send(conn, _queue_of(fields)[0])
        elif access.enabled or self.settings.blocked_queues:
            raise Refused(
                "content_first",
                "the content (packet 02) came before the queue (01): with access control "
                "or blocked queues, the queue must come first",
            )

    def _check_send(self, conn: Connection, queue: str) -> None:
        self._authorize(conn, "publish", queue)
        if queue in self.settings.blocked_queues:
            raise Refused("forbidden", f"queue '{queue}' is blocked (ZOSCII_BLOCKED_QUEUES)")

    def _authorize(self, conn: Connection, action: str, queue: str) -> None:
        try:
            self.settings.access.authorize(conn.client, action, queue)
        except Forbidden as exc:
            client = conn.client.name if conn.client else "-"
            raise Refused("forbidden", f"client {client}: {exc}") from None

    async def _receive(self, conn: Connection, message: Incoming) -> None:
        """A 001 read in full joins the connection's group, committed before it reads on
        (at once when the group is full)."""
        queue, _ = _queue(message)
        self._check_send(conn, queue)  # again: the content may have come first
        ttl = _number(message.fields.get(PacketType.TTL), "TTL")
        content: object = message.content
        if isinstance(content, UploadSink):
            content, conn.upload = content.upload, None  # the group's now
        assert isinstance(content, bytes | Upload)
        expires_at = time.time() + ttl if ttl else None
        conn.sends.append(Received(queue, content, message.size, expires_at))
        conn.send_bytes += message.size
        settings = self.settings
        if len(conn.sends) >= settings.commit_messages or conn.send_bytes >= settings.commit_bytes:
            await self._publish_group(conn)

    async def _commit(self, conn: Connection) -> None:
        """Before ``conn`` reads on: the 001s it read are published (one commit a queue),
        and its acks settled (one a queue and group)."""
        if conn.sends:
            await self._publish_group(conn)
        if conn.acks:
            await self._settle_acks(conn)

    async def _publish_group(self, conn: Connection) -> None:
        group, conn.sends, conn.send_bytes = conn.sends, [], 0
        by_queue: dict[str, list[Received]] = {}
        for received in group:
            by_queue.setdefault(received.queue, []).append(received)
        published, failure = await self.run(self._publish_queues, by_queue)
        for queue, items in published:
            self.metrics.messages.labels("received").inc(len(items))
            self.metrics.bytes.labels("received").inc(sum(r.size for r in items))
            log.debug("connection %s: published %d to %s", conn, len(items), queue)
            self._wake(queue)
        if failure is not None:
            queue, exc = failure
            lost = len(group) - sum(len(items) for _, items in published)
            raise Refused(
                exc.reason,
                f"publish to '{queue}': {exc} ({lost} message(s) read from the connection "
                "not published)",
            )

    def _publish_queues(
        self, by_queue: Mapping[str, list[Received]]
    ) -> tuple[list[tuple[str, list[Received]]], tuple[str, ZosciiError] | None]:
        """Thread pool: each queue's messages published by one commit, the queues in the
        order they first came, up to the first that fails: (what was published, that
        failure). Every upload is closed on the way out (and removed, if unpublished)."""
        published: list[tuple[str, list[Received]]] = []
        uploads: list[Upload] = [  # streamed in already
            r.content for items in by_queue.values() for r in items if isinstance(r.content, Upload)
        ]
        retention = self.settings.retention_days
        try:
            for queue, items in by_queue.items():
                kept = 0
                try:
                    outgoing = []
                    for received in items:
                        content = received.content
                        if isinstance(content, bytes):  # written now, with its commit
                            upload = Upload(self.data_dir, self.settings.max_message_bytes)
                            uploads.append(upload)
                            upload.write(content)
                            content = upload
                        outgoing.append(Outgoing(content, retention, None, received.expires_at))
                    try:
                        self._publish(queue, outgoing)
                        kept = len(items)
                    except QueueFull:
                        if len(outgoing) == 1:
                            raise
                        # Refused before anything was written: one at a time, as they
                        # came, so those that fit are kept as if each had come alone.
                        for message in outgoing:
                            self._publish(queue, [message])
                            kept += 1
                except ZosciiError as exc:
                    if kept:
                        published.append((queue, items[:kept]))
                    return published, (queue, exc)
                published.append((queue, items))
            return published, None
        finally:
            _discard_all(uploads)

    def _publish(self, queue: str, outgoing: list[Outgoing]) -> list[str | None]:
        """One commit; the names given, in order."""
        for attempt in itertools.count():
            try:
                results = self.queues.publish_many(queue, outgoing)
                self.metrics.commit_messages.observe(len(outgoing))
                return [result.name for result in results]
            except TryAgain:  # the queue's 10,000 names of this second are used up
                if attempt >= PUBLISH_RETRIES:
                    raise
                time.sleep(0.05)
        raise AssertionError("unreachable")

    def _consume(self, conn: Connection, message: Incoming) -> None:
        queue, name = _queue(message)
        self._authorize(conn, "consume", queue)
        count = _number(message.fields[PacketType.COUNT], "count")
        if count is None or count < 1:
            raise ProtocolError("bad_number", "a consume request for 0 messages")
        if count > self.settings.window_limit:
            log.info(
                "connection %s: window of %d on %s cut to %d (ZOSCII_PHPMQ_WINDOW_LIMIT)",
                conn,
                count,
                queue,
                self.settings.window_limit,
            )
            count = self.settings.window_limit
        sub = conn.subs.get(queue)
        if sub is not None:  # a new window for the same queue
            sub.window, sub.name = count, name
            sub.wake.set()
            return
        sub = Subscription(conn, queue, name, self.settings.group_of(queue), count)
        conn.subs[queue] = sub
        self.subscribers.setdefault(queue, set()).add(sub)
        self.metrics.consumers.inc()
        sub.task = asyncio.create_task(self._dispatch(sub), name=f"phpmq-{conn.number}-{queue}")
        log.info("connection %s consumes %s (group %s, window %d)", conn, queue, sub.group, count)

    def _held(self, conn: Connection, message: Incoming) -> Held | None:
        """The dispatched message a 004, 005 or 006 names, once its sender may act on it;
        None (logged, counted) for an id this process does not know."""
        action, _ = ACTIONS[message.type]
        queue, _ = _queue(message)
        self._authorize(conn, action, queue)
        token = message.fields[PacketType.MESSAGE_ID].decode("ascii", "replace")
        held = self.ids.get(queue, token)
        if held is None or held in conn.acks:  # a second ack of one message: as before
            self.metrics.ignored.labels("unknown").inc()
            log.warning(
                "connection %s: %s of unknown message id %r on %s: ignored",
                conn,
                action,
                token[:64],
                queue,
            )
            return None
        return held

    async def _acknowledge(self, conn: Connection, message: Incoming) -> None:
        """A 004 is settled with the connection's other acks, before it reads on (at once
        when the group is full)."""
        held = self._held(conn, message)
        if held is not None:
            conn.acks[held] = None
            if len(conn.acks) >= self.settings.commit_messages:
                await self._settle_acks(conn)

    async def _settle_acks(self, conn: Connection) -> None:
        acks, conn.acks = list(conn.acks), {}
        by_group: dict[tuple[str, str], list[Held]] = {}
        for held in acks:
            by_group.setdefault((held.queue, held.group), []).append(held)
        settled, failure = await self.run(self._ack_groups, by_group)
        acked = 0
        for held, outcome in settled:
            self._forget(held)
            if outcome.result == "ok":
                acked += 1
            else:
                self._ignored(conn, "ack", outcome)
        self.metrics.messages.labels("acked").inc(acked)
        if failure is not None:
            queue, exc = failure
            raise Refused(exc.reason, f"ack on '{queue}': {exc}")

    def _ack_groups(
        self, by_group: Mapping[tuple[str, str], list[Held]]
    ) -> tuple[list[tuple[Held, Outcome]], tuple[str, ZosciiError] | None]:
        """Thread pool: each group's acks in one settlement, up to the first that fails:
        (each ack settled and its outcome, that failure)."""
        settled: list[tuple[Held, Outcome]] = []
        for (queue, group), helds in by_group.items():
            try:
                outcomes = self.groups.ack(queue, group, [h.receipt for h in helds])
            except ZosciiError as exc:
                return settled, (queue, exc)
            settled.extend(zip(helds, outcomes, strict=True))
        return settled, None

    async def _finish(self, conn: Connection, message: Incoming) -> None:
        """005, 006: the group learns what became of a dispatched message."""
        action, event = ACTIONS[message.type]
        held = self._held(conn, message)
        if held is None:
            return
        queue = held.queue
        ttl = _number(message.fields.get(PacketType.TTL), "TTL")
        try:
            if message.type is MessageType.REQUEUE:
                outcomes = await self.run(
                    functools.partial(
                        self.groups.requeue,
                        queue,
                        held.group,
                        [held.receipt],
                        ttl=None if ttl is None else float(ttl),
                    )
                )
            else:
                outcomes = await self.run(
                    self.groups.dead_letter, queue, held.group, [held.receipt]
                )
        except ZosciiError as exc:
            raise Refused(exc.reason, f"{action} on '{queue}': {exc}") from None
        self._forget(held)
        (outcome,) = outcomes
        if outcome.result == "ok":
            self.metrics.messages.labels(event).inc()
            self._wake(queue)  # it is there for a consumer again, or a place freed
        else:
            self._ignored(conn, action, outcome)

    def _ignored(self, conn: Connection, action: str, outcome: Outcome) -> None:
        self.metrics.ignored.labels(outcome.result).inc()
        log.warning(
            "connection %s: %s of %s ignored: %s (leased again since, or finished)",
            conn,
            action,
            outcome.receipt,
            outcome.result,
        )

    def _forget(self, held: Held) -> None:
        """``held`` is finished with: out of the id map and of its window."""
        self.ids.forget(held)
        owner = held.owner
        if owner is not None and owner.inflight.pop(held.token, None) is not None:
            self.metrics.unacked.dec()
            owner.wake.set()
        held.owner = None

    def _wake(self, queue: str) -> None:
        for sub in self.subscribers.get(queue, ()):
            sub.wake.set()

    # --- dispatching --------------------------------------------------------------------------
    async def _dispatch(self, sub: Subscription) -> None:
        """Keep ``sub``'s window full until its connection closes."""
        conn = sub.conn
        poll = self.settings.poll_ms / 1000
        seen: object = None
        next_look = 0.0
        try:
            while not conn.closing:
                free = sub.window - len(sub.inflight)
                if free <= 0:
                    sub.wake.clear()
                    await sub.wake.wait()  # an ack, a close, a new window
                    continue
                woken = sub.wake.is_set()
                sub.wake.clear()
                if woken:  # a place freed, a publish...: look at once
                    token: object = None
                else:
                    token = await self.run(self._change_token, sub.queue, sub.group)
                now = time.monotonic()
                if woken or token != seen or now >= next_look:
                    seen, next_look = token, now + FULL_LOOK_SECONDS
                    if await self._fill(sub, free):
                        continue
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(sub.wake.wait(), poll)
        except (ConnectionError, OSError) as exc:
            if not conn.closing:
                log.info("connection %s lost while dispatching: %s", conn, exc)
        except ProtocolError as exc:
            self._closed(conn, exc)
        except Exception:
            self.metrics.protocol_errors.labels("internal").inc()
            log.exception("connection %s: dispatching from %s failed", conn, sub.queue)
        if not conn.closing:
            conn.writer.transport.abort()  # the reading side ends and closes the connection

    def _change_token(self, queue: str, group: str) -> tuple[object, object]:
        """Changes when the queue's index (a publish: the core's own token) or the
        group's log (another consumer's ack, requeue, release...) does."""
        try:
            published: object = self.queues.change_token(queue)
        except FileNotFoundError:  # no message published yet
            published = None
        return published, _stat(self.data_dir.group_log_path(queue, group))

    async def _fill(self, sub: Subscription, free: int) -> int:
        """Lease up to ``free`` messages and dispatch them; how many were leased."""
        conn = sub.conn
        try:
            got = await self.run(self._lease, sub, free)
        except InvalidInput as exc:  # queue and group too long for a dead-letter queue...
            raise Refused(exc.reason, f"consume {sub.queue}: {exc}") from None
        except ZosciiError as exc:
            if exc.reason != "not_found":  # no such queue yet: wait for its first message
                log.warning("%s/%s: consume failed: %s", sub.queue, sub.group, exc)
            return 0
        # Every one is in the window (and the id map) before the first is written: the
        # close of the connection releases them, whatever happens below.
        helds = []
        for delivery, _ in got:
            token = _message_id(delivery)
            earlier = self.ids.get(sub.queue, token)
            if earlier is not None:  # its lease ran out and it came back: that one is over
                self._forget(earlier)
            held = Held(token, sub.queue, sub.group, delivery.receipt, delivery.lease_until, sub)
            sub.inflight[token] = held
            self.ids.add(held)
            helds.append(held)
        self.metrics.unacked.inc(len(got))
        sent = sent_bytes = 0
        try:
            for held, (delivery, content) in zip(helds, got, strict=True):
                if conn.closing:
                    break
                size = await self._send_one(sub, held, delivery, content)
                if size is not None:
                    sent, sent_bytes = sent + 1, sent_bytes + size
        finally:
            for delivery, _ in got:
                delivery.file.close()
            self.metrics.messages.labels("sent").inc(sent)
            self.metrics.bytes.labels("sent").inc(sent_bytes)
        return len(got)

    def _lease(self, sub: Subscription, free: int) -> list[tuple[Delivery, bytes | None]]:
        """Thread pool: lease up to ``free`` messages, and read (and close) those whose
        contents fit in ``DISPATCH_READ_BYTES`` together; the others are read as they are
        dispatched, so a window of large messages is never all in memory."""
        got = self.groups.consume(
            sub.queue,
            sub.group,
            count=free,
            lease=self.settings.lease_seconds,
            consumer=sub.conn.consumer,
        )
        budget = min(DISPATCH_READ_BYTES, self.settings.max_message_bytes)
        out: list[tuple[Delivery, bytes | None]] = []
        try:
            for delivery in got:
                content = None
                if delivery.size <= budget:
                    with delivery.file as file:
                        content = file.read()
                    budget -= len(content)
                out.append((delivery, content))
        except BaseException:
            for delivery in got:
                delivery.file.close()
            raise
        return out

    async def _send_one(
        self, sub: Subscription, held: Held, delivery: Delivery, content: bytes | None
    ) -> int | None:
        """Dispatch one leased message: the bytes of its content, None when it was too
        large and went to the dead letters instead."""
        conn = sub.conn
        if delivery.size > self.settings.max_message_bytes:
            log.warning(
                "%s: %s has %d bytes, over ZOSCII_PHPMQ_MAX_MESSAGE_BYTES: dead-lettered",
                sub.queue,
                delivery.name,
                delivery.size,
            )
            outcomes = await self.run(
                functools.partial(
                    self.groups.dead_letter,
                    sub.queue,
                    sub.group,
                    [held.receipt],
                    reason="too_large",
                )
            )
            self._forget(held)
            if outcomes[0].result == "ok":
                self.metrics.messages.labels("dead_lettered").inc()
            return None
        if content is None:
            content = await self.run(_read_all, delivery)
        ttl = b"0" if delivery.ttl_left is None else b"%d" % max(1, math.ceil(delivery.ttl_left))
        frame = dispatch(sub.name.encode(), content, held.token.encode(), ttl)
        async with conn.write_lock:
            transport = conn.writer.transport
            if transport.is_closing():
                raise ConnectionResetError("the connection is closing")
            # One write of the whole message into an empty buffer: one send() call, so the
            # client's first read of 8 bytes finds the whole header (PHPMQ-NOTES).
            conn.writer.write(frame)
            if transport.get_write_buffer_size():  # the kernel did not take it all yet
                try:
                    await asyncio.wait_for(
                        conn.writer.drain(), max(self.settings.frame_timeout_seconds, 1.0)
                    )
                except TimeoutError:
                    raise ProtocolError(
                        "send_timeout",
                        f"the client did not read a dispatched message of {len(frame)} bytes "
                        f"within {self.settings.frame_timeout_seconds:g} s",
                    ) from None
        return len(content)

    # --- leases ---------------------------------------------------------------------------------
    async def _keep_leases(self) -> None:
        """Renew the leases of every dispatched message of an open connection before they
        run out: a client may work on a message as long as it likes."""
        lease = self.settings.lease_seconds
        while True:
            await asyncio.sleep(max(0.5, lease / 6))
            now = time.time()
            due = [
                h
                for conn in self.connections
                if not conn.closing
                for sub in conn.subs.values()
                for h in sub.inflight.values()
                if h.lease_until - now < lease / 2
            ]
            if not due:
                continue
            try:
                results = await self.run(self._extend, due)
            except Exception:
                log.exception("renewing leases failed")
                continue
            for held, until in zip(due, results, strict=True):
                if until is None:
                    log.warning(
                        "%s: lease of %s lost (leased again): the client's ack will be ignored",
                        held.queue,
                        held.receipt,
                    )
                    self._forget(held)
                else:
                    held.lease_until = until

    def _extend(self, due: Iterable[Held]) -> list[float | None]:
        lease = self.settings.lease_seconds
        results: list[float | None] = []
        for held in due:
            try:
                results.append(self.groups.extend(held.queue, held.group, held.receipt, lease))
            except Fenced:
                results.append(None)
            except (ZosciiError, OSError) as exc:
                log.warning("%s: lease of %s not renewed: %s", held.queue, held.receipt, exc)
                results.append(held.lease_until)
        return results

    # --- health ---------------------------------------------------------------------------------
    def details(self) -> dict[str, Any]:
        return {
            "connections": len(self.connections),
            "pending": len(self.pending),  # no first message yet
            "consumers": sum(len(c.subs) for c in self.connections),
        }


# --- helpers --------------------------------------------------------------------------------------
def _queue(message: Incoming) -> tuple[str, str]:
    """(clean queue name, the name as the client wrote it)."""
    return _queue_of(message.fields)


def _queue_of(fields: Mapping[PacketType, bytes]) -> tuple[str, str]:
    raw = fields[PacketType.QUEUE]
    try:
        text = raw.decode("ascii")
        return clean_queue(text), text
    except (UnicodeDecodeError, InvalidInput) as exc:
        raise ProtocolError("bad_queue", f"queue name {raw[:100]!r}: {exc}") from None


def _number(raw: bytes | None, what: str) -> int | None:
    """A packet holding a whole number (count, TTL); None when the packet is absent."""
    if raw is None:
        return None
    if not raw.isdigit() or len(raw) > MAX_NUMBER_DIGITS:
        raise ProtocolError("bad_number", f"{what} {raw[:40]!r} is not a whole number")
    return int(raw)


def _message_id(delivery: Delivery) -> str:
    """The id of a 003: the GUID of the message's name, the same at every delivery."""
    try:
        return parse_name(delivery.name).guid.replace("-", "").lower()
    except InvalidInput:  # not a name of this format: the delivery's own token
        return delivery.receipt.rpartition(":")[2]


def _read_all(delivery: Delivery) -> bytes:
    with delivery.file as file:
        return file.read()


def _discard_all(uploads: Iterable[Upload]) -> None:
    """Close each upload's file; those not committed are removed."""
    for upload in uploads:
        upload.discard()


def _stat(path: os.PathLike[str] | str) -> object:
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return None
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


def _peer(writer: asyncio.StreamWriter) -> str:
    peer = writer.get_extra_info("peername")
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer)


def _tune(writer: asyncio.StreamWriter) -> None:
    """TCP keep-alive (a vanished client's leases are released), and writes that wait
    until the kernel took everything (each message then starts with an empty buffer)."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    writer.transport.set_write_buffer_limits(high=0)
