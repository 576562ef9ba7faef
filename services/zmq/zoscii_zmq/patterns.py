"""The ØMQ patterns onto queues: request-reply, pipeline and publish-subscribe.

Four sockets, each off when its endpoint is (README, "ØMQ patterns"):

* **request** (ROUTER; clients REQ or DEALER): ``[publish, queue, payload...]`` answers
  ``[ok, name...]`` once the messages are durable; ``[fetch, queue, after]`` answers
  ``[ok, name, payload]`` or ``[empty]``; any error ``[error, reason, text]``.
* **push** (PULL; clients PUSH): ``[queue, payload...]`` is published. PUSH has no reply:
  a refused message is logged and counted, and only request-reply tells a sender
  that a message is durable.
* **work** (ROUTER; workers REQ or DEALER): ``[pull, queue, timeout_ms?]`` leases the next
  message of the queue's consumer group (``ZOSCII_ZMQ_GROUP``) and answers
  ``[message, queue, name, receipt, payload]`` (or ``[timeout]``); the worker settles it
  with ``[ack|requeue|deadletter, queue, receipt]`` (``[ok]``). A worker that vanishes
  leaves its message to its lease (``ZOSCII_ZMQ_LEASE_SECONDS``).
* **pub** (XPUB; clients SUB): a subscription to ``<queue>`` follows the queue from its
  end then; ``<queue>@<name>`` resumes after that message. Each message goes out as
  ``[topic, name, payload]`` (topic: the subscription as written).

Access control (on with the api's clients): a request may begin with a frame
``Bearer <token>``, or the socket uses ZAP/PLAIN (``ZOSCII_ZMQ_PLAIN``; always on the pub
socket, since a subscription cannot carry a token) with the token as password. Rights
are the api's: ``publish`` needs ``write`` on the queue, the rest ``read``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import zmq
import zmq.asyncio

from zoscii_zmq.metrics import ZmqMetrics
from zoscii_zmq.settings import Settings
from zoscii_zmq.storage import Storage
from zosciimq.access import Client
from zosciimq.core.names import clean_pointer, clean_queue
from zosciimq.errors import Forbidden, InvalidInput, QueueNotFound, Unauthenticated, ZosciiError

log = logging.getLogger(__name__)

ZAP_ENDPOINT = "inproc://zeromq.zap.01"
BEARER = b"Bearer "
FEED_BATCH = 256
PUSH_BATCH = 256
MAX_PEERS = 10_000  # request or work peers with requests in hand at once


class Refused(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


@dataclass(eq=False)
class Peer:
    """A client of a ROUTER socket: its requests are answered one at a time, in order."""

    envelope: list[bytes]  # routing id (and REQ's empty delimiter)
    requests: deque[tuple[list[bytes], str | None]] = field(default_factory=deque)
    task: asyncio.Task[None] | None = None


class Patterns:
    def __init__(
        self,
        settings: Settings,
        storage: Storage,
        metrics: ZmqMetrics,
        context: zmq.asyncio.Context,
    ) -> None:
        self.settings = settings
        self.storage = storage
        self.metrics = metrics
        self.context = context
        self.access = settings.access
        self.sockets: dict[str, zmq.asyncio.Socket] = {}
        self.endpoints: dict[str, str] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._peers: dict[str, dict[bytes, Peer]] = {"request": {}, "work": {}}
        self.feeds: dict[bytes, Feed] = {}
        self._clients = {c.name: c for c in self.access.clients}

    # --- start and stop -------------------------------------------------------------------------
    def bind(self) -> dict[str, str]:
        s = self.settings
        plain = self.access.enabled and s.plain
        kinds = {
            "request": (zmq.ROUTER, s.request_endpoint, plain),
            "push": (zmq.PULL, s.push_endpoint, plain),
            "work": (zmq.ROUTER, s.work_endpoint, plain),
            "pub": (zmq.XPUB, s.pub_endpoint, self.access.enabled),
        }
        for role, (kind, endpoint, use_plain) in kinds.items():
            if not endpoint:
                continue
            sock = self.context.socket(kind)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.MAXMSGSIZE, s.chunk_limit + 4096)
            if use_plain:
                sock.setsockopt(zmq.PLAIN_SERVER, 1)
                sock.setsockopt(zmq.ZAP_DOMAIN, b"zoscii")
            if kind == zmq.XPUB:
                sock.setsockopt(zmq.XPUB_MANUAL, 1)
                sock.setsockopt(zmq.SNDHWM, s.pub_hwm)
            sock.bind(endpoint)
            bound = sock.getsockopt_string(zmq.LAST_ENDPOINT)
            self.sockets[role] = sock
            self.endpoints[role] = bound
            log.info(
                "listening for %s clients on %s%s", role, bound, " (PLAIN)" if use_plain else ""
            )
        return self.endpoints

    def start(self) -> None:
        loops: dict[str, Callable[[], Awaitable[None]]] = {
            "request": lambda: self._router("request", self._request),
            "push": self._push,
            "work": lambda: self._router("work", self._work),
            "pub": self._subscriptions,
        }
        if self.access.enabled and (self.settings.plain or "pub" in self.sockets):
            loops["zap"] = self._zap
        for role in loops:
            if role in self.sockets or role == "zap":
                task = asyncio.create_task(_kept_alive(role, loops[role]), name=f"zmq-{role}")
                self._tasks.append(task)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for feed in list(self.feeds.values()):
            feed.stop()
        await asyncio.gather(
            *self._tasks, *(f.task for f in self.feeds.values()), return_exceptions=True
        )
        peers = [p.task for kind in self._peers.values() for p in kind.values() if p.task]
        if peers:
            await asyncio.wait(peers, timeout=self.settings.stop_grace_seconds)
        for sock in self.sockets.values():
            sock.close(linger=0)

    # --- who is asking ---------------------------------------------------------------------------
    def _client(
        self, frames: list[bytes], user_id: str | None
    ) -> tuple[Client | None, list[bytes]]:
        """The client a request proves (a ``Bearer`` first frame, or PLAIN's user), and
        the request without its token frame."""
        token = None
        if frames and frames[0].startswith(BEARER):
            token, frames = frames[0], frames[1:]
        if not self.access.enabled:
            return None, frames
        if token is not None:
            try:
                return self.access.authenticate(token.decode("utf-8", "replace")), frames
            except Unauthenticated:
                raise Refused("unauthenticated", "the token matches no client") from None
        if user_id and user_id in self._clients:
            return self._clients[user_id], frames
        raise Refused("unauthenticated", "no token: send a Bearer frame first, or use PLAIN")

    def _authorize(self, client: Client | None, action: str, queue: str) -> None:
        try:
            self.access.authorize(client, action, queue)
        except Forbidden as exc:
            raise Refused("forbidden", str(exc)) from None
        if action == "publish" and queue in self.settings.blocked_queues:
            raise Refused("forbidden", f"queue '{queue}' is blocked (ZOSCII_BLOCKED_QUEUES)")

    # --- ROUTER sockets: one request at a time per peer ------------------------------------------
    async def _router(
        self, role: str, handle: Callable[[list[bytes], Client | None], Awaitable[list[bytes]]]
    ) -> None:
        sock = self.sockets[role]
        peers = self._peers[role]
        while True:
            parts = await sock.recv_multipart(copy=False)
            user_id = _user_id(parts[1]) if len(parts) > 1 else None
            frames = [p.bytes for p in parts]
            rid, rest = frames[0], frames[1:]
            envelope = [rid]
            if rest and rest[0] == b"":  # REQ's delimiter: kept for the reply
                envelope.append(b"")
                rest = rest[1:]
            peer = peers.get(rid)
            if peer is None:
                if len(peers) >= MAX_PEERS:
                    self._count(role, "too_many_peers")
                    log.warning("%s: request refused: %d clients busy", role, len(peers))
                    continue
                peer = peers[rid] = Peer(envelope)
            peer.requests.append((rest, user_id))
            if peer.task is None:
                peer.task = asyncio.create_task(self._answer(role, rid, peer, handle))

    async def _answer(
        self,
        role: str,
        rid: bytes,
        peer: Peer,
        handle: Callable[[list[bytes], Client | None], Awaitable[list[bytes]]],
    ) -> None:
        sock = self.sockets[role]
        try:
            while peer.requests:
                frames, user_id = peer.requests.popleft()
                try:
                    client, frames = self._client(frames, user_id)
                    reply = await handle(frames, client)
                except Refused as exc:
                    self._count(role, exc.reason)
                    log.warning("%s: request refused: %s (%s)", role, exc.reason, exc)
                    reply = [b"error", exc.reason.encode(), str(exc).encode()]
                except ZosciiError as exc:
                    self._count(role, exc.reason)
                    log.warning("%s: request failed: %s (%s)", role, exc.reason, exc)
                    reply = [b"error", exc.reason.encode(), str(exc).encode()]
                with contextlib.suppress(zmq.ZMQError):
                    await sock.send_multipart([*peer.envelope, *reply])
        finally:
            peer.task = None
            if not peer.requests:
                self._peers[role].pop(rid, None)

    def _count(self, role: str, reason: str) -> None:
        self.metrics.errors.labels(role, reason).inc()

    # --- request-reply ---------------------------------------------------------------------------
    async def _request(self, frames: list[bytes], client: Client | None) -> list[bytes]:
        if len(frames) < 2:
            raise Refused("malformed", "expected [action, queue, ...]")
        action, queue = frames[0], _queue(frames[1])
        if action == b"publish":
            payloads = frames[2:]
            if not payloads:
                raise Refused("malformed", "publish without a payload frame")
            self._authorize(client, "publish", queue)
            self._check_sizes(payloads)
            names = await self.storage.run(self.storage.publish, queue, payloads)
            self.metrics.messages.labels("request", "published").inc(len(names))
            return [b"ok", *(n.encode() for n in names)]
        if action == b"fetch":
            self._authorize(client, "fetch", queue)
            after = _pointer(frames[2]) if len(frames) > 2 else ""
            got = await self.storage.run(self._fetch, queue, after)
            if got is None:
                return [b"empty"]
            self.metrics.messages.labels("request", "fetched").inc()
            return [b"ok", got[0].encode(), got[1]]
        raise Refused("bad_action", f"unknown action {action[:32]!r}: publish or fetch")

    def _fetch(self, queue: str, after: str) -> tuple[str, bytes] | None:
        try:
            result = self.storage.queues.fetch(queue, after)
        except QueueNotFound:
            return None
        if result.file is None:
            return None
        with result.file as file:
            if result.size > self.settings.chunk_limit:
                raise Refused(
                    "too_large", f"{result.name} has {result.size} bytes: fetch it over HTTP"
                )
            return result.name, file.read()

    def _check_sizes(self, payloads: list[bytes]) -> None:
        for payload in payloads:
            if len(payload) > self.settings.chunk_limit:
                raise Refused("too_large", f"a message of {len(payload)} bytes")

    # --- pipeline: PUSH in ------------------------------------------------------------------
    async def _push(self) -> None:
        """Take what PUSH clients send, publishing what arrived together in one commit
        per queue (a PUSH client streams; nothing waits for a reply)."""
        sock = self.sockets["push"]
        while True:
            parts = [await sock.recv_multipart(copy=False)]
            while len(parts) < PUSH_BATCH:
                try:
                    parts.append(await sock.recv_multipart(copy=False, flags=zmq.NOBLOCK))
                except zmq.Again:
                    break
            by_queue: dict[str, list[bytes]] = {}
            for message in parts:
                try:
                    queue, payloads = self._pushed(message)
                except Refused as exc:
                    self._count("push", exc.reason)
                    log.warning("push: message dropped: %s (%s)", exc.reason, exc)
                    continue
                by_queue.setdefault(queue, []).extend(payloads)
            for queue, payloads in by_queue.items():
                try:
                    names = await self.storage.run(self.storage.publish, queue, payloads)
                except ZosciiError as exc:
                    self._count("push", exc.reason)
                    log.warning("push: %d message(s) to %s lost: %s", len(payloads), queue, exc)
                    continue
                self.metrics.messages.labels("push", "published").inc(len(names))

    def _pushed(self, message: list[Any]) -> tuple[str, list[bytes]]:
        user_id = _user_id(message[0])
        client, frames = self._client([p.bytes for p in message], user_id)
        if len(frames) < 2:
            raise Refused("malformed", "expected [queue, payload...]")
        queue = _queue(frames[0])
        self._authorize(client, "publish", queue)
        self._check_sizes(frames[1:])
        return queue, frames[1:]

    # --- pipeline: workers pull a consumer group's messages -------------------------------------
    async def _work(self, frames: list[bytes], client: Client | None) -> list[bytes]:
        if len(frames) < 2:
            raise Refused("malformed", "expected [pull|ack|requeue|deadletter, queue, ...]")
        action, queue = frames[0], _queue(frames[1])
        group = self.settings.group
        if action == b"pull":
            self._authorize(client, "consume", queue)
            timeout = _number(frames[2]) if len(frames) > 2 else 0
            return await self._pull(queue, group, timeout)
        settle = {b"ack": "ack", b"requeue": "requeue", b"deadletter": "deadletter"}.get(action)
        if settle is None or len(frames) != 3:
            raise Refused("bad_action", "pull, ack, requeue or deadletter (with the receipt)")
        self._authorize(client, settle, queue)
        receipt = frames[2].decode("ascii", "replace")
        operation = {
            "ack": self.storage.groups.ack,
            "requeue": self.storage.groups.requeue,
            "deadletter": self.storage.groups.dead_letter,
        }[settle]
        try:
            (outcome,) = await self.storage.run(operation, queue, group, [receipt])
        except InvalidInput as exc:
            raise Refused("bad_receipt", str(exc)) from None
        if outcome.result != "ok":
            raise Refused(outcome.result, f"receipt {receipt[:100]}: {outcome.result}")
        self.metrics.messages.labels(
            "work", {"ack": "acked", "requeue": "requeued"}.get(settle, "dead_lettered")
        ).inc()
        return [b"ok"]

    async def _pull(self, queue: str, group: str, timeout_ms: int) -> list[bytes]:
        """The next message of the group, waiting for one (``timeout_ms`` 0: as long as
        it takes); a publish anywhere on the volume is seen within ``ZOSCII_ZMQ_POLL_MS``."""
        deadline = None if timeout_ms == 0 else time.monotonic() + timeout_ms / 1000
        poll = self.settings.poll_ms / 1000
        seen: object = None
        next_look = 0.0
        self.metrics.waiting_workers.inc()
        try:
            while True:
                token = await self.storage.run(self._change_token, queue, group)
                now = time.monotonic()
                if token != seen or now >= next_look:
                    seen, next_look = token, now + 1.0  # leases run out, requeues come due
                    got = await self.storage.run(self._lease, queue, group)
                    if got is not None:
                        self.metrics.messages.labels("work", "delivered").inc()
                        return [b"message", queue.encode(), *got]
                if deadline is not None and now >= deadline:
                    return [b"timeout"]
                await asyncio.sleep(poll if deadline is None else max(0, min(poll, deadline - now)))
        finally:
            self.metrics.waiting_workers.dec()

    def _lease(self, queue: str, group: str) -> list[bytes] | None:
        try:
            got = self.storage.groups.consume(
                queue, group, count=1, lease=self.settings.lease_seconds, consumer="zmq"
            )
        except QueueNotFound:
            return None
        if not got:
            return None
        (delivery,) = got
        with delivery.file as file:
            if delivery.size > self.settings.chunk_limit:
                self.storage.groups.dead_letter(
                    queue, group, [delivery.receipt], reason="too_large"
                )
                return None
            data = file.read()
        return [delivery.name.encode(), delivery.receipt.encode(), data]

    def _change_token(self, queue: str, group: str) -> tuple[object, object]:
        try:
            published: object = self.storage.queues.change_token(queue)
        except FileNotFoundError:
            published = None
        return published, _stat(self.storage.data_dir.group_log_path(queue, group))

    # --- publish-subscribe -----------------------------------------------------------------
    async def _subscriptions(self) -> None:
        """Subscriptions arrive one by one (XPUB_MANUAL): each is checked, then applied to
        the subscriber that sent it, and its topic followed while anyone subscribes."""
        sock = self.sockets["pub"]
        while True:
            frame = await sock.recv(copy=False)
            raw = frame.bytes
            if not raw or raw[0] not in (0, 1):
                continue
            topic = raw[1:]
            if raw[0] == 0:
                feed = self.feeds.get(topic)
                if feed is not None:
                    feed.subscribers -= 1
                    if feed.subscribers <= 0:
                        feed.stop()
                        del self.feeds[topic]
                        self.metrics.feeds.set(len(self.feeds))
                continue
            try:
                client, _ = self._client([], _user_id(frame))
                queue, after = await self._subscription(topic, client)
            except (Refused, ZosciiError) as exc:
                reason = getattr(exc, "reason", "error")
                self._count("pub", reason)
                log.warning("pub: subscription %r refused: %s (%s)", topic[:140], reason, exc)
                continue
            sock.setsockopt(zmq.SUBSCRIBE, topic)
            feed = self.feeds.get(topic)
            if feed is None:
                feed = self.feeds[topic] = Feed(self, topic, queue, after)
                self.metrics.feeds.set(len(self.feeds))
                log.info("pub: following %s after %s", topic.decode(), after or "its start")
            feed.subscribers += 1
            if client is not None:
                feed.clients.add(client.name)

    async def _subscription(self, topic: bytes, client: Client | None) -> tuple[str, str]:
        """(queue, the pointer to follow it after) of a subscription ``<queue>`` or
        ``<queue>@<name>``. With access control on, ØMQ's prefix matching is taken into
        account: nobody may be handed another queue's messages by it."""
        text = topic.decode("ascii", "replace")
        name, at, pointer = text.partition("@")
        queue = _queue(name.encode())
        if name != queue:
            raise Refused("bad_queue", f"subscribe to the queue's name as it is: {queue}")
        self._authorize(client, "fetch", queue)
        if client is not None:
            self._check_prefixes(topic, client)
        if at:
            return queue, _pointer(pointer.encode())
        feed = self.feeds.get(topic)
        if feed is not None:
            return queue, feed.after
        try:
            return queue, await self.storage.run(self.storage.queues.last_name, queue)
        except QueueNotFound:
            return queue, ""

    def _check_prefixes(self, topic: bytes, client: Client) -> None:
        """ØMQ delivers a message to every subscription that is a prefix of its topic:
        refuse a subscription that would hand its client a queue it may not read, or
        hand an existing subscriber this one."""
        for other, feed in self.feeds.items():
            if other != topic and other.startswith(topic):
                other_queue = other.decode().partition("@")[0]
                if not client.may("fetch", other_queue):
                    raise Refused("forbidden", f"it is a prefix of {other_queue}, not readable")
            if other != topic and topic.startswith(other):
                queue = topic.decode().partition("@")[0]
                for name in feed.clients:
                    holder = self._clients.get(name)
                    if holder is not None and not holder.may("fetch", queue):
                        raise Refused("forbidden", f"a subscriber of {other!r} may not read it")

    # --- ZAP (RFC 27): PLAIN's password is the token --------------------------------------------
    async def _zap(self) -> None:
        sock = self.context.socket(zmq.REP)
        sock.setsockopt(zmq.LINGER, 0)
        sock.bind(ZAP_ENDPOINT)
        try:
            while True:
                request = await sock.recv_multipart()
                version, sequence, mechanism = request[0], request[1], request[5]
                status, text, user = b"400", b"PLAIN with a client's token as password", b""
                if mechanism == b"PLAIN" and len(request) >= 8:
                    try:
                        client = self.access.authenticate(
                            "Bearer " + request[7].decode("utf-8", "replace")
                        )
                    except Unauthenticated:
                        self._count("zap", "unauthenticated")
                        log.warning(
                            "ZAP: PLAIN password matches no client (from %s)",
                            request[3].decode("ascii", "replace"),
                        )
                    else:
                        if client is not None:
                            status, text, user = b"200", b"OK", client.name.encode()
                await sock.send_multipart([version, sequence, status, text, user, b""])
        finally:
            sock.close(linger=0)


class Feed:
    """One followed topic: every message of its queue after ``after``, sent as it comes."""

    def __init__(self, patterns: Patterns, topic: bytes, queue: str, after: str) -> None:
        self.patterns = patterns
        self.topic = topic
        self.queue = queue
        self.after = after
        self.subscribers = 0
        self.clients: set[str] = set()
        self.task = asyncio.create_task(self._follow(), name=f"zmq-feed-{queue}")

    def stop(self) -> None:
        self.task.cancel()

    async def _follow(self) -> None:
        p = self.patterns
        sock = p.sockets["pub"]
        poll = p.settings.poll_ms / 1000
        seen: object = None
        try:
            while True:
                token = await p.storage.run(_token, p.storage, self.queue)
                if token != seen:
                    batch = await p.storage.run(self._next, FEED_BATCH)
                    for name, data in batch:
                        await sock.send_multipart([self.topic, name.encode(), data])
                        self.after = name
                    p.metrics.messages.labels("pub", "sent").inc(len(batch))
                    if len(batch) == FEED_BATCH:
                        continue  # more behind: no wait
                    seen = token
                await asyncio.sleep(poll)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("pub: following %s failed", self.queue)

    def _next(self, limit: int) -> list[tuple[str, bytes]]:
        out = []
        try:
            with contextlib.closing(
                self.patterns.storage.queues.iter_after(self.queue, self.after, limit)
            ) as found:
                for name, file in found:
                    with file:
                        out.append((name, file.read()))
        except QueueNotFound:
            pass
        return out


async def _kept_alive(role: str, serve: Callable[[], Awaitable[None]]) -> None:
    """``serve()`` again after a failure: one bad message never stops a socket."""
    while True:
        try:
            await serve()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s: the socket's loop failed; carrying on", role)
            await asyncio.sleep(0.1)


def _token(storage: Storage, queue: str) -> object:
    try:
        return storage.queues.change_token(queue)
    except FileNotFoundError:
        return None


def _stat(path: Any) -> object:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _user_id(frame: Any) -> str | None:
    """The ZAP user of the connection a frame came on (PLAIN), if any."""
    try:
        value = frame.get("User-Id")
    except (zmq.ZMQError, AttributeError):
        return None
    return value or None


def _queue(raw: bytes) -> str:
    try:
        return clean_queue(raw.decode("ascii"))
    except (UnicodeDecodeError, InvalidInput) as exc:
        raise Refused("bad_queue", f"queue name {raw[:100]!r}: {exc}") from None


def _pointer(raw: bytes) -> str:
    try:
        return clean_pointer(raw.decode("ascii"))
    except (UnicodeDecodeError, InvalidInput) as exc:
        raise Refused("bad_pointer", str(exc)) from None


def _number(raw: bytes) -> int:
    if not raw.isdigit() or len(raw) > 10:
        raise Refused("bad_number", f"{raw[:20]!r} is not a whole number")
    return int(raw)
