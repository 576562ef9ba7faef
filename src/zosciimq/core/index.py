"""The per-queue index: why fetch costs the same at a thousand or a million messages.

``.zoscii/index/<queue>.idx`` is a header followed by fixed-width records, one message
name each, in name order. Names are appended under the queue lock in the order they are
allocated, so the file is sorted and fetch finds "the first name after the pointer" by
binary search (a few preads) instead of listing and sorting the directory.

The index is a cache of the directory, never the truth:

* a message deleted by the retention cleaner stays in the index until the next rebuild;
  fetch opens the file and moves on when it is gone;
* the header remembers the queue directory's mtime and inode as of the last change made
  through the index; when the directory says otherwise (another writer, the original PHP
  implementation, a crash, claireup) the index is rebuilt from a listing, under the lock;
* the header's ``pending`` names a message between "name allocated" and "indexed": if its
  publisher died there, the next lock holder finishes or forgets it (see QueueStore).

Records are only appended or replaced whole by a rename, so a reader without the lock
sees a consistent prefix.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from zosciimq.core.names import NAME_LENGTH, is_message_name

HEADER_SIZE = 512
RECORD_SIZE = NAME_LENGTH + 1  # name + "\n", so `tail` on an index is readable


@dataclass
class IndexHeader:
    last: str = ""  # highest name ever allocated in this queue: the sequencer's floor
    pending: str = ""  # allocated, maybe renamed into place, not yet indexed
    pending_nonce: str = ""
    dir_mtime_ns: int = 0
    dir_ino: int = 0

    def encode(self) -> bytes:
        raw = json.dumps(asdict(self), separators=(",", ":")).encode()
        if len(raw) >= HEADER_SIZE:
            raise ValueError("index header overflow")
        return raw.ljust(HEADER_SIZE - 1) + b"\n"

    @classmethod
    def decode(cls, raw: bytes) -> IndexHeader | None:
        try:
            fields = json.loads(raw)
            return cls(**fields)
        except (ValueError, TypeError):
            return None

    def matches(self, stat: os.stat_result) -> bool:
        return self.dir_mtime_ns == stat.st_mtime_ns and self.dir_ino == stat.st_ino


class IndexFile:
    """An open index. Readers use it without a lock; writers hold the queue lock."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    @classmethod
    def open(cls, path: Path, *, create: bool = False) -> IndexFile | None:
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        try:
            return cls(os.open(path, flags, 0o644))
        except FileNotFoundError:
            return None

    def close(self) -> None:
        os.close(self.fd)

    def reopen(self, path: Path) -> None:
        """Follow ``path`` to the file a rebuild renamed there."""
        fresh = os.open(path, os.O_RDWR)
        os.close(self.fd)
        self.fd = fresh

    def __enter__(self) -> IndexFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- reading -------------------------------------------------------------------
    def header(self) -> IndexHeader | None:
        raw = os.pread(self.fd, HEADER_SIZE, 0)
        if len(raw) < HEADER_SIZE:
            return None
        return IndexHeader.decode(raw)

    def count(self) -> int:
        size = os.fstat(self.fd).st_size
        return max(0, (size - HEADER_SIZE) // RECORD_SIZE)

    def record(self, position: int) -> str:
        raw = os.pread(self.fd, NAME_LENGTH, HEADER_SIZE + position * RECORD_SIZE)
        return raw.decode("ascii")

    def last_record(self) -> str:
        count = self.count()
        return self.record(count - 1) if count else ""

    def first_after(self, pointer: str, count: int) -> int:
        """Position of the first record sorting after ``pointer`` (binary search)."""
        if not pointer:
            return 0
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
                yield raw[offset : offset + NAME_LENGTH].decode("ascii")
            position += take

    # --- writing (queue lock held) -------------------------------------------------
    def write_header(self, header: IndexHeader) -> None:
        os.pwrite(self.fd, header.encode(), 0)

    def sync(self) -> None:
        os.fdatasync(self.fd)

    def append(self, name: str) -> None:
        # Write at the end of the last *whole* record: a torn tail from a crash is
        # overwritten instead of shifting every later record.
        os.pwrite(self.fd, (name + "\n").encode("ascii"), HEADER_SIZE + self.count() * RECORD_SIZE)


def list_queue_names(queue_dir: Path) -> list[str]:
    """Every valid message name in a queue directory, sorted: the truth the index caches."""
    with os.scandir(queue_dir) as entries:
        names = [e.name for e in entries if e.name.endswith(".bin") and len(e.name) == NAME_LENGTH]
    names = [name for name in names if is_message_name(name)]
    names.sort()
    return names


def rebuild(index_path: Path, queue_dir: Path, floor: str = "") -> IndexHeader:
    """Write a fresh index from a directory listing and swap it in atomically.

    The directory's mtime is read *before* listing, so a change that lands during the
    listing leaves a mismatch behind and triggers another rebuild later.
    """
    stat = os.stat(queue_dir)
    names = list_queue_names(queue_dir)
    header = IndexHeader(
        last=max(floor, names[-1] if names else ""),
        dir_mtime_ns=stat.st_mtime_ns,
        dir_ino=stat.st_ino,
    )
    tmp = index_path.with_name(f".{index_path.name}.{uuid.uuid4().hex}.tmp")
    with open(tmp, "wb") as out:
        out.write(header.encode())
        for name in names:
            out.write(name.encode("ascii") + b"\n")
    os.replace(tmp, index_path)
    return header
