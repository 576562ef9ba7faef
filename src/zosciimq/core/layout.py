"""Where everything lives in the data directory (PROTOCOL.md section 1).

``.zoscii/`` holds what this project keeps beside the protocol's own files (queue
indexes, lock files); it is invisible to ``ls queues/<q>/*.bin`` and rebuildable from
the ``.bin`` files alone, so deleting it loses nothing.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from zosciimq.core.names import RESERVED_QUEUES, is_queue_name

INTERNAL_DIR = ".zoscii"
# A file being rewritten is first written beside it as ".<name>.<hex>.tmp" and renamed
# over it (index.rebuild, durable.atomic_write); a crash in between leaves it behind.
LEFTOVER_PREFIX, LEFTOVER_SUFFIX = ".", ".tmp"


def leftover_path(path: str | os.PathLike[str]) -> str:
    """Where ``path``'s next version is written before it is renamed over it."""
    directory, base = os.path.split(os.fspath(path))
    return os.path.join(directory, f"{LEFTOVER_PREFIX}{base}.{uuid.uuid4().hex}{LEFTOVER_SUFFIX}")


INDEX_SUFFIX = ".idx"  # .zoscii/index/<queue>.idx
JOURNAL_SUFFIX = ".journal"  # .zoscii/index/<queue>.journal: earlier versions' only
WAL_SUFFIX = ".wal"  # .zoscii/index/<queue>.wal: the queue's write-ahead log (core.wal)
TTL_SUFFIX = ".ttl"  # .zoscii/index/<queue>.ttl: expiry of messages published with a TTL
USAGE_SUFFIX = ".usage"
GROUP_SUFFIX = ".log"  # .zoscii/groups/<queue>/<group>.log: a consumer group's state
STATISSA_DIR = "statissa"  # .zoscii/statissa/: statissa's history of figures
PIPES_DIR = "zpipes"  # .zoscii/zpipes/<queue>.pipe: a zpipes pipe's reader and ends (core.pipes)
PIPE_SUFFIX = ".pipe"


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

    @cached_property
    def temp_str(self) -> str:
        """``temp`` as text, worked out once: every upload needs it."""
        return str(self.temp)

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
        return self.indexes / f"{queue}{INDEX_SUFFIX}"

    def journal_path(self, queue: str) -> Path:
        """Where versions before the write-ahead log kept a group's nonces (removed with
        the queue; nothing reads it any more)."""
        return self.indexes / f"{queue}{JOURNAL_SUFFIX}"

    def wal_path(self, queue: str) -> Path:
        """The queue's write-ahead log: its commits since the last checkpoint (core.wal)."""
        return self.indexes / f"{queue}{WAL_SUFFIX}"

    @property
    def store_wal_path(self) -> Path:
        """The store's write-ahead log (not in index/: "store" may be a queue's name)."""
        return self.internal / "store.wal"

    @property
    def store_wal_lock_path(self) -> Path:
        return self.locks / "store-wal.lock"

    @property
    def suspects(self) -> Path:
        """Files a recovery could not prove whole, moved out of the way (core.recovery)."""
        return self.internal / "suspect"

    def ttl_path(self, queue: str) -> Path:
        """Expiry times of a queue's messages that were published with a TTL."""
        return self.indexes / f"{queue}{TTL_SUFFIX}"

    def usage_path(self, queue: str) -> Path:
        """A queue's cached message count and bytes, for its policy limits (core.limits)."""
        return self.indexes / f"{queue}{USAGE_SUFFIX}"

    @property
    def trash(self) -> Path:
        """Deleted queues on their way out (``core.admin``): ``<queue>.<hex>`` each."""
        return self.internal / "trash"

    @property
    def groups(self) -> Path:
        return self.internal / "groups"

    def group_dir(self, queue: str) -> Path:
        """The state of a queue's consumer groups, one log each."""
        return self.groups / queue

    def group_log_path(self, queue: str, group: str) -> Path:
        """A consumer group's state: what it was given, acked, requeued, dead-lettered."""
        return self.group_dir(queue) / f"{group}{GROUP_SUFFIX}"

    def group_lock_path(self, queue: str, group: str) -> Path:
        return self.locks / f"group-{queue}--{group}.lock"

    def queue_lock_path(self, queue: str) -> Path:
        return self.locks / f"queue-{queue}.lock"

    def nonce_lock_path(self, shard: int) -> Path:
        return self.locks / f"nonce-{shard:02d}.lock"

    def state_path(self, file_name: str) -> Path:
        """A replicator's pointer file in ``states/`` (``core.states`` names them). Only a
        plain file name: a configured one must not lead out of the directory."""
        if not file_name or os.path.basename(file_name) != file_name or file_name in (".", ".."):
            raise ValueError(f"not a file name for states/: {file_name!r}")
        return self.states / file_name

    @property
    def pipes(self) -> Path:
        """The ZeroMQ gateway's named pipes: one state file each (``core.pipes``)."""
        return self.internal / PIPES_DIR

    def pipe_path(self, queue: str) -> Path:
        """The state of the pipe whose chunks are the messages of ``queue``."""
        return self.pipes / f"{queue}{PIPE_SUFFIX}"

    @property
    def statissa_history(self) -> Path:
        """statissa's daily history files (figures over time, for its charts)."""
        return self.internal / STATISSA_DIR

    def job_lock_path(self, job: str) -> Path:
        """Held by whichever process runs a replication job (one copy at a time)."""
        return self.locks / f"replikate-{job}.lock"

    def nonce_path(self, nonce: str) -> Path:
        return self.nonces / nonce

    def store_path(self, name: str, dirs: tuple[str, str, str]) -> Path:
        return self.store.joinpath(*dirs, name)

    def volumes(self) -> list[str]:
        """Directories that hold the data: each may be a file system of its own, and a
        checkpoint flushes every one (``checkpoint.sync_volumes`` flushes each once)."""
        return [str(p) for p in (self.root, self.queues, self.store, self.nonces, self.internal)]

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
        """Why the volume cannot take writes, or None when it can (used by health checks).

        A link in place of one of the directories the services write into would take
        their writes outside the data directory: that is a reason too.
        """
        if not self.root.is_dir():
            return f"data directory {self.root} does not exist"
        for path in (self.queues, self.temp, self.store, self.nonces, self.states):
            if path.is_symlink():
                return f"{path} is a link, not a directory of the data directory"
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
                if is_queue_name(entry.name):
                    yield entry.name
