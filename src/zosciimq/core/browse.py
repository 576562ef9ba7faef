"""Looking at a queue the way an operator does: its newest names, and one message's
metadata and first bytes, without writing a byte.

An operator's page must cost the queue nothing: no lock taken (a publisher is never
delayed), no index repaired or rebuilt (that is the api's job, under the lock), no lock
file or directory created, so it also works on a read-only mount. Hence not
``QueueStore``, whose reads may repair the index.

* ``latest``: the last N names. From the index (``.zoscii/index/<q>.idx``, opened
  read-only) when its header agrees with the directory: a few preads from its tail, one
  ``stat`` per name shown (which also skips names deleted since). Otherwise (no index,
  a crashed publish, another writer, a publish committing just now) a listing of the
  directory that keeps only the N largest names in memory and stops after
  ``scan_limit`` entries, saying so (``Latest.complete``): a view is bounded even on a
  queue of millions.
* ``peek``: a message's name fields, size and modification time, and its first bytes.
  The queue and the name are checked by the core's rules (``names``) before anything is
  opened, and the file is opened relative to the queue directory without following
  links: no value from a URL can reach outside the data directory.
"""

from __future__ import annotations

import heapq
import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from stat import S_ISDIR, S_ISREG
from typing import Literal

from zosciimq.core import index as idx
from zosciimq.core import walk
from zosciimq.core.layout import DataDir
from zosciimq.core.names import MessageName, is_queue_name, parse_name
from zosciimq.errors import InvalidInput, MessageNotFound, QueueNotFound

DEFAULT_SCAN_LIMIT = 100_000  # directory entries a fallback listing looks at, at most
MAX_LATEST = 1000
MAX_PEEK_BYTES = 65_536
INDEX_CHUNK = 256  # records read from the index's tail at a time
MAX_GONE = 4096  # indexed names found deleted before the index is no longer believed
COMMIT_RETRIES = 5  # a publish committing now: its header is rewritten within ms
COMMIT_PAUSE = 0.01

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO planted under a message's name must not hang the reader
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


@dataclass(frozen=True)
class MessageInfo:
    """What the disk says about one message: its name's fields and its file's."""

    name: str
    message: MessageName
    size: int
    modified: float  # the file's mtime (Unix seconds): when it reached this volume

    @property
    def published_at(self) -> datetime:
        return self.message.published_at

    @property
    def expires_at(self) -> datetime:
        return self.message.expires_at

    @property
    def retention_days(self) -> int:
        return self.message.retention_days

    @property
    def modified_at(self) -> datetime:
        return datetime.fromtimestamp(self.modified, UTC)


@dataclass(frozen=True)
class Latest:
    """The newest names of a queue, newest first, and how they were found."""

    queue: str
    messages: list[MessageInfo]
    source: Literal["index", "listing"]
    complete: bool = True  # False: the listing stopped at scan_limit entries


@dataclass(frozen=True)
class Peek:
    info: MessageInfo
    head: bytes  # the first bytes (all of them when ``complete``)

    @property
    def complete(self) -> bool:
        return len(self.head) >= self.info.size


def check_queue(queue: str) -> str:
    """``queue`` when it is exactly a queue directory's name (no lowercasing, no path)."""
    if not isinstance(queue, str) or not is_queue_name(queue):
        raise InvalidInput(f"Invalid queue name '{str(queue)[:100]}'.")
    return queue


def check_name(name: str) -> MessageName:
    """The parsed message name, when ``name`` is exactly one (never a path)."""
    message = parse_name(name)
    if str(message) != name:
        raise InvalidInput(f"Invalid name '{name[:100]}'.")
    return message


def latest(
    data_dir: DataDir, queue: str, limit: int = 20, *, scan_limit: int = DEFAULT_SCAN_LIMIT
) -> Latest:
    """The ``limit`` newest messages of ``queue`` (names sort in publish order)."""
    check_queue(queue)
    limit = max(1, min(limit, MAX_LATEST))
    with _open_queue_dir(data_dir, queue) as dir_fd:
        found = _from_index(data_dir, queue, dir_fd.fd, limit)
        if found is not None:
            return Latest(queue, found, "index")
        messages, complete = _from_listing(data_dir, queue, dir_fd.fd, limit, scan_limit)
        return Latest(queue, messages, "listing", complete)


def peek(data_dir: DataDir, queue: str, name: str, length: int = 256) -> Peek:
    """``name``'s metadata and its first ``length`` bytes (at most ``MAX_PEEK_BYTES``)."""
    check_queue(queue)
    message = check_name(name)
    length = max(0, min(length, MAX_PEEK_BYTES))
    with _open_queue_dir(data_dir, queue) as dir_fd:
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd.fd)
        except FileNotFoundError:
            raise MessageNotFound(f"Message '{name}' not found in queue '{queue}'.") from None
        except OSError as exc:  # ELOOP: a link, never served
            raise MessageNotFound(f"Message '{name}' not found in queue '{queue}'.") from exc
        try:
            stat = os.fstat(fd)
            if not S_ISREG(stat.st_mode):
                raise MessageNotFound(f"Message '{name}' not found in queue '{queue}'.")
            chunks, got = [], 0
            while got < length and (chunk := os.pread(fd, length - got, got)):
                chunks.append(chunk)
                got += len(chunk)
        finally:
            os.close(fd)
    info = MessageInfo(name, message, stat.st_size, stat.st_mtime)
    return Peek(info, b"".join(chunks))


# --- the index -------------------------------------------------------------------------
def _from_index(data_dir: DataDir, queue: str, dir_fd: int, limit: int) -> list[MessageInfo] | None:
    """The newest names from the index, or None when it is not to be believed now."""
    try:
        fd = os.open(data_dir.index_path(queue), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with idx.IndexFile(fd, writable=False) as index:
        header = _agreeing_header(index, dir_fd)
        if header is None:
            return None
        found: list[MessageInfo] = []
        gone = 0
        end = header.committed
        while end > 0 and len(found) < limit:
            start = max(0, end - INDEX_CHUNK)
            for name in reversed(list(index.iter_from(start, end))):
                info = _info(dir_fd, name)
                if info is None:
                    gone += 1
                    if gone > MAX_GONE:
                        return None  # mostly deleted names: list the directory instead
                    continue
                found.append(info)
                if len(found) == limit:
                    break
            end = start
        return found


def _agreeing_header(index: idx.IndexFile, dir_fd: int) -> idx.IndexHeader | None:
    """The header when it describes the directory as it is; a publish in flight (its
    ``pending``) is waited for briefly, as it rewrites the header within milliseconds."""
    for attempt in range(COMMIT_RETRIES):
        header = index.header()
        if header is None or header.stale or not index.tail_is_sound(header.committed):
            return None
        if header.matches(os.fstat(dir_fd)):
            return header
        if not header.pending:
            return None  # another writer, claireup, a crash: the directory is the truth
        if attempt + 1 < COMMIT_RETRIES:
            time.sleep(COMMIT_PAUSE)
    return None


def _info(dir_fd: int, name: str) -> MessageInfo | None:
    """The message ``name`` as it is on disk; None when it is gone or no message."""
    try:
        message = check_name(name)
        stat = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except (InvalidInput, FileNotFoundError):
        return None
    if not S_ISREG(stat.st_mode):
        return None
    return MessageInfo(name, message, stat.st_size, stat.st_mtime)


# --- the directory ---------------------------------------------------------------------
def _from_listing(
    data_dir: DataDir, queue: str, dir_fd: int, limit: int, scan_limit: int
) -> tuple[list[MessageInfo], bool]:
    """The ``limit`` largest message names among the first ``scan_limit`` entries."""
    seen = 0
    complete = True
    top: list[str] = []  # a min-heap of the largest names so far
    for entry in walk.iter_queue_files(data_dir, queue):
        if seen >= scan_limit:
            complete = False
            break
        seen += 1
        if entry.kind is not walk.Kind.MESSAGE:
            continue
        if len(top) < limit:
            heapq.heappush(top, entry.name)
        elif entry.name > top[0]:
            heapq.heapreplace(top, entry.name)
    found = []
    for name in sorted(top, reverse=True):
        info = _info(dir_fd, name)
        if info is not None:
            found.append(info)
    return found, complete


class _QueueDir:
    """The queue directory open (never through a link), closed on exit."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __enter__(self) -> _QueueDir:
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


def _open_queue_dir(data_dir: DataDir, queue: str) -> _QueueDir:
    try:
        fd = os.open(data_dir.queue_dir(queue), _DIR_FLAGS)
    except OSError:  # missing, a link (ELOOP), a file (ENOTDIR)
        raise QueueNotFound(f"Queue '{queue}' not found.") from None
    if not S_ISDIR(os.fstat(fd).st_mode):
        os.close(fd)
        raise QueueNotFound(f"Queue '{queue}' not found.")
    return _QueueDir(fd)
