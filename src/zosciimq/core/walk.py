"""Walking the data directory: every listing a service makes, classified by the core.

Services judge files (claireup deletes, statissa counts); which entries there are and
what each one *is* (a message, a stray, a queue's index...) is the disk format's
business, so it is decided here once. Every walk streams ``os.scandir``, so memory does
not grow with the file count, and yields ``Found``: the directory entry itself (its
type, and on most file systems its stat, cost no extra system call) plus the core's
classification. Nothing here is cached or sorted; a file that appears during a walk may
or may not be seen, and is judged by its own name whenever it is.

A directory that does not exist (not created yet, or removed while walking) is empty.
Any other listing error goes to ``on_error(path, exc)`` and the walk carries on, or is
raised when there is no ``on_error``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from enum import StrEnum
from typing import NamedTuple

from zosciimq.core.layout import (
    INDEX_SUFFIX,
    JOURNAL_SUFFIX,
    LEFTOVER_PREFIX,
    LEFTOVER_SUFFIX,
    TTL_SUFFIX,
    USAGE_SUFFIX,
    WAL_SUFFIX,
    DataDir,
)
from zosciimq.core.names import (
    RESERVED_QUEUES,
    MessageName,
    is_nonce_name,
    is_queue_name,
    parse_name,
)
from zosciimq.errors import InvalidInput

MESSAGE_SUFFIX = ".bin"  # what every message name ends with (names.parse_name)
STORE_DEPTH = 3  # store/<d1>/<d2>/<d3>/<name>.bin (names.store_dirs)

OnError = Callable[[str, OSError], None]


class Kind(StrEnum):
    """What the core makes of a directory entry."""

    MESSAGE = "message"  # a regular file whose name parses: Found.message
    MALFORMED = "malformed"  # a regular *.bin file whose name does not parse
    STRAY = "stray"  # anything else the format does not expect where it is
    QUEUE = "queue"  # a queue directory: Found.queue
    NONCE = "nonce"  # a nonce marker (its name is the nonce)
    UPLOAD = "upload"  # a file in queues/temp: an upload in progress or a crash's leftover
    INDEX = "index"  # .zoscii/index/<q>.idx: Found.queue
    JOURNAL = "journal"  # .zoscii/index/<q>.journal (earlier versions): Found.queue
    WAL = "wal"  # .zoscii/index/<q>.wal, the queue's write-ahead log: Found.queue
    SIDECAR = "sidecar"  # .zoscii/index/<q>.ttl or <q>.usage (expiries, policy counts)
    LEFTOVER = "leftover"  # .zoscii/index/.<name>.<hex>.tmp: Found.queue when it can tell


class Found(NamedTuple):
    """One directory entry and what it is."""

    entry: os.DirEntry[str]
    kind: Kind
    message: MessageName | None = None
    queue: str | None = None

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def path(self) -> str:
        return self.entry.path


# --- queues ------------------------------------------------------------------------------
def iter_queue_dirs(data_dir: DataDir, on_error: OnError | None = None) -> Iterator[Found]:
    """The entries of ``queues/``: QUEUE directories, or STRAY; ``queues/temp`` is skipped
    (it holds uploads, see ``iter_uploads``)."""
    for entry in _scan(data_dir.queues, on_error):
        if entry.name in RESERVED_QUEUES:
            continue
        if entry.is_dir(follow_symlinks=False) and is_queue_name(entry.name):
            yield Found(entry, Kind.QUEUE, queue=entry.name)
        else:
            yield Found(entry, Kind.STRAY)


def iter_queue_files(
    data_dir: DataDir, queue: str, on_error: OnError | None = None
) -> Iterator[Found]:
    """The entries of one queue directory: MESSAGE, MALFORMED or STRAY."""
    return iter_message_files(data_dir.queue_dir(queue), on_error)


def iter_message_files(
    directory: str | os.PathLike[str], on_error: OnError | None = None
) -> Iterator[Found]:
    """The entries of a directory that holds messages (a queue, or a store leaf)."""
    for entry in _scan(directory, on_error):
        yield _message_file(entry)


# --- the store ---------------------------------------------------------------------------
def iter_store_files(data_dir: DataDir, on_error: OnError | None = None) -> Iterator[Found]:
    """Every entry of the store's leaf directories (MESSAGE, MALFORMED or STRAY), and as
    STRAY every non-directory at the levels above them, where only fan-out directories
    belong."""
    return _walk_store(data_dir.store, STORE_DEPTH, on_error)


def iter_fanout_files(
    root: str | os.PathLike[str], on_error: OnError | None = None
) -> Iterator[Found]:
    """``iter_store_files`` below one first-level fan-out directory (``store.fanout_roots``),
    so a parallel scanner can hand each one to a different worker."""
    return _walk_store(root, STORE_DEPTH - 1, on_error)


def _walk_store(
    directory: str | os.PathLike[str], depth: int, on_error: OnError | None
) -> Iterator[Found]:
    for entry in _scan(directory, on_error):
        if depth == 0:
            yield _message_file(entry)
        elif entry.is_dir(follow_symlinks=False):
            yield from _walk_store(entry.path, depth - 1, on_error)
        else:
            yield Found(entry, Kind.STRAY)


# --- nonces and uploads ------------------------------------------------------------------
def iter_nonce_markers(data_dir: DataDir, on_error: OnError | None = None) -> Iterator[Found]:
    """The entries of ``nonce/``: NONCE markers (regular files named as a nonce), or STRAY."""
    for entry in _scan(data_dir.nonces, on_error):
        if entry.is_file(follow_symlinks=False) and is_nonce_name(entry.name):
            yield Found(entry, Kind.NONCE)
        else:
            yield Found(entry, Kind.STRAY)


def iter_uploads(data_dir: DataDir, on_error: OnError | None = None) -> Iterator[Found]:
    """The entries of ``queues/temp``: UPLOAD files (whatever their name: the original
    writes its own), or STRAY."""
    for entry in _scan(data_dir.temp, on_error):
        kind = Kind.UPLOAD if entry.is_file(follow_symlinks=False) else Kind.STRAY
        yield Found(entry, kind)


# --- the core's own files ----------------------------------------------------------------
def iter_index_files(data_dir: DataDir, on_error: OnError | None = None) -> Iterator[Found]:
    """The entries of ``.zoscii/index``: each queue's INDEX, JOURNAL and SIDECARs,
    LEFTOVERs of rewrites, and STRAY for anything else (not a regular file, or a name the core does
    not write: it may keep other files here in a later version)."""
    for entry in _scan(data_dir.indexes, on_error):
        yield _index_file(entry)


def _index_file(entry: os.DirEntry[str]) -> Found:
    if not entry.is_file(follow_symlinks=False):
        return Found(entry, Kind.STRAY)
    name = entry.name
    if name.startswith(LEFTOVER_PREFIX) and name.endswith(LEFTOVER_SUFFIX):
        # ".<q>.idx.<hex>.tmp": the file it was to replace, without its random part
        target = name[len(LEFTOVER_PREFIX) : -len(LEFTOVER_SUFFIX)].rpartition(".")[0]
        return Found(entry, Kind.LEFTOVER, queue=_queue_of(target)[1])
    kind, queue = _queue_of(name)
    if kind is None:
        return Found(entry, Kind.STRAY)
    return Found(entry, kind, queue=queue)


def _queue_of(name: str) -> tuple[Kind | None, str | None]:
    """(kind, queue) for ``<q>.idx``, ``<q>.journal``, ``<q>.wal``, ``<q>.ttl``, ``<q>.usage``, else
    (None, None)."""
    for kind, suffix in _PER_QUEUE:
        if name.endswith(suffix):
            queue = name[: -len(suffix)]
            if is_queue_name(queue):
                return kind, queue
    return None, None


_PER_QUEUE = (
    (Kind.INDEX, INDEX_SUFFIX),
    (Kind.JOURNAL, JOURNAL_SUFFIX),
    (Kind.WAL, WAL_SUFFIX),
    (Kind.SIDECAR, TTL_SUFFIX),
    (Kind.SIDECAR, USAGE_SUFFIX),
)


# --- helpers -----------------------------------------------------------------------------
def _message_file(entry: os.DirEntry[str]) -> Found:
    if not entry.is_file(follow_symlinks=False):
        return Found(entry, Kind.STRAY)
    try:
        return Found(entry, Kind.MESSAGE, message=parse_name(entry.name))
    except InvalidInput:
        kind = Kind.MALFORMED if entry.name.endswith(MESSAGE_SUFFIX) else Kind.STRAY
        return Found(entry, kind)


def _scan(
    directory: str | os.PathLike[str], on_error: OnError | None
) -> Iterator[os.DirEntry[str]]:
    try:
        entries = os.scandir(directory)
    except FileNotFoundError:
        return
    except OSError as exc:
        if on_error is None:
            raise
        on_error(os.fspath(directory), exc)
        return
    with entries:
        yield from entries
