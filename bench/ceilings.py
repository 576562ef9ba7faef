"""Ceilings: the raw file-system work behind each figure, from Python, without HTTP.

These are what a perfect server written in Python could reach on this disk: they do
exactly the system calls a durable publish or a fetch cannot avoid and nothing else.

Two ways to make a message durable are measured. The **physical** one (``wal_*``) is
what the api does since its write-ahead log (docs/durability.md): the message's record
written in place into a log file allocated and zero-filled once, which never changes
size, and that file flushed; then the message file created, written and renamed, and
its index record appended, none of them flushed (a checkpoint does that later, for many
messages at once). A flush of such a log costs the device one cache flush and no
journal commit, so this is the disk's own bound. The **POSIX commit** (``durable_*``)
makes the new file itself durable: flush it, rename it, flush its directory; on a
journaled file system each of those flushes is a journal commit.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from bench.harness import Operation, OperationFactory

COPY_CHUNK = 1 << 20
LOG_BYTES = 1 << 20  # the size the api's logs start at (core.wal)
INDEX_RECORD_BYTES = 65  # one record of a queue's index file


def file_names(number: int) -> Callable[[], str]:
    """New file names for client ``number``, unique across clients and runs."""
    prefix = f"{number:02d}-{uuid.uuid4().hex[:8]}-"
    sequence = iter(range(1 << 62))
    return lambda: f"{prefix}{next(sequence):012d}.bin"


def fsync_directory(directory: Path) -> None:
    """fsync of a directory: its new entries (renames) are durable."""
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def durable_write_factory(target_dir: Path, temp_dir: Path, payload: bytes) -> OperationFactory:
    """Create + write + fsync + rename + fsync dir of one file: what a durable publish needs."""
    target_dir.mkdir(parents=True, exist_ok=True)
    temp_dir.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL

    def factory(number: int) -> Operation:
        new_name = file_names(number)

        def write_one() -> None:
            name = new_name()
            temp = temp_dir / (name + ".part")
            fd = os.open(temp, flags, 0o644)
            try:
                os.write(fd, payload)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(temp, target_dir / name)
            fsync_directory(target_dir)

        return write_one

    return factory


class PreallocatedLog:
    """A queue's log: allocated, zero-filled and flushed once, then written in place.

    ``commit`` writes a record at the next offset (back to the start when it would not
    fit: a ring) and returns once a flush covers it. The threads of one queue share it
    and a flush covers every record written before it began, so one flush answers
    everyone who was waiting (a group commit): while one thread is in ``fdatasync``, the
    others write their records and wait for the next flush, which one of them makes.
    Its blocks exist and its size never changes, so the flush is of data only: the
    device's cache flush, no journal commit (unwritten extents from ``fallocate`` would
    need one at their first write; hence the zeros).
    """

    def __init__(self, path: Path, size: int = LOG_BYTES) -> None:
        self.size = size
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        weakref.finalize(self, os.close, self.fd)
        zeros = bytes(COPY_CHUNK)
        for offset in range(0, size, len(zeros)):
            os.pwrite(self.fd, zeros[: size - offset], offset)
        os.fsync(self.fd)
        fsync_directory(path.parent)
        self._cond = threading.Condition()
        self._tail = 0  # where the next record goes
        self._written = 0  # records written so far
        self._flushed = 0  # records covered by a finished flush
        self._flushing = False

    def commit(self, record: bytes) -> None:
        if len(record) > self.size:
            raise ValueError(f"a record of {len(record)} bytes in a log of {self.size}")
        with self._cond:
            if self._tail + len(record) > self.size:
                self._tail = 0
            os.pwrite(self.fd, record, self._tail)
            self._tail += len(record)
            self._written += 1
            mine = self._written
            while self._flushed < mine:
                if self._flushing:
                    self._cond.wait()
                    continue
                self._flushing, covered = True, self._written
                self._cond.release()
                try:
                    os.fdatasync(self.fd)
                finally:
                    self._cond.acquire()
                    self._flushing = False
                    self._cond.notify_all()
                self._flushed = covered


class _WalQueue:
    """One queue directory of the physical ceiling: its log, its index, its temp files."""

    def __init__(self, root: Path, queue: str) -> None:
        self.dir, self.temp = root / queue, root / "temp"
        for directory in (self.dir, self.temp, root / "index"):
            directory.mkdir(parents=True, exist_ok=True)
        self.log = PreallocatedLog(root / "index" / f"{queue}.wal")
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        self.index_fd = os.open(root / "index" / f"{queue}.idx", flags, 0o644)
        weakref.finalize(self, os.close, self.index_fd)

    def commit(self, names: list[str], payloads: list[bytes]) -> None:
        """The log record of these messages flushed, then their files and index records
        written, none flushed."""
        self.log.commit(b"".join(_record(n, p) for n, p in zip(names, payloads, strict=True)))
        for name, payload in zip(names, payloads, strict=True):
            temp = self.temp / (name + ".part")
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            try:
                os.write(fd, payload)
            finally:
                os.close(fd)
            os.rename(temp, self.dir / name)
        os.write(self.index_fd, b"".join(_index_record(name) for name in names))


def _record(name: str, payload: bytes) -> bytes:
    """A log record: a line naming the message and its length, then its bytes."""
    return b"%s %d\n" % (name.encode(), len(payload)) + payload


def _index_record(name: str) -> bytes:
    return name.encode().ljust(INDEX_RECORD_BYTES - 1) + b"\n"


def wal_write_factory(root: Path, queue: str, payload: bytes) -> OperationFactory:
    """One message per operation into queue ``queue`` under ``root``, the physical way;
    every thread of the factory shares the queue's log (one flush per group)."""
    target = _WalQueue(root, queue)

    def factory(number: int) -> Operation:
        new_name = file_names(number)
        return lambda: target.commit([new_name()], [payload])

    return factory


def wal_batch_factory(root: Path, queue: str, payloads: list[bytes]) -> OperationFactory:
    """A batch per operation, the physical way: one record for all of it, one flush."""
    target = _WalQueue(root, queue)

    def factory(number: int) -> Operation:
        new_name = file_names(number)
        return lambda: target.commit([new_name() for _ in payloads], payloads)

    return factory


def _start_writeback() -> Callable[[int], object] | None:
    """sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE) from libc, where there is one."""
    try:
        function = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    return lambda fd: function(fd, 0, 0, 2)


START_WRITEBACK = _start_writeback()


def durable_batch_factory(
    target_dir: Path, temp_dir: Path, payloads: list[bytes]
) -> OperationFactory:
    """A batch made durable the cheapest safe way: all files written, their writeback
    started together (sync_file_range), each fdatasynced, all renamed into place, the
    directory fsynced once. One fsync after another would cost a journal commit each."""
    target_dir.mkdir(parents=True, exist_ok=True)
    temp_dir.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL

    def factory(number: int) -> Operation:
        new_name = file_names(number)

        def write_batch() -> None:
            names = [new_name() for _ in payloads]
            fds = [os.open(temp_dir / (name + ".part"), flags, 0o644) for name in names]
            try:
                for fd, payload in zip(fds, payloads, strict=True):
                    os.write(fd, payload)
                    if START_WRITEBACK is not None:
                        START_WRITEBACK(fd)
                for fd in fds:
                    os.fdatasync(fd)
            finally:
                for fd in fds:
                    os.close(fd)
            for name in names:
                os.rename(temp_dir / (name + ".part"), target_dir / name)
            fsync_directory(target_dir)

        return write_batch

    return factory


def read_in_order_factory(paths: list[Path], *, repeat: bool = False) -> OperationFactory:
    """open + read of the given files, in order, one per call (the consume ceiling).

    With ``repeat``, it starts again at the first file after the last (timed rounds).
    """

    def factory(number: int) -> Operation:
        remaining = itertools.cycle(paths) if repeat else iter(paths)

        def read_one() -> None:
            with open(next(remaining), "rb") as file:
                file.read()

        return read_one

    return factory


def list_and_sort(directory: Path) -> int:
    """What rebuilding an index from a directory cannot avoid: list it and sort the names."""
    with os.scandir(directory) as entries:
        names = [entry.name for entry in entries if entry.name.endswith(".bin")]
    names.sort()
    return len(names)


@dataclass
class CopyResult:
    bytes: int
    write_seconds: float  # including the final fsync
    read_seconds: float

    @property
    def write_mb_s(self) -> float:
        return self.bytes / 1e6 / self.write_seconds

    @property
    def read_mb_s(self) -> float:
        return self.bytes / 1e6 / self.read_seconds


def dd_copy(path: Path, chunks: Iterable[bytes]) -> CopyResult:
    """``dd``-style: write the bytes in 1 MiB blocks and fsync, then read them back."""
    total = 0
    began = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for chunk in chunks:
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view) :]
            total += len(chunk)
        os.fsync(fd)
    finally:
        os.close(fd)
    written = time.perf_counter() - began
    began = time.perf_counter()
    fd = os.open(path, os.O_RDONLY)
    try:
        while os.read(fd, COPY_CHUNK):
            pass
    finally:
        os.close(fd)
    read = time.perf_counter() - began
    return CopyResult(bytes=total, write_seconds=written, read_seconds=read)


def scan_and_stat(directory: Path) -> int:
    """List a directory and stat every file: the floor under computing statistics of it."""
    total = 0
    with os.scandir(directory) as entries:
        for entry in entries:
            total += entry.stat(follow_symlinks=False).st_size
    return total


def unlink_seconds_per_file(directory: Path, count: int, size: int, *, written_back: bool) -> float:
    """Deleting small files, per file, with their blocks on disk or still in the page cache.

    The two differ by an order of magnitude on some disks (ext4 mounted with ``discard``
    frees written-back blocks synchronously), so the sample is put in the same state as
    the files it is a ceiling for.
    """
    directory.mkdir(parents=True, exist_ok=True)
    body = b"z" * size
    paths = [directory / f"{number:08d}.bin" for number in range(count)]
    for path in paths:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, body)
        os.close(fd)
    if written_back:
        os.sync()
    began = time.perf_counter()
    for path in paths:
        os.unlink(path)
    return (time.perf_counter() - began) / count


def dirty_expire_seconds() -> float:
    """After how long the kernel writes dirty pages back (vm.dirty_expire_centisecs)."""
    try:
        return int(Path("/proc/sys/vm/dirty_expire_centisecs").read_text()) / 100
    except (OSError, ValueError):
        return 30.0
