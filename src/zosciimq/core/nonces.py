"""Nonces: a global namespace of retry tokens that makes publish and store idempotent.

``nonce/<n>`` is an empty marker whose mtime is its first use (claireup deletes it after
the nonce window). The marker is written after the message, as in the original, so a
crash in between can at worst let a retry store the message again; never the reverse
(a marker without its message, which would lose the retry).
Checking and marking happen under one of 64 lock files picked by hashing the nonce, so
two concurrent requests with the same nonce store the message once.
"""

from __future__ import annotations

import os
import zlib
from contextlib import AbstractContextManager, nullcontext

from zosciimq.core.durable import ensure_dir, fsync_dir, unlink_quietly
from zosciimq.core.layout import DataDir
from zosciimq.core.locking import FileLock

LOCK_SHARDS = 64


class Nonces:
    def __init__(self, data_dir: DataDir) -> None:
        self.data_dir = data_dir

    def lock(self, nonce: str | None) -> AbstractContextManager[object]:
        if nonce is None:
            return nullcontext()
        shard = zlib.crc32(nonce.encode()) % LOCK_SHARDS
        return FileLock(self.data_dir.locks / f"nonce-{shard:02d}.lock")

    def used(self, nonce: str) -> bool:
        return self.data_dir.nonce_path(nonce).exists()

    def mark(self, nonce: str) -> bool:
        """Create the marker durably; False when it already existed."""
        path = self.data_dir.nonce_path(nonce)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        except FileNotFoundError:
            ensure_dir(path.parent)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.close(fd)
        fsync_dir(path.parent)
        return True

    def unmark(self, nonce: str) -> None:
        """Roll back a marker whose message could not be kept (nonce lock held)."""
        unlink_quietly(self.data_dir.nonce_path(nonce))
