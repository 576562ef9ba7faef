"""A zpipes pipe on the volume: where its reader is, and who is attached now.

The ZeroMQ gateway (services/zmq) keeps a pipe's chunks as the messages of a queue; what
a queue does not have is one small file, ``.zoscii/zpipes/<queue>.pipe``, shared by every
gateway on the volume (the cluster of the zpipes seed, without zyre):

* the reader's **position**: every message up to ``after`` was read, and ``offset``
  bytes of ``current`` (the first message after ``after``; a read stops mid-chunk);
* two counters other gateways learn from: ``reader_closes`` (a reader closed the pipe
  explicitly: what was queued was discarded, and writers attached before it must fail
  their next write) and ``writer_closes`` (the reader gets a short read, then the end).

**Presence** is not in the record but in fcntl byte-range locks on the same file, which
the kernel drops with a process that dies (kill -9 included): byte 0, exclusive, is held
by the gateway serving the pipe's reader (one reader at a time, volume-wide); byte 1,
shared, by each gateway serving writers of it; byte 2 serialises updates of the record.
POSIX locks belong to the process and closing any descriptor of the file drops them all,
so a process keeps exactly one descriptor per pipe (``PipeFile``) and asks about the
others with F_GETLK, which never reports its own locks.

The record is written with one ``pwrite`` into one of two slots (alternately, each with a
sequence number and a CRC), so a torn write leaves the other one. A position change is
not flushed each time (a read is answered many thousand times a second): a process that
dies loses nothing (the page cache has the write), a power loss may bring back an
older position, which repeats data and loses none. Closes are flushed at once.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass, replace

from zosciimq.core.durable import ensure_dir, fsync_dir
from zosciimq.core.layout import DataDir
from zosciimq.core.names import NAME_LENGTH

# magic, version, sequence, offset, reader closes, writer closes, after, current; CRC
_RECORD = struct.Struct(f">4sB3xQQQQ{NAME_LENGTH}s{NAME_LENGTH}s")
_CRC = struct.Struct(">I")
_SLOT = 256
_MAGIC = b"ZPIP"
_VERSION = 1
_FLOCK = "hhqqi"  # struct flock on Linux: type, whence, start, len, pid (native alignment)
READER_BYTE, WRITER_BYTE, UPDATE_BYTE = 0, 1, 2


@dataclass(frozen=True)
class PipeRecord:
    """What every gateway agrees on about one pipe."""

    after: str = ""  # the last message read whole ("" none)
    current: str = ""  # the message read in part ("" none)
    offset: int = 0  # bytes of ``current`` read
    reader_closes: int = 0
    writer_closes: int = 0
    sequence: int = 0

    def moved(self, after: str, current: str, offset: int) -> PipeRecord:
        return replace(self, after=after, current=current if offset else "", offset=offset)


class PipeFile:
    """This process's handle on one pipe's state file; ``close`` drops its locks."""

    def __init__(self, data_dir: DataDir, queue: str) -> None:
        self.queue = queue
        self.path = data_dir.pipe_path(queue)
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
        try:
            self.fd: int | None = os.open(self.path, flags, 0o644)
        except FileNotFoundError:
            ensure_dir(self.path.parent)
            self.fd = os.open(self.path, flags, 0o644)
            fsync_dir(self.path.parent)
        self._mutex = threading.Lock()  # fcntl locks do not exclude this process's threads

    def close(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)

    def _fd(self) -> int:
        if self.fd is None:
            raise ValueError(f"pipe file of {self.queue} is closed")
        return self.fd

    # --- the record -----------------------------------------------------------------------
    def read(self) -> PipeRecord:
        """The newest sound slot (a new file: the start of the queue, no closes)."""
        raw = os.pread(self._fd(), 2 * _SLOT, 0)
        best = PipeRecord()
        for start in (0, _SLOT):
            record = _decode(raw[start : start + _SLOT])
            if record is not None and record.sequence > best.sequence:
                best = record
        return best

    def update(self, change: Callable[[PipeRecord], PipeRecord], *, sync: bool) -> PipeRecord:
        """``change`` applied to the record, under the update lock of every process."""
        fd = self._fd()
        with self._mutex:
            _lock_waiting(fd, UPDATE_BYTE)
            try:
                record = change(self.read())
                record = replace(record, sequence=record.sequence + 1)
                os.pwrite(fd, _encode(record), (record.sequence % 2) * _SLOT)
                if sync:
                    os.fdatasync(fd)
                return record
            finally:
                fcntl.lockf(fd, fcntl.LOCK_UN, 1, UPDATE_BYTE)

    def sync(self) -> None:
        os.fdatasync(self._fd())

    # --- presence -------------------------------------------------------------------------
    def hold_reader(self) -> bool:
        """Become the pipe's one reader, volume-wide; False when another process is."""
        return _try_lock(self._fd(), fcntl.LOCK_EX, READER_BYTE)

    def release_reader(self) -> None:
        fcntl.lockf(self._fd(), fcntl.LOCK_UN, 1, READER_BYTE)

    def hold_writer(self) -> None:
        """Say this process serves writers of the pipe (shared: any number of them)."""
        if not _try_lock(self._fd(), fcntl.LOCK_SH, WRITER_BYTE):
            raise OSError(errno.EAGAIN, f"writer byte of {self.path} held exclusively")

    def release_writer(self) -> None:
        fcntl.lockf(self._fd(), fcntl.LOCK_UN, 1, WRITER_BYTE)

    def reader_elsewhere(self) -> bool:
        """Whether another process serves the pipe's reader now."""
        return _held_elsewhere(self._fd(), READER_BYTE)

    def writers_elsewhere(self) -> bool:
        """Whether another process serves a writer of the pipe now."""
        return _held_elsewhere(self._fd(), WRITER_BYTE)


def _encode(record: PipeRecord) -> bytes:
    body = _RECORD.pack(
        _MAGIC,
        _VERSION,
        record.sequence,
        record.offset,
        record.reader_closes,
        record.writer_closes,
        record.after.encode("ascii"),
        record.current.encode("ascii"),
    )
    return (body + _CRC.pack(zlib.crc32(body))).ljust(_SLOT, b"\0")


def _decode(raw: bytes) -> PipeRecord | None:
    """A slot's record, or None for an empty, torn or foreign one."""
    if len(raw) < _RECORD.size + _CRC.size:
        return None
    body = raw[: _RECORD.size]
    (crc,) = _CRC.unpack_from(raw, _RECORD.size)
    if crc != zlib.crc32(body):
        return None
    magic, version, sequence, offset, reader_closes, writer_closes, after, current = _RECORD.unpack(
        body
    )
    if magic != _MAGIC or version != _VERSION:
        return None
    return PipeRecord(
        after=after.rstrip(b"\0").decode("ascii"),
        current=current.rstrip(b"\0").decode("ascii"),
        offset=offset,
        reader_closes=reader_closes,
        writer_closes=writer_closes,
        sequence=sequence,
    )


def _try_lock(fd: int, kind: int, byte: int) -> bool:
    try:
        fcntl.lockf(fd, kind | fcntl.LOCK_NB, 1, byte)
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EAGAIN):
            return False
        raise
    return True


def _lock_waiting(fd: int, byte: int) -> None:
    """An exclusive lock on ``byte``, retrying the kernel's false deadlock reports (see
    ``locking._lock_waiting``: POSIX locks belong to processes, not threads)."""
    while True:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX, 1, byte)
            return
        except OSError as exc:
            if exc.errno != errno.EDEADLK:
                raise


def _held_elsewhere(fd: int, byte: int) -> bool:
    """F_GETLK: would an exclusive lock on ``byte`` conflict with another process's?"""
    query = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, byte, 1, 0)
    answer = fcntl.fcntl(fd, fcntl.F_GETLK, query)
    (kind,) = struct.unpack_from("h", answer)
    return bool(kind != fcntl.F_UNLCK)
