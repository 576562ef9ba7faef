"""Ceilings: the raw file-system work behind each figure, from Python, without HTTP.

These are what a perfect server written in Python could reach on this disk: they do
exactly the system calls a durable publish or a fetch cannot avoid and nothing else.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from bench.harness import Operation, OperationFactory

COPY_CHUNK = 1 << 20


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
