"""zpipes: zbroker's named pipes, wire-compatible with its clients, durable on the volume.

A ROUTER socket (``ipc://@/zpipes/<broker>`` and a TCP endpoint) speaks the zproto codec
(``codec.py``) with the reference broker's semantics, and also the seed's simpler
multi-frame commands (``OPEN``/``CLOSE``/``READ``/``WRITE``, replies ``OK``). Each client
(a routing id) is a ``Session`` with a mailbox: requests are served one at a time in
order, as zbroker's engine does; while a READ or WRITE waits, only CLOSE (two replies:
the call's ``*_FAILED``, then ``CLOSE_OK``) and PING are taken out of the mailbox.

Durability (README, "Durability"): a WRITE is answered WRITE_OK once its chunk is a
message of the pipe's queue, committed by the core (and once a reader is attached, as
zbroker answers). The reader's position is the pipe's state file, moved when the reader's
*next* request arrives: the clients make one call at a time, so that request says the
last reply got there. A gateway killed between a reply and the next request repeats that
one reply's bytes to the reader that opens the pipe again, and loses none. An explicit
CLOSE of the reader discards what was queued (the position jumps to the queue's end).

Gateways on one volume share pipes: who is attached is in fcntl locks on the pipe's
state file, and a waiting call looks at the volume every ``ZOSCII_ZMQ_POLL_MS`` for what
another gateway did (a chunk, a reader arriving, a close).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Coroutine
from dataclasses import dataclass, field, replace
from typing import Any

import zmq
import zmq.asyncio

from zoscii_zmq import codec
from zoscii_zmq.codec import Id, Malformed, Request
from zoscii_zmq.metrics import ZmqMetrics
from zoscii_zmq.pipes import Cursor, Pipe, Position, pipe_queue
from zoscii_zmq.settings import Settings
from zoscii_zmq.storage import Storage
from zosciimq.access import Client
from zosciimq.core.pipes import PipeFile, PipeRecord
from zosciimq.errors import Forbidden, QueueNotFound, ZosciiError

log = logging.getLogger(__name__)

SEED_COMMANDS = {b"OPEN": 2, b"CLOSE": 2, b"READ": 2, b"WRITE": 3}
WRITE_BATCH = 256  # pipelined WRITEs committed together at most
WRITE_BATCH_BYTES = 4 << 20
SYNC_SECONDS = 1.0  # reader positions are flushed this often (a power loss repeats, never loses)
OK = [b"OK"]


class Refused(Exception):
    """A request the gateway answers with a failure; ``reason`` is a fixed word."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


class Closed(Exception):
    """The session's CLOSE arrived while its call waited."""


@dataclass(eq=False)
class Session:
    """One client (a routing id) and its mailbox."""

    rid: bytes
    number: int
    last_seen: float
    mailbox: deque[tuple[str, Any]] = field(default_factory=deque)
    signal: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    pending: bool = False  # a READ or WRITE is waiting
    # zproto: one pipe, one end
    pipe: Pipe | None = None
    role: str = ""  # "reader" | "writer"
    seen: int = 0  # the other end's closes counted when this end opened
    shut: bool = False  # the other end closed since: short read then READ_END / WRITE_FAILED
    answered: Position | None = None  # the reader's position after its last reply
    # the seed interface: pipes OPENed, by name; the one it reads, if any
    opened: dict[bytes, Pipe] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"#{self.number}"

    def ping(self) -> None:
        self.signal.set()


class Zpipes:
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
        self.socket = context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        # A frame is held whole in memory: over the limit (plus the header), libzmq
        # drops the connection instead of reading it.
        self.socket.setsockopt(zmq.MAXMSGSIZE, settings.chunk_limit + 1024)
        self.socket.setsockopt(zmq.SNDHWM, 0)  # replies are never dropped (zbroker's too)
        self.sessions: dict[bytes, Session] = {}
        self.pipes: dict[str, Pipe] = {}
        self.endpoints: list[str] = []
        self.client = self._zpipes_client()
        self._numbers = itertools.count(1)
        self._tasks: list[asyncio.Task[None]] = []
        self._background: set[asyncio.Task[None]] = set()

    def _zpipes_client(self) -> Client | None:
        access = self.settings.access
        for client in access.clients:
            if client.name == self.settings.zpipes_client:
                return client
        return None

    # --- start and stop -----------------------------------------------------------------------
    def bind(self) -> list[str]:
        for endpoint in (self.settings.ipc_endpoint, self.settings.zpipes_tcp):
            if endpoint:
                self.socket.bind(endpoint)
                bound = self.socket.getsockopt_string(zmq.LAST_ENDPOINT)
                self.endpoints.append(bound)
                log.info("listening for zpipes clients on %s", bound)
        return self.endpoints

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._receive(), name="zpipes-receive"),
            asyncio.create_task(self._housekeeping(), name="zpipes-housekeeping"),
        ]

    async def stop(self) -> None:
        """Stop taking requests; every end is detached as for a crash (nothing discarded,
        positions flushed), so a restart carries on where this left off."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for session in list(self.sessions.values()):
            await self._drop(session, why="stopping")
        await self._sync_positions()
        self.socket.close(linger=0)

    # --- receiving ----------------------------------------------------------------------------
    async def _receive(self) -> None:
        while True:
            frames = await self.socket.recv_multipart(copy=True)
            try:
                self._route(frames)
            except Exception:
                log.exception("zpipes: a request could not be handled")
                self.metrics.errors.labels("zpipes", "internal").inc()

    def _route(self, frames: list[bytes]) -> None:
        rid, body = frames[0], frames[1:]
        request: tuple[str, Any]
        if len(body) == 1 and body[0] not in SEED_COMMANDS:
            try:
                decoded = codec.decode(body[0])
            except Malformed as exc:
                self._refuse(rid, exc.reason, str(exc))
                return
            request = ("zproto", decoded)
            command = decoded.id.name
        elif body and body[0] in SEED_COMMANDS and len(body) == SEED_COMMANDS[body[0]]:
            request = ("seed", body)
            command = body[0].decode()
        else:
            what = body[0][:16].hex() if body else "nothing"
            self._refuse(rid, "malformed", f"{len(body)} frame(s), starting {what}")
            return
        self.metrics.requests.labels(command).inc()
        session = self.sessions.get(rid)
        if session is None:
            session = self._new_session(rid)
            if session is None:
                return
        session.last_seen = time.monotonic()
        if len(session.mailbox) >= self.settings.max_pending:
            log.warning(
                "zpipes client %s dropped: over %d requests waiting (ZOSCII_ZPIPES_MAX_PENDING)",
                session,
                self.settings.max_pending,
            )
            self.metrics.errors.labels("zpipes", "too_many_pending").inc()
            self._spawn(self._drop(session, why="too many requests waiting"))
            return
        session.mailbox.append(request)
        session.ping()
        if session.task is None:
            session.task = asyncio.create_task(self._serve(session), name=f"zpipes-{session}")

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` on its own, holding a reference until it ends."""
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _new_session(self, rid: bytes) -> Session | None:
        if len(self.sessions) >= self.settings.max_sessions:
            for silent in self._expire(time.monotonic()):
                self._spawn(self._drop(silent, why="silent, and its place is wanted"))
        if len(self.sessions) >= self.settings.max_sessions:
            self._refuse(rid, "too_many_sessions", f"{len(self.sessions)} clients, the maximum")
            return None
        session = Session(rid, next(self._numbers), time.monotonic())
        self.sessions[rid] = session
        self.metrics.sessions.set(len(self.sessions))
        return session

    def _refuse(self, rid: bytes, reason: str, detail: str) -> None:
        """INVALID for what cannot be a request of this client, logged and counted."""
        log.warning("zpipes: invalid request (%s): %s", reason, detail)
        self.metrics.errors.labels("zpipes", reason).inc()
        self._send(rid, codec.reply(Id.INVALID))

    def _send(self, rid: bytes, *frames: bytes) -> None:
        kind = Id(frames[0][2]).name if codec.is_zproto(frames[0]) else "seed"
        self.metrics.replies.labels(kind).inc()
        with contextlib.suppress(zmq.ZMQError):  # the peer is gone: nobody to answer
            self.socket.send_multipart([rid, *frames], copy=len(frames[-1]) < 65536)

    # --- a session's requests, in order ------------------------------------------------------
    async def _serve(self, session: Session) -> None:
        try:
            while session.mailbox:
                mode, request = session.mailbox.popleft()
                if mode == "zproto":
                    await self._zproto(session, request)
                else:
                    await self._seed(session, request)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("zpipes client %s: internal error", session)
            self.metrics.errors.labels("zpipes", "internal").inc()
        finally:
            session.task = None
        if session.mailbox and self.sessions.get(session.rid) is session:  # arrived as it ended
            session.task = asyncio.create_task(self._serve(session), name=f"zpipes-{session}")

    async def _zproto(self, session: Session, request: Request) -> None:
        kind = request.id
        if kind is Id.PING:
            await self._confirm(session, session.pipe)
            self._send(session.rid, codec.reply(Id.PING_OK))
        elif kind in (Id.INPUT, Id.OUTPUT):
            if session.pipe is not None or session.opened:
                self._send(session.rid, codec.reply(Id.INVALID))  # already open: no change
            elif kind is Id.INPUT:
                await self._open_reader(session, request.pipename)
            else:
                await self._open_writer(session, request.pipename)
        elif session.pipe is None:
            self._send(session.rid, codec.reply(Id.INVALID))  # nothing open
        elif kind is Id.CLOSE:
            await self._close(session)
            self._send(session.rid, codec.reply(Id.CLOSE_OK))
        elif kind is Id.READ and session.role == "reader":
            await self._confirm(session, session.pipe)
            await self._call(session, self._read(session, request), Id.READ_FAILED)
        elif kind is Id.WRITE and session.role == "writer":
            await self._call(session, self._write(session, request), Id.WRITE_FAILED)
        else:
            self._send(session.rid, codec.reply(Id.INVALID))  # the wrong direction: no change

    async def _call(self, session: Session, call: Awaitable[None], failed: Id) -> None:
        """A READ or WRITE that may wait; a CLOSE meanwhile gets two replies."""
        try:
            await call
        except Closed:
            self._send(session.rid, codec.failed(failed, "pipe closed while waiting"))
            await self._close(session)
            self._send(session.rid, codec.reply(Id.CLOSE_OK))
        except Refused as exc:
            log.warning("zpipes client %s: %s refused: %s", session, failed.name, exc)
            self.metrics.errors.labels("zpipes", exc.reason).inc()
            self._send(session.rid, codec.failed(failed, str(exc)))

    # --- opening -----------------------------------------------------------------------------
    def _authorize(self, action: str, queue: str) -> None:
        access = self.settings.access
        if not access.enabled:
            return
        if self.client is None:
            raise Refused(
                "unauthenticated", "access control is on and ZOSCII_ZPIPES_CLIENT is unset"
            )
        try:
            access.authorize(self.client, action, queue)
        except Forbidden as exc:
            raise Refused("forbidden", str(exc)) from None
        if action == "publish" and queue in self.settings.blocked_queues:
            raise Refused("forbidden", f"queue '{queue}' is blocked (ZOSCII_BLOCKED_QUEUES)")

    async def _pipe(self, name: bytes) -> Pipe:
        if not name:
            raise Refused("bad_name", "a pipe needs a name")
        queue = pipe_queue(name)
        pipe = self.pipes.get(queue)
        if pipe is None:
            if len(self.pipes) >= self.settings.max_pipes:
                raise Refused("too_many_pipes", f"{len(self.pipes)} pipes open, the maximum")
            file = await self.storage.run(PipeFile, self.storage.data_dir, queue)
            pipe = self.pipes.get(queue)  # opened by another session meanwhile
            if pipe is None:
                pipe = self.pipes[queue] = Pipe(name, queue, file)
                self.metrics.pipes.set(len(self.pipes))
                log.info("pipe %r is queue %s", name[:80], queue)
            else:
                file.close()
        return pipe

    def _forget_if_idle(self, pipe: Pipe) -> None:
        if pipe.idle and self.pipes.get(pipe.queue) is pipe:
            del self.pipes[pipe.queue]
            pipe.file.close()
            self.metrics.pipes.set(len(self.pipes))

    async def _open_reader(self, session: Session, name: bytes) -> None:
        try:
            self._authorize("fetch", pipe_queue(name) if name else "")
            pipe = await self._attach_reader(session, name)
        except Refused as exc:
            self._failed_open(session, Id.INPUT_FAILED, exc)
            return
        record = await self.storage.run(pipe.file.read)
        session.pipe, session.role = pipe, "reader"
        session.seen, session.shut = record.writer_closes, False
        self._send(session.rid, codec.reply(Id.INPUT_OK))

    async def _attach_reader(self, session: Session, name: bytes) -> Pipe:
        """Make ``session`` the pipe's one reader (volume-wide), at its position. A local
        reader silent for the idle time gives way (it may wait for ever on a pipe nobody
        writes, and zbroker would have dropped it)."""
        pipe = await self._pipe(name)
        holder = pipe.reader
        if holder is not None and holder is not session:
            silent = time.monotonic() - holder.last_seen
            if silent < self.settings.idle_seconds:
                raise Refused("busy", "the pipe has a reader")
            await self._drop(holder, why=f"silent for {silent:.0f} s, its pipe is wanted")
            pipe = await self._pipe(name)
        if pipe.reader is session:
            return pipe
        if pipe.reader is not None or not pipe.file.hold_reader():
            self._forget_if_idle(pipe)
            raise Refused("busy", "the pipe has a reader (on another gateway)")
        pipe.reader = session  # before any wait: the pipe is in use from here on
        record = await self.storage.run(pipe.file.read)
        pipe.committed = Position.of(record)
        pipe.cursor = Cursor(self.storage.queues, pipe.queue, pipe.committed)
        session.answered = None
        self._notify(pipe)
        return pipe

    async def _open_writer(self, session: Session, name: bytes) -> None:
        try:
            self._authorize("publish", pipe_queue(name) if name else "")
            pipe = await self._pipe(name)
        except Refused as exc:
            self._failed_open(session, Id.OUTPUT_FAILED, exc)
            return
        if not pipe.writers:
            pipe.file.hold_writer()
        pipe.writers.add(session)
        record = await self.storage.run(pipe.file.read)
        session.pipe, session.role = pipe, "writer"
        session.seen, session.shut = record.reader_closes, False
        self._notify(pipe)
        self._send(session.rid, codec.reply(Id.OUTPUT_OK))

    def _failed_open(self, session: Session, kind: Id, exc: Refused) -> None:
        log.info("zpipes client %s: %s: %s", session, kind.name, exc)
        self.metrics.errors.labels("zpipes", exc.reason).inc()
        self._send(session.rid, codec.failed(kind, str(exc)))

    # --- closing -----------------------------------------------------------------------------
    async def _close(self, session: Session) -> None:
        """The client's CLOSE: a reader's discards what is queued; a writer's is counted,
        so the reader gets its short read and READ_END."""
        pipe, role = session.pipe, session.role
        if pipe is None:
            return
        session.pipe, session.role = None, ""
        if role == "reader":
            await self._detach_reader(session, pipe, discard=True)
        else:
            await self._detach_writer(session, pipe, counted=True)
        self._forget_if_idle(pipe)

    async def _detach_reader(self, session: Session, pipe: Pipe, *, discard: bool) -> None:
        if pipe.reader is not session:
            return
        if discard:

            def to_the_end(record: PipeRecord) -> PipeRecord:
                try:
                    last = self.storage.queues.last_name(pipe.queue)
                except QueueNotFound:
                    last = ""
                moved = record.moved(max(last, record.after), "", 0)
                return replace(moved, reader_closes=record.reader_closes + 1)

            record = await self.storage.run(pipe.file.update, to_the_end, sync=True)
            pipe.committed, pipe.dirty = Position.of(record), False
        elif pipe.dirty:
            await self.storage.run(pipe.file.sync)
            pipe.dirty = False
        pipe.reader, pipe.cursor = None, None
        session.answered = None
        pipe.file.release_reader()
        self._notify(pipe)

    async def _detach_writer(self, session: Session, pipe: Pipe, *, counted: bool) -> None:
        if session not in pipe.writers:
            return
        if counted:

            def one_more(record: PipeRecord) -> PipeRecord:
                return replace(record, writer_closes=record.writer_closes + 1)

            await self.storage.run(pipe.file.update, one_more, sync=True)
        pipe.writers.discard(session)
        if not pipe.writers:
            pipe.file.release_writer()
        self._notify(pipe)

    async def _drop(self, session: Session, *, why: str) -> None:
        """Forget ``session`` without a reply (silence, a stop): a reader's position is
        kept (the next reader gets every byte not answered yet), a writer counts as
        closed, as zbroker's expiry closes it."""
        if self.sessions.get(session.rid) is session:
            del self.sessions[session.rid]
            self.metrics.sessions.set(len(self.sessions))
        if session.task is not None and session.task is not asyncio.current_task():
            session.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await session.task
        session.mailbox.clear()
        pipes = set(session.opened.values())
        if session.pipe is not None:
            pipes.add(session.pipe)
        for pipe in pipes:
            pipe.opened.discard(session)
            await self._detach_reader(session, pipe, discard=False)
            if session.role == "writer":
                await self._detach_writer(session, pipe, counted=why != "stopping")
            self._forget_if_idle(pipe)
        session.pipe, session.opened = None, {}
        log.info("zpipes client %s dropped: %s", session, why)

    # --- reading -----------------------------------------------------------------------------
    async def _confirm(self, session: Session, pipe: Pipe | None) -> None:
        """The reader asks again: its last reply arrived, so its position moves there."""
        answered = session.answered
        if pipe is None or pipe.reader is not session or answered is None:
            return
        session.answered = None
        if answered == pipe.committed:
            return

        def moved(record: PipeRecord) -> PipeRecord:
            return record.moved(answered.after, answered.current, answered.offset)

        await self.storage.run(pipe.file.update, moved, sync=False)
        pipe.committed, pipe.dirty = answered, True

    async def _read(self, session: Session, request: Request) -> None:
        pipe, size = session.pipe, request.size
        assert pipe is not None and pipe.cursor is not None
        if size == 0:
            self._send(session.rid, codec.reply(Id.READ_END))
            return
        if size > self.settings.chunk_limit:
            raise Refused("too_large", f"a read of {size} bytes, over {self.settings.chunk_limit}")
        cursor = pipe.cursor
        deadline = _deadline(request.timeout)
        while True:
            buffered = cursor.buffered
            if buffered < size:
                buffered = await self.storage.run(cursor.load, size)
            if buffered >= size:
                self._answer(session, pipe, cursor.take(size))
                return
            if session.shut or await self._writers_gone(session, pipe):
                session.shut = True
                data = cursor.take(size)
                if data:
                    self._answer(session, pipe, data)
                else:
                    self._send(session.rid, codec.reply(Id.READ_END))
                return
            if not await self._wait(session, deadline):
                self._send(session.rid, codec.reply(Id.READ_TIMEOUT))
                return

    def _answer(self, session: Session, pipe: Pipe, data: bytes) -> None:
        assert pipe.cursor is not None
        session.answered = pipe.cursor.position()
        self.metrics.chunk_bytes.labels("read").inc(len(data))
        self._send(session.rid, codec.read_ok(data))

    async def _writers_gone(self, session: Session, pipe: Pipe) -> bool:
        """Whether a writer closed since the reader opened and none is attached now."""
        if pipe.writers:
            return False
        record = await self.storage.run(pipe.file.read)
        return record.writer_closes > session.seen and not pipe.file.writers_elsewhere()

    async def _wait(self, session: Session, deadline: float | None) -> bool:
        """Until something may have changed: a local event, a look at the volume
        (``ZOSCII_ZMQ_POLL_MS``), a PING (answered here) or a CLOSE (raises ``Closed``).
        False at the deadline."""
        poll = self.settings.poll_ms / 1000
        session.pending = True
        try:
            self._take_ping_or_close(session)
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            session.signal.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    session.signal.wait(), poll if left is None else min(poll, left)
                )
            self._take_ping_or_close(session)
            return True
        finally:
            session.pending = False

    def _take_ping_or_close(self, session: Session) -> None:
        """What zbroker takes out of the mailbox of a waiting client: PINGs are answered,
        a CLOSE ends the wait (``Closed``)."""
        for item in list(session.mailbox):
            mode, request = item
            if mode != "zproto":
                continue
            if request.id is Id.PING:
                session.mailbox.remove(item)
                self._send(session.rid, codec.reply(Id.PING_OK))
            elif request.id is Id.CLOSE:
                session.mailbox.remove(item)
                raise Closed

    # --- writing -----------------------------------------------------------------------------
    async def _write(self, session: Session, request: Request) -> None:
        pipe = session.pipe
        assert pipe is not None
        deadline = _deadline(request.timeout)
        while True:
            if session.shut or await self._reader_closed(session, pipe):
                session.shut = True
                raise Refused("reader_closed", "the reader closed the pipe")
            if pipe.reader is not None or pipe.file.reader_elsewhere():
                break
            if not await self._wait(session, deadline):
                self._send(session.rid, codec.reply(Id.WRITE_TIMEOUT))
                return
        if len(request.chunk) > self.settings.chunk_limit:
            raise Refused(
                "too_large",
                f"a chunk of {len(request.chunk)} bytes, over {self.settings.chunk_limit}",
            )
        batch = [request, *self._more_writes(session, request)]
        chunks = [r.chunk for r in batch]
        try:
            await self.storage.run(self.storage.publish, pipe.queue, chunks)
        except ZosciiError as exc:
            self._requeue(session, batch[1:])
            raise Refused(exc.reason, str(exc)) from None
        self.metrics.chunk_bytes.labels("written").inc(sum(map(len, chunks)))
        self._notify(pipe)
        for _ in batch:
            self._send(session.rid, codec.reply(Id.WRITE_OK))

    def _more_writes(self, session: Session, first: Request) -> list[Request]:
        """The WRITEs pipelined right behind ``first``: committed with it (one commit
        answers them all, in order), within ``WRITE_BATCH`` and its bytes."""
        batch: list[Request] = []
        size = len(first.chunk)
        while session.mailbox and len(batch) < WRITE_BATCH - 1:
            mode, request = session.mailbox[0]
            if mode != "zproto" or request.id is not Id.WRITE:
                break
            if size + len(request.chunk) > WRITE_BATCH_BYTES:
                break
            if len(request.chunk) > self.settings.chunk_limit:
                break
            session.mailbox.popleft()
            batch.append(request)
            size += len(request.chunk)
        return batch

    @staticmethod
    def _requeue(session: Session, requests: list[Request]) -> None:
        """Put back what a failed batch took from the mailbox: each is answered on its own."""
        for request in reversed(requests):
            session.mailbox.appendleft(("zproto", request))

    async def _reader_closed(self, session: Session, pipe: Pipe) -> bool:
        record = await self.storage.run(pipe.file.read)
        return record.reader_closes > session.seen

    def _notify(self, pipe: Pipe) -> None:
        for session in pipe.sessions():
            session.ping()

    # --- the seed's command interface --------------------------------------------------------
    async def _seed(self, session: Session, frames: list[bytes]) -> None:
        command, name = frames[0], frames[1]
        try:
            if session.pipe is not None:
                raise Refused("invalid", "this client has a zpipes pipe open")
            if command == b"OPEN":
                if name not in session.opened:
                    queue = pipe_queue(name) if name else ""
                    self._authorize_any(queue)
                    new = await self._pipe(name)
                    new.opened.add(session)
                    session.opened[name] = new
                self._send(session.rid, *OK)
                return
            pipe = session.opened.get(name)
            if pipe is None:
                raise Refused("not_open", "OPEN the pipe first")
            if command == b"CLOSE":
                del session.opened[name]
                pipe.opened.discard(session)
                await self._detach_reader(session, pipe, discard=False)
                self._forget_if_idle(pipe)
                self._send(session.rid, *OK)
            elif command == b"WRITE":
                self._authorize("publish", pipe.queue)
                chunk = frames[2]
                if len(chunk) > self.settings.chunk_limit:
                    raise Refused("too_large", f"a chunk of {len(chunk)} bytes")
                try:
                    await self.storage.run(self.storage.publish, pipe.queue, [chunk])
                except ZosciiError as exc:
                    raise Refused(exc.reason, str(exc)) from None
                self.metrics.chunk_bytes.labels("written").inc(len(chunk))
                self._notify(pipe)
                self._send(session.rid, *OK)
            else:
                self._authorize("fetch", pipe.queue)
                await self._seed_read(session, pipe)
        except Refused as exc:
            log.info("zpipes client %s: %s refused: %s", session, command.decode(), exc)
            self.metrics.errors.labels("zpipes", exc.reason).inc()
            self._send(session.rid, b"ERROR", str(exc).encode())

    def _authorize_any(self, queue: str) -> None:
        """OPEN does not say which way: either right will do."""
        try:
            self._authorize("fetch", queue)
        except Refused:
            self._authorize("publish", queue)

    async def _seed_read(self, session: Session, pipe: Pipe) -> None:
        """The next chunk (the rest of it, after a zproto reader stopped mid-chunk),
        waiting as long as it takes."""
        if pipe.reader is not session:
            pipe = await self._attach_reader(session, pipe.name)
            session.opened[pipe.name] = pipe
            pipe.opened.add(session)
        else:
            await self._confirm(session, pipe)
        cursor = pipe.cursor
        assert cursor is not None
        while not await self.storage.run(cursor.load, 1) and not cursor.chunks:
            await self._wait(session, None)
        data = cursor.take_chunk()
        session.answered = cursor.position()
        self.metrics.chunk_bytes.labels("read").inc(len(data))
        self._send(session.rid, data)

    # --- housekeeping --------------------------------------------------------------------------
    async def _housekeeping(self) -> None:
        """Drop silent clients; flush moved reader positions."""
        every = min(SYNC_SECONDS, max(0.05, self.settings.idle_seconds / 4))
        next_sync = time.monotonic() + SYNC_SECONDS
        while True:
            await asyncio.sleep(every)
            try:
                now = time.monotonic()
                for session in self._expire(now):
                    await self._drop(session, why=f"silent for {self.settings.idle_seconds:g} s")
                if now >= next_sync:
                    next_sync = now + SYNC_SECONDS
                    await self._sync_positions()
            except Exception:
                log.exception("zpipes housekeeping failed")

    def _expire(self, now: float) -> list[Session]:
        """The sessions silent for the idle time, out of the table (as zbroker's engine
        expires a client whatever it waits for); the caller ``_drop``s them."""
        limit = now - self.settings.idle_seconds
        silent = [s for s in self.sessions.values() if s.last_seen < limit]
        for session in silent:
            del self.sessions[session.rid]
            self.metrics.expired.inc()
        if silent:
            self.metrics.sessions.set(len(self.sessions))
        return silent

    async def _sync_positions(self) -> None:
        dirty = [p for p in self.pipes.values() if p.dirty]
        for pipe in dirty:
            pipe.dirty = False
            with contextlib.suppress(OSError, ValueError):
                await self.storage.run(pipe.file.sync)

    # --- health ---------------------------------------------------------------------------------
    def details(self) -> dict[str, Any]:
        return {"zpipes_sessions": len(self.sessions), "zpipes_pipes": len(self.pipes)}


def _deadline(timeout_ms: int) -> float | None:
    return None if timeout_ms == 0 else time.monotonic() + timeout_ms / 1000
