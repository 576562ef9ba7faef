"""Nonces: a global namespace of retry tokens that makes publish and store idempotent.

``nonce/<n>`` is an empty marker whose mtime is its first use (claireup deletes it after
the nonce window). The marker is written after the message is durable, as in the
original, so a crash in between can at worst let a retry store the message again; never
the reverse (a marker without its message, which would lose the retry).
Checking and marking happen under one of 64 lock files picked by hashing the nonce, so
two concurrent requests with the same nonce store the message once.
"""

from __future__ import annotations

import errno
import hashlib
import os
import zlib
from collections.abc import Iterable

from zosciimq.core.durable import ensure_dir, fsync_dir, unlink_quietly
from zosciimq.core.layout import DataDir
from zosciimq.core.locking import LockSet

LOCK_SHARDS = 64
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC


def scoped(nonce: str | None, scope: str | None) -> str | None:
    """The marker name of ``nonce`` for one ``scope`` (a client, under access control).

    Without a scope a nonce is global, as in the original. With one, two clients' equal
    nonces must never meet, so the marker is a hash of both: no client can name (and so
    squat) another's marker, and it is still a plain nonce-shaped file name that claireup
    expires like any other.
    """
    if nonce is None or scope is None:
        return nonce
    digest = hashlib.sha256(f"{scope}\n{nonce}".encode()).hexdigest()
    return f"scoped-{digest[:48]}"


class Nonces:
    def __init__(self, data_dir: DataDir) -> None:
        self.data_dir = data_dir
        self._dir = str(data_dir.nonces)

    def lock(self, *nonces: str | None) -> LockSet:
        """The shard locks of these nonces, taken in one global order (no lock for None)."""
        shards = {zlib.crc32(n.encode()) % LOCK_SHARDS for n in nonces if n is not None}
        return LockSet([str(self.data_dir.nonce_lock_path(shard)) for shard in shards])

    def path(self, nonce: str) -> str:
        return f"{self._dir}/{nonce}"

    def used(self, nonce: str) -> bool:
        return os.path.exists(self.path(nonce))

    def mark(self, nonce: str) -> bool:
        """Create the marker durably; False when it already existed."""
        return bool(self.mark_many([nonce]))

    def mark_many(self, nonces: Iterable[str], *, sync: bool = True) -> list[str]:
        """Create the markers, then flush their directory once; returns those created.

        ``sync=False``: not flushed, for a commit whose write-ahead log record holds the
        nonces (core.wal: a recovery marks them again). On an error the markers created
        so far are removed again, so none stays behind without its message.
        """
        created: list[str] = []
        try:
            for nonce in nonces:
                if self._create(nonce):
                    created.append(nonce)
            if created and sync:
                fsync_dir(self._dir)
        except OSError:
            self.unmark_many(created)
            raise
        return created

    def _create(self, nonce: str) -> bool:
        path = self.path(nonce)
        try:
            fd = os.open(path, _CREATE, 0o644)
        except FileExistsError:
            return False
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                raise
            ensure_dir(self.data_dir.nonces)
            fd = os.open(path, _CREATE, 0o644)
        os.close(fd)
        return True

    def unmark_many(self, nonces: Iterable[str]) -> None:
        """Roll back markers whose messages could not be kept (nonce locks held)."""
        for nonce in nonces:
            unlink_quietly(self.path(nonce))
