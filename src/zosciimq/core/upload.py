"""A message on its way in: streamed to ``queues/temp/``, size-checked.

The HTTP layer writes chunks into an Upload as they arrive (flat memory for any size),
then hands it to the queue or the store, which renames it into place. An Upload that is
never committed deletes itself, so an error or a client that goes away leaves nothing
behind but, after a hard crash, a temp file that claireup removes later.

A small message (up to ``INLINE_BYTES``) is also kept in memory: its commit copies it
into the write-ahead log, which is what makes it durable, so its file is never flushed
on its own (core.wal). A larger one is flushed before its commit (``sync_uploads``) and
the log refers to the file.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from zosciimq.core import walk
from zosciimq.core.durable import fsync_dir, raise_if_full, sync_files, unlink_quietly
from zosciimq.core.layout import DataDir
from zosciimq.errors import TooLarge

TEMP_SUFFIX = ".part"
INLINE_BYTES = 64 << 10
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class Upload:
    __slots__ = ("_committed", "_fd", "_synced", "inline", "max_bytes", "size", "temp_path")

    def __init__(
        self, data_dir: DataDir, max_bytes: int | None = None, *, prefix: str = ""
    ) -> None:
        """``prefix`` names the owner (a replication job), so the temp files of a killed
        owner can be found and removed (``remove_uploads``) without touching others'."""
        self.max_bytes = max_bytes
        self.size = 0
        temp = data_dir.temp_str
        self.temp_path = f"{temp}/{prefix}{os.urandom(16).hex()}{TEMP_SUFFIX}"  # as uuid4().hex
        self._committed = False
        self._synced = False
        self.inline: bytearray | None = bytearray()  # the content, while it is small
        try:
            try:
                self._fd: int | None = os.open(self.temp_path, _CREATE, 0o644)
            except FileNotFoundError:
                os.makedirs(temp, exist_ok=True)
                self._fd = os.open(self.temp_path, _CREATE, 0o644)
        except OSError as exc:  # out of inodes is ENOSPC too: 507, as out of bytes
            raise_if_full(exc)
            raise

    @property
    def path(self) -> Path:
        return Path(self.temp_path)

    def write(self, chunk: bytes | bytearray | memoryview) -> None:
        if self._fd is None:
            raise ValueError("upload already finished")
        if self.max_bytes is not None and self.size + len(chunk) > self.max_bytes:
            raise TooLarge(f"Message larger than the maximum of {self.max_bytes} bytes.")
        try:
            written = os.write(self._fd, chunk)
            if written < len(chunk):  # rare: a signal, or a pipe-like file system
                view = memoryview(chunk)[written:]
                while view:
                    view = view[os.write(self._fd, view) :]
        except OSError as exc:
            raise_if_full(exc)
            raise
        self.size += len(chunk)
        if self.inline is not None:
            if self.size <= INLINE_BYTES:
                self.inline += chunk
            else:
                self.inline = None

    def sync(self) -> None:
        """Flush the content; done before any lock is taken, as it is the slow part."""
        sync_uploads((self,))

    def commit(self, final_path: str | os.PathLike[str]) -> None:
        """Rename into place and fsync the directory: after this the message is durable."""
        self.sync()
        os.rename(self.temp_path, final_path)
        self._committed = True
        fsync_dir(os.path.dirname(os.fspath(final_path)))

    def mark_committed(self) -> None:
        """Its file was renamed into place by the caller (a queue's group commit)."""
        self._committed = True

    def discard(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if not self._committed:
            unlink_quietly(self.temp_path)

    def __enter__(self) -> Upload:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.discard()


def sync_uploads(uploads: Sequence[Upload], *, directory: str | None = None) -> None:
    """Make the content of every upload durable and close it: a batch flushes together.

    ``directory`` (``queues/temp``): flush it too, so the uploads are found there under
    their names after a power loss, for a log record that refers to them (core.wal)."""
    waiting = [u for u in uploads if not u._synced and u._fd is not None]
    try:
        sync_files([u._fd for u in waiting if u._fd is not None])
        if waiting and directory is not None:
            fsync_dir(directory)
    except OSError as exc:
        raise_if_full(exc)
        raise
    for upload in waiting:
        if upload._fd is not None:
            os.close(upload._fd)
        upload._fd = None
        upload._synced = True


def remove_uploads(data_dir: DataDir, prefix: str) -> int:
    """Remove the temp files named with ``prefix`` (whose owner is known to be gone or
    idle); how many were removed. Links and directories are left alone."""
    removed = 0
    if not prefix:
        return 0
    for found in walk.iter_uploads(data_dir):
        if (
            found.kind is walk.Kind.UPLOAD
            and found.name.startswith(prefix)
            and found.name.endswith(TEMP_SUFFIX)
        ):
            unlink_quietly(found.path)
            removed += 1
    return removed
