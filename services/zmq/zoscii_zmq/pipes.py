"""Pipes on queues: the name mapping, the ends this gateway serves, the reader's stream.

A pipe's chunks are the messages of one queue, so whatever is written through a pipe
is an ordinary message (fetchable over HTTP, replicated, cleaned by retention) and a
message published to that queue over HTTP is pipe data. What the queue does not hold,
the reader's position and the closes, is the pipe's state file (``zosciimq.core.pipes``),
shared by every gateway on the volume.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from zosciimq.core import QueueStore
from zosciimq.core.pipes import PipeFile, PipeRecord
from zosciimq.errors import QueueNotFound

if TYPE_CHECKING:
    from zoscii_zmq.zpipes import Session

PLAIN_PREFIX = "zpipe-"  # zpipe-<name>: a name a queue may have as it is
HASHED_PREFIX = "zpipe_"  # zpipe_<40 hex>: any other name (case, spaces, slashes, UTF-8...)
_PLAIN = re.compile(rb"[a-z0-9_-]{1,122}")
LOAD_MESSAGES = 256  # messages read ahead at most per look at the queue


def pipe_queue(name: bytes) -> str:
    """The queue holding pipe ``name``'s chunks. Names are case-sensitive in zpipes and
    queue names are not, so only a lowercase name a queue may have maps to itself."""
    if _PLAIN.fullmatch(name):
        return PLAIN_PREFIX + name.decode("ascii")
    return HASHED_PREFIX + hashlib.sha256(name).hexdigest()[:40]


@dataclass
class Position:
    """The reader's place: every message up to ``after`` read, ``offset`` bytes of
    ``current`` (the next one) too."""

    after: str = ""
    current: str = ""
    offset: int = 0

    @classmethod
    def of(cls, record: PipeRecord) -> Position:
        return cls(record.after, record.current, record.offset)


class Cursor:
    """The reader's stream: the position, and the messages read ahead of it.

    ``take(n)`` answers a read of exactly ``n`` bytes (fewer when told the writers are
    gone) across message boundaries. Loading runs in the thread pool (``load``); memory
    is what the reads in hand ask for plus one message.
    """

    def __init__(self, store: QueueStore, queue: str, start: Position) -> None:
        self.store = store
        self.queue = queue
        self.after = start.after  # the last message taken whole
        self.chunks: deque[tuple[str, bytes]] = deque()
        self.head = 0  # bytes of chunks[0] taken
        self.buffered = 0  # bytes loaded and not taken
        self.skip = (start.current, start.offset) if start.offset else None
        self.exhausted_at: object = None  # the queue's change token when last read to its end

    @property
    def tail(self) -> str:
        """The last message loaded (where the next load goes on)."""
        return self.chunks[-1][0] if self.chunks else self.after

    def position(self) -> Position:
        if self.chunks and self.head:
            return Position(self.after, self.chunks[0][0], self.head)
        if self.skip is not None:  # not loaded yet: still where it started
            return Position(self.after, *self.skip)
        return Position(self.after)

    def load(self, want: int) -> int:
        """Read messages after the tail until ``want`` bytes are buffered (thread pool);
        how many bytes are buffered now. The queue is not listed again until its index
        changed since it was last read to its end."""
        if self.buffered >= want:
            return self.buffered
        try:
            token = self.store.change_token(self.queue)
        except FileNotFoundError:  # nothing published yet
            return self.buffered
        if token == self.exhausted_at:
            return self.buffered
        while self.buffered < want:
            got = 0
            try:
                with contextlib.closing(
                    self.store.iter_after(self.queue, self.tail, LOAD_MESSAGES)
                ) as found:
                    for name, file in found:
                        with file:
                            self._add(name, file.read())
                        got += 1
                        if self.buffered >= want:
                            return self.buffered
            except QueueNotFound:
                pass
            if got < LOAD_MESSAGES:
                self.exhausted_at = token
                break
        return self.buffered

    def _add(self, name: str, data: bytes) -> None:
        """Buffer a loaded message; the first one after a restart may be read in part
        (a message deleted meanwhile: the offset was into it, and is dropped)."""
        skip, self.skip = self.skip, None
        offset = skip[1] if skip is not None and skip[0] == name else 0
        if offset and offset >= len(data):  # read whole before: nothing left of it
            self.after = name
            return
        if not self.chunks:
            self.head = offset
        self.chunks.append((name, data))
        self.buffered += len(data) - offset

    def take(self, size: int) -> bytes:
        """Up to ``size`` buffered bytes, in order."""
        parts = []
        while size and self.chunks:
            name, data = self.chunks[0]
            part = data[self.head : self.head + size]
            parts.append(part)
            size -= len(part)
            self.head += len(part)
            self.buffered -= len(part)
            if self.head >= len(data):
                self.chunks.popleft()
                self.after, self.head = name, 0
        return b"".join(parts)

    def take_chunk(self) -> bytes:
        """The rest of the current message (the seed's READ: one chunk)."""
        if not self.chunks:
            return b""
        name, data = self.chunks.popleft()
        part = data[self.head :]
        self.buffered -= len(part)
        self.after, self.head = name, 0
        return part


@dataclass(eq=False)
class Pipe:
    """A pipe with at least one end on this gateway."""

    name: bytes
    queue: str
    file: PipeFile
    reader: Session | None = None
    cursor: Cursor | None = None
    committed: Position = field(default_factory=Position)  # what the state file says
    dirty: bool = False  # a position written and not flushed yet
    writers: set[Session] = field(default_factory=set)
    opened: set[Session] = field(default_factory=set)  # the seed interface's OPENs
    mutex: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def idle(self) -> bool:
        return self.reader is None and not self.writers and not self.opened

    def sessions(self) -> set[Session]:
        everyone = set(self.writers) | self.opened
        if self.reader is not None:
            everyone.add(self.reader)
        return everyone
