"""The data store: store, retrieve, scan, identify (PROTOCOL.md section 3).

Store names carry their own location (the base-36 fan-out of their time), so retrieve
needs no index. Names ending ``-u.bin`` are "unidentified": written by a replicator
(or with ``u=1``) and waiting for a consumer to find them with scan and mark them with
identify, which renames them without the suffix.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

from zosciimq.core import walk
from zosciimq.core.clock import utc_now
from zosciimq.core.durable import ensure_dir, fsync_dir, raise_if_full, unlink_quietly
from zosciimq.core.errors import MessageNotFound
from zosciimq.core.layout import DataDir
from zosciimq.core.names import MessageName, new_name, parse_name
from zosciimq.core.nonces import Nonces
from zosciimq.core.upload import Upload, sync_uploads


@dataclass(frozen=True)
class StoreResult:
    name: str | None  # None when the nonce had been used: nothing was written
    duplicate: bool = False


class DataStore:
    def __init__(self, data_dir: DataDir, clock: Callable[[], datetime] = utc_now) -> None:
        self.data_dir = data_dir
        self.clock = clock
        self.nonces = Nonces(data_dir)

    def path_of(self, name: MessageName) -> Path:
        return self.data_dir.store_path(str(name), name.store_dirs)

    def store(
        self,
        upload: Upload,
        *,
        retention_days: int,
        nonce: str | None = None,
        unidentified: bool = False,
    ) -> StoreResult:
        """Store under a new name (``CCCC`` = 0000); durable when this returns."""
        upload.sync()
        with self.nonces.lock(nonce):
            if nonce is not None and self.nonces.used(nonce):
                return StoreResult(name=None, duplicate=True)
            name = new_name(self.clock(), retention_days, unidentified=unidentified)
            self._commit(upload, name)
            if nonce is not None:
                try:
                    self.nonces.mark(nonce)
                except OSError as exc:
                    unlink_quietly(self.path_of(name))
                    raise_if_full(exc)
                    raise
        return StoreResult(name=str(name))

    def put(self, upload: Upload, name: MessageName) -> bool:
        """Store under a given name (replication keeps the source's name).

        False, writing nothing, when the name or its identified/unidentified twin exists:
        so a replicator that repeats a message after a crash stores it once.
        """
        return self.put_many([(upload, name)])[0]

    def put_many(self, items: Sequence[tuple[Upload, MessageName]]) -> list[bool]:
        """``put`` for several messages with one flush of their contents and one fsync
        per directory touched: what a replicator's batch needs. True for each one
        written; on an error the ones renamed so far stay (each is whole and durable
        once its directory is fsynced, which happens before the error is raised)."""
        sync_uploads([upload for upload, _ in items])
        written: list[bool] = []
        touched: set[Path] = set()
        try:
            for upload, name in items:
                if self.exists(name):
                    written.append(False)
                    continue
                target = self.path_of(name)
                ensure_dir(target.parent)
                os.rename(upload.temp_path, target)
                upload.mark_committed()
                touched.add(target.parent)
                written.append(True)
        except OSError as exc:
            raise_if_full(exc)
            raise
        finally:
            for directory in touched:
                fsync_dir(directory)
        return written

    def exists(self, name: MessageName) -> bool:
        return (
            self.path_of(name.identified()).exists()
            or self.path_of(name.unidentified_variant()).exists()
        )

    def _commit(self, upload: Upload, name: MessageName) -> None:
        target = self.path_of(name)
        try:
            ensure_dir(target.parent)
            upload.commit(target)
        except OSError as exc:
            raise_if_full(exc)
            raise

    def retrieve(self, raw_name: str) -> tuple[str, BinaryIO, int]:
        """Open a stored message by its exact name (with or without ``-u``): name, file, size."""
        name = parse_name(raw_name)
        try:
            file = open(self.path_of(name), "rb")  # noqa: SIM115 - the caller closes it
        except FileNotFoundError:
            raise MessageNotFound("Message not found.") from None
        return str(name), file, os.fstat(file.fileno()).st_size

    def scan(self) -> list[str]:
        """Every unidentified store name, sorted (a full walk: scan is a listing by nature)."""
        return sorted(name for name in self.iter_names() if name.endswith("-u.bin"))

    def identify(self, names: Iterable[MessageName]) -> list[str]:
        """Rename each existing ``-u`` file without the suffix; returns the new names."""
        renamed = []
        touched: set[Path] = set()
        for name in names:
            if not name.unidentified:
                continue
            source, target = self.path_of(name), self.path_of(name.identified())
            try:
                os.rename(source, target)
            except FileNotFoundError:
                continue
            renamed.append(str(name.identified()))
            touched.add(target.parent)
        for directory in touched:
            fsync_dir(directory)
        return renamed

    def iter_names(self) -> Iterator[str]:
        for _path, name in self.iter_files():
            yield name

    def iter_files(self) -> Iterator[tuple[Path, str]]:
        """(path, name) of every well-formed message file under store/."""
        for found in walk.iter_store_files(self.data_dir):
            if found.kind is walk.Kind.MESSAGE:
                yield Path(found.path), found.name


def fanout_roots(data_dir: DataDir) -> list[Path]:
    """The store's first-level fan-out directories (at most 36).

    They split a full walk of the store into independent pieces of work, so a parallel
    scanner (statissa's Spark job) lists only these and walks each one elsewhere.
    """
    return _subdirs(data_dir.store)


def _subdirs(path: Path) -> list[Path]:
    try:
        with os.scandir(path) as entries:
            return sorted(Path(e.path) for e in entries if e.is_dir(follow_symlinks=False))
    except FileNotFoundError:
        return []
