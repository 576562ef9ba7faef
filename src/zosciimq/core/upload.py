"""A message on its way in: streamed to ``queues/temp/``, size-checked, fsynced.

The HTTP layer writes chunks into an Upload as they arrive (flat memory for any size),
then hands it to the queue or the store, which renames it into place. An Upload that is
never committed deletes itself, so an error or a client that goes away leaves nothing
behind but, after a hard crash, a temp file that claireup removes later.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from types import TracebackType

from zosciimq.core.durable import fsync_dir, raise_if_full, unlink_quietly
from zosciimq.core.errors import TooLarge
from zosciimq.core.layout import DataDir

TEMP_SUFFIX = ".part"


class Upload:
    def __init__(self, data_dir: DataDir, max_bytes: int | None = None) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self.path: Path = data_dir.temp / f"{uuid.uuid4().hex}{TEMP_SUFFIX}"
        self._committed = False
        self._synced = False
        try:
            self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileNotFoundError:
            data_dir.temp.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)

    def write(self, chunk: bytes | memoryview) -> None:
        if self._fd is None:
            raise ValueError("upload already finished")
        if self.max_bytes is not None and self.size + len(chunk) > self.max_bytes:
            raise TooLarge(f"Message larger than the maximum of {self.max_bytes} bytes.")
        view = memoryview(chunk)
        try:
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as exc:
            raise_if_full(exc)
            raise
        self.size += len(chunk)

    def sync(self) -> None:
        """fsync the content; done before any lock is taken, as it is the slow part."""
        if self._fd is None or self._synced:
            return
        try:
            os.fsync(self._fd)
        except OSError as exc:
            raise_if_full(exc)
            raise
        os.close(self._fd)
        self._fd = None
        self._synced = True

    def commit(self, final_path: Path) -> None:
        """Rename into place and fsync the directory: after this the message is durable."""
        self.sync()
        os.rename(self.path, final_path)
        self._committed = True
        fsync_dir(final_path.parent)

    def discard(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if not self._committed:
            unlink_quietly(self.path)

    def __enter__(self) -> Upload:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.discard()
