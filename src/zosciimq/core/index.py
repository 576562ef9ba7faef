"""The per-queue index: why fetch costs the same at a thousand or a million messages.

``.zoscii/index/<queue>.idx`` is a 512-byte header followed by fixed-width records, one
message name each, in name order. Names are written under the queue lock in the order
they are allocated, so the file is sorted and fetch finds "the first name after the
pointer" by binary search (a few preads) instead of listing and sorting the directory.

Only the first ``committed`` records are visible. A publishing group writes its records
*before* its messages are durable (so one journal commit of the file system can carry
both the directory and the index) and makes them visible by raising ``committed`` in
the header afterwards. The header is one fixed-width ASCII line with a CRC, so a reader
never acts on a half-written one.

The index is a cache of the directory, never the truth:

* a message deleted by the retention cleaner stays listed until the next rebuild;
  fetch opens the file and moves on when it is gone;
* the header remembers the queue directory's mtime and inode as of the last change made
  through the index; when the directory says otherwise (another writer, the original PHP
  implementation, a crash, claireup) the index is rebuilt from a listing, under the lock;
* ``pending`` counts records of a group between "names allocated" and "committed", and
  ``wal_off``/``wal_lsn`` say where in the queue's write-ahead log its record starts: if
  its publisher died there, the next lock holder redoes it from the log or, when its
  record never became whole, drops it (core.recovery);
* a rebuild writes a new file, renames it over the old one and then marks the old one
  ``stale``, so a process holding the old one open knows to reopen the path.
"""

from __future__ import annotations

import bisect
import errno
import os
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from zosciimq.core.layout import leftover_path
from zosciimq.core.names import NAME_LENGTH, is_message_name

READ_ONLY_ERRORS = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})
HEADER_SIZE = 512
RECORD_SIZE = NAME_LENGTH + 1  # name + "\n", so `tail` on an index is readable
MAGIC = b"ZOSCII-INDEX-3 "
# magic, last (64), committed (12), pending (6), WAL offset (12) and sequence number (16)
# of the pending group's record, dir mtime ns (20), dir inode (20), stale (1), then the
# CRC-32 of everything before it (8 hex). An older version's header reads as unreadable:
# the index is rebuilt once.
_LINE = len(MAGIC) + 64 + 1 + 12 + 1 + 6 + 1 + 12 + 1 + 16 + 1 + 20 + 1 + 20 + 1 + 1
_ZERO_NAME = " " * NAME_LENGTH


@dataclass
class IndexHeader:
    last: str = ""  # highest name ever allocated in this queue: the sequencer's floor
    committed: int = 0  # visible records
    pending: int = 0  # records of a group in flight (allocated, not yet committed)
    wal_off: int = 0  # where that group's record starts in the write-ahead log (core.wal)
    wal_lsn: int = 0
    dir_mtime_ns: int = 0
    dir_ino: int = 0
    stale: bool = False  # replaced by a rebuild: reopen the path

    def encode(self) -> bytes:
        line = MAGIC + (
            f"{self.last or _ZERO_NAME:<64} {self.committed:012d} {self.pending:06d} "
            f"{self.wal_off:012d} {self.wal_lsn:016d} {self.dir_mtime_ns:020d} "
            f"{self.dir_ino:020d} "
            f"{int(self.stale)}"
        ).encode("ascii")
        line += b" %08x" % zlib.crc32(line)
        return line.ljust(HEADER_SIZE - 1) + b"\n"

    @classmethod
    def decode(cls, raw: bytes) -> IndexHeader | None:
        """The header, or None for anything not written whole by ``encode``."""
        if len(raw) < _LINE + 9 or not raw.startswith(MAGIC):
            return None
        try:
            if int(raw[_LINE + 1 : _LINE + 9], 16) != zlib.crc32(raw[:_LINE]):
                return None
            text = raw[len(MAGIC) : _LINE].decode("ascii")
        except ValueError:
            return None
        last = text[0:64].rstrip()
        return cls(
            last=last,
            committed=int(text[65:77]),
            pending=int(text[78:84]),
            wal_off=int(text[85:97]),
            wal_lsn=int(text[98:114]),
            dir_mtime_ns=int(text[115:135]),
            dir_ino=int(text[136:156]),
            stale=text[157] == "1",
        )

    def copy(self) -> IndexHeader:
        return IndexHeader(
            self.last,
            self.committed,
            self.pending,
            self.wal_off,
            self.wal_lsn,
            self.dir_mtime_ns,
            self.dir_ino,
            self.stale,
        )

    def matches(self, stat: os.stat_result) -> bool:
        return self.dir_mtime_ns == stat.st_mtime_ns and self.dir_ino == stat.st_ino


class IndexFile:
    """An open index. Readers use it without a lock; writers hold the queue lock."""

    __slots__ = ("_decoded", "_hints", "_raw", "fd", "ino", "writable")

    MAX_HINTS = 4096

    def __init__(self, fd: int, *, writable: bool = True) -> None:
        self.fd = fd
        self.ino = os.fstat(fd).st_ino
        self.writable = writable
        # name -> position of names handed out: a consumer's next pointer is the last
        # name it got, so its next fetch starts right there instead of searching.
        self._hints: dict[str, int] = {}
        # The header as last read, and what it says: decoded again only when it changed.
        self._raw = b""
        self._decoded: IndexHeader | None = None

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, create: bool = False) -> IndexFile | None:
        """Open for reading and writing, or for reading only on a read-only volume."""
        flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_CREAT if create else 0)
        try:
            return cls(os.open(path, flags, 0o644))
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno not in READ_ONLY_ERRORS or create:
                raise
        try:
            return cls(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), writable=False)
        except FileNotFoundError:
            return None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:
        self.close()

    def __enter__(self) -> IndexFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- reading -------------------------------------------------------------------
    def header(self) -> IndexHeader | None:
        """The header (a copy the caller may change), or None when it is not whole."""
        raw = os.pread(self.fd, HEADER_SIZE, 0)
        if raw != self._raw or self._decoded is None:
            self._raw, self._decoded = raw, IndexHeader.decode(raw)
            if self._decoded is None:
                self._raw = b""
                return None
        return self._decoded.copy()

    def record(self, position: int) -> str:
        raw = os.pread(self.fd, NAME_LENGTH, HEADER_SIZE + position * RECORD_SIZE)
        return raw.decode("ascii", "replace")

    def tail_is_sound(self, count: int) -> bool:
        """False when the last visible record is no name: after a power loss a record
        the header counts can read as zeros, or the file can be shorter. (The shape is
        enough here: zeros or a short read never look like a 64-character name.)"""
        if count == 0:
            return True
        last = self.record(count - 1)
        return len(last) == NAME_LENGTH and last.endswith(".bin") and last[:18].isdigit()

    def remember(self, name: str, position: int) -> None:
        """``name`` is at ``position``: a pointer naming it is found without a search."""
        if len(self._hints) >= self.MAX_HINTS:
            self._hints.clear()
        self._hints[name] = position

    def first_after(self, pointer: str, count: int) -> int:
        """Position of the first record sorting after ``pointer`` (binary search)."""
        if not pointer:
            return 0
        hint = self._hints.get(pointer)
        if hint is not None and hint < count and self.record(hint) == pointer:
            return hint + 1
        low, high = 0, count
        while low < high:
            middle = (low + high) // 2
            if self.record(middle) <= pointer:
                low = middle + 1
            else:
                high = middle
        return low

    def iter_from(self, position: int, count: int, chunk: int = 256) -> Iterator[str]:
        """Records from ``position`` up to ``count``, read a few KB at a time."""
        while position < count:
            take = min(chunk, count - position)
            raw = os.pread(self.fd, take * RECORD_SIZE, HEADER_SIZE + position * RECORD_SIZE)
            for offset in range(0, len(raw) - NAME_LENGTH + 1, RECORD_SIZE):
                yield raw[offset : offset + NAME_LENGTH].decode("ascii", "replace")
            position += take

    # --- writing (queue lock held) -------------------------------------------------
    def write_header(self, header: IndexHeader) -> None:
        raw = header.encode()
        os.pwrite(self.fd, raw, 0)
        self._raw, self._decoded = raw, header.copy()

    def write_records(self, position: int, names: Sequence[str]) -> None:
        """Write names from ``position`` on: invisible until the header counts them."""
        data = "".join(f"{name}\n" for name in names).encode("ascii")
        os.pwrite(self.fd, data, HEADER_SIZE + position * RECORD_SIZE)

    def sync(self) -> None:
        os.fdatasync(self.fd)


class ListedIndex:
    """An index made from a listing, in memory: for a volume that cannot be written (a
    read-only disaster-recovery copy) and whose index file is missing or out of date.
    Nothing changes on such a volume, so one listing serves until the directory does."""

    def __init__(self, names: list[str], dir_stat: os.stat_result) -> None:
        self.names = names
        self.header_value = IndexHeader(
            last=names[-1] if names else "",
            committed=len(names),
            dir_mtime_ns=dir_stat.st_mtime_ns,
            dir_ino=dir_stat.st_ino,
        )

    def header(self) -> IndexHeader:
        return self.header_value

    def record(self, position: int) -> str:
        return self.names[position]

    def tail_is_sound(self, count: int) -> bool:
        return True

    def remember(self, name: str, position: int) -> None:
        return None

    def first_after(self, pointer: str, count: int) -> int:
        return bisect.bisect_right(self.names, pointer, 0, count) if pointer else 0

    def iter_from(self, position: int, count: int, chunk: int = 256) -> Iterator[str]:
        yield from self.names[position:count]


def list_queue_names(queue_dir: str | os.PathLike[str]) -> list[str]:
    """Every valid message name in a queue directory, sorted: the truth the index caches."""
    with os.scandir(queue_dir) as entries:  # regular files only: a link is never a message
        names = [
            e.name
            for e in entries
            if len(e.name) == NAME_LENGTH
            and e.name.endswith(".bin")
            and e.is_file(follow_symlinks=False)
        ]
    names = [name for name in names if is_message_name(name)]
    names.sort()
    return names


def rebuild(
    index_path: str | os.PathLike[str], queue_dir: str | os.PathLike[str], floor: str = ""
) -> IndexHeader:
    """Write a fresh index from a directory listing and swap it in atomically.

    The directory's mtime is read *before* listing, so a change that lands during the
    listing leaves a mismatch behind and triggers another rebuild later. The new file is
    flushed before the rename: a power loss must not leave a rebuilt index whose header
    counts records that never reached the disk. The replaced file is then marked stale
    for every process that still has it open.
    """
    stat = os.stat(queue_dir)
    names = list_queue_names(queue_dir)
    header = IndexHeader(
        last=max(floor, names[-1] if names else ""),
        committed=len(names),
        dir_mtime_ns=stat.st_mtime_ns,
        dir_ino=stat.st_ino,
    )
    path = os.fspath(index_path)
    tmp = leftover_path(path)
    with open(tmp, "wb") as out:
        out.write(header.encode())
        for start in range(0, len(names), 4096):
            out.write("".join(f"{n}\n" for n in names[start : start + 4096]).encode("ascii"))
        out.flush()
        os.fdatasync(out.fileno())
    old = IndexFile.open(path)
    try:
        os.replace(tmp, path)
        if old is not None:
            previous = old.header() or IndexHeader()
            previous.stale = True
            old.write_header(previous)
    finally:
        if old is not None:
            old.close()
    return header
