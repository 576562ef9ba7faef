"""A publisher that dies at a chosen step of QueueStore.publish, for the crash tests.

Usage: python -m tests.security.crash_child DATA_DIR QUEUE STEP

Publishes ``A`` (acknowledged: prints ``acked A <name>``), then ``B`` with nonce
``n-QUEUE`` (see ``nonce_of``)
and ``os._exit``s right after step STEP of that publish (see STEPS), without unwinding,
flushing or releasing anything itself: as kill -9 would. With STEP ``acked`` it prints
``acked B <name>`` and the trace of the durability-relevant calls B made, one JSON
object a line, then exits the same way.
"""

from __future__ import annotations

import functools
import json
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.queues import publish_body
from zosciimq.core import DataDir, QueueStore
from zosciimq.core import queues as queues_module
from zosciimq.core.index import IndexFile
from zosciimq.core.nonces import Nonces

# In publish order. Each is "the state right after this call returned".
STEPS = (
    "written",  # upload content written, not flushed (dies on entering the flush)
    "synced",  # upload flushed, no lock taken yet
    "pending",  # B's record written, invisible; the index header counts it as pending
    "renamed",  # B renamed into the queue directory, directory not fsynced
    "dir-synced",  # queue directory fsynced: B durable under its name
    "nonce-marked",  # nonce marker created and its directory fsynced
    "indexed",  # the index flushed (B's record durable, still invisible)
    "header-cleared",  # header commits B (visible), pending cleared; about to return
    "acked",  # publish returned (acknowledged)
)

BODY_A = b"A" * 5000 + bytes(range(256))
BODY_B = b"B" * 7000 + bytes(range(255, -1, -1))

trace: list[dict[str, Any]] = []


def nonce_of(queue: str) -> str:
    """Nonces are global across queues: one per queue, so each crash is on its own."""
    return f"n-{queue}"


def die() -> None:
    sys.stdout.flush()
    os._exit(0)


def _path_of(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


def _wrap(owner: Any, name: str, after: Callable[..., None] | None = None) -> None:
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        if after is not None:
            after(*args, **kwargs)
        return result

    setattr(owner, name, wrapper)


def install(step: str) -> None:
    """Record B's calls; die right after ``step``."""
    counts = {"write_header": 0}

    def record(event: str, **fields: Any) -> None:
        trace.append({"event": event, **fields})

    real_fsync, real_fdatasync = os.fsync, os.fdatasync
    real_rename, real_open, real_pwrite = os.rename, os.open, os.pwrite

    def fsync(fd: int) -> None:
        kind = "dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"
        real_fsync(fd)
        record("fsync", kind=kind, path=_path_of(fd))
        if step == "dir-synced" and kind == "dir" and "/queues/" in _path_of(fd):
            die()

    def fdatasync(fd: int) -> None:
        real_fdatasync(fd)
        record("fdatasync", path=_path_of(fd))

    def rename(src: Any, dst: Any, **kwargs: Any) -> None:
        real_rename(src, dst, **kwargs)
        record("rename", src=str(src), dst=str(dst))
        if step == "renamed":  # publish's only rename: the upload into the queue
            die()

    def open_(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        fd = real_open(path, flags, *args, **kwargs)
        if flags & os.O_CREAT and flags & os.O_EXCL:
            record("create", path=str(path))
        return fd

    def pwrite(fd: int, data: bytes, offset: int) -> int:
        written = real_pwrite(fd, data, offset)
        record("pwrite", path=_path_of(fd), offset=offset)
        return written

    os.fsync, os.fdatasync, os.rename, os.open, os.pwrite = fsync, fdatasync, rename, open_, pwrite

    original_sync = queues_module.sync_uploads

    def sync(uploads: Any) -> None:
        if step == "written":
            die()
        original_sync(uploads)
        if step == "synced":
            die()

    queues_module.sync_uploads = sync  # type: ignore[assignment]

    def after_header(self: IndexFile, header: Any) -> None:
        counts["write_header"] += 1
        if step == "pending" and header.pending:
            die()
        if step == "header-cleared" and not header.pending and counts["write_header"] >= 2:
            die()

    _wrap(IndexFile, "write_header", after_header)
    _wrap(Nonces, "mark_many", lambda *a: die() if step == "nonce-marked" else None)
    _wrap(IndexFile, "sync", lambda *a: die() if step == "indexed" else None)


def main() -> None:
    data_dir, queue, step = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    assert step in STEPS, step
    layout = DataDir(data_dir)
    layout.ensure()
    queues = QueueStore(layout)
    print("acked A", publish_body(queues, queue, BODY_A).name, flush=True)
    install(step)
    result = publish_body(queues, queue, BODY_B, nonce=nonce_of(queue))
    assert not result.duplicate, "nonce already used: use a fresh queue name"
    print("acked B", result.name)
    for event in trace:
        print(json.dumps(event))
    die()


if __name__ == "__main__":
    main()
