"""Where everything lives in the data directory (PROTOCOL.md section 1).

``.zoscii/`` holds what this project keeps beside the protocol's own files (queue
indexes, lock files); it is invisible to ``ls queues/<q>/*.bin`` and rebuildable from
the ``.bin`` files alone, so deleting it loses nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from zosciimq.core.errors import InvalidInput
from zosciimq.core.names import RESERVED_QUEUES, clean_queue

INTERNAL_DIR = ".zoscii"


@dataclass(frozen=True)
class DataDir:
    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @property
    def queues(self) -> Path:
        return self.root / "queues"

    @property
    def temp(self) -> Path:
        """Uploads in progress: same file system as queues and store, so rename is atomic."""
        return self.queues / "temp"

    @property
    def store(self) -> Path:
        return self.root / "store"

    @property
    def nonces(self) -> Path:
        return self.root / "nonce"

    @property
    def states(self) -> Path:
        return self.root / "states"

    @property
    def internal(self) -> Path:
        return self.root / INTERNAL_DIR

    @property
    def locks(self) -> Path:
        return self.internal / "locks"

    @property
    def indexes(self) -> Path:
        return self.internal / "index"

    def queue_dir(self, queue: str) -> Path:
        return self.queues / queue

    def index_path(self, queue: str) -> Path:
        return self.indexes / f"{queue}.idx"

    def queue_lock_path(self, queue: str) -> Path:
        return self.locks / f"queue-{queue}.lock"

    def nonce_path(self, nonce: str) -> Path:
        return self.nonces / nonce

    def store_path(self, name: str, dirs: tuple[str, str, str]) -> Path:
        return self.store.joinpath(*dirs, name)

    def ensure(self, *, create_root: bool = True) -> None:
        """Create the directory skeleton; safe to call from many processes at once.

        ``create_root=False`` only fills a root that exists: a health check must not
        re-create a volume that went away, writing into the container's own layer.
        """
        if not create_root and not self.root.is_dir():
            raise FileNotFoundError(f"data directory {self.root} does not exist")
        for path in (self.temp, self.store, self.nonces, self.states, self.locks, self.indexes):
            path.mkdir(parents=True, exist_ok=True)

    def check_writable(self) -> str | None:
        """Why the volume cannot take writes, or None when it can (used by health checks)."""
        if not self.root.is_dir():
            return f"data directory {self.root} does not exist"
        for path in (self.temp, self.nonces, self.internal):
            if not os.access(path, os.W_OK):
                return f"{path} is not writable"
        return None

    def iter_queue_names(self) -> Iterator[str]:
        """Every queue directory, skipping queues/temp and anything not a valid queue name."""
        try:
            entries = os.scandir(self.queues)
        except FileNotFoundError:
            return
        with entries:
            for entry in entries:
                if entry.name in RESERVED_QUEUES or not entry.is_dir(follow_symlinks=False):
                    continue
                try:
                    if clean_queue(entry.name) == entry.name:
                        yield entry.name
                except InvalidInput:
                    continue
