"""A publisher that dies at a chosen step of QueueStore.publish, for the crash tests.

Usage: python -m tests.security.crash_child DATA_DIR QUEUE STEP [sync|interval]

Publishes ``A`` (acknowledged: prints ``acked A <name>``), then ``B`` with nonce
``n-QUEUE`` (see ``nonce_of``) and a TTL, and ``os._exit``s right after step STEP of
that publish (see STEPS), without unwinding, flushing or releasing anything itself: as
kill -9 would. With STEP ``acked`` it prints ``acked B <name>`` and the trace of the
durability-relevant calls B made, one JSON object a line, then exits the same way.
"""

from __future__ import annotations

import functools
import json
import os
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.queues import publish_body
from zosciimq.core import DataDir, QueueStore, Upload
from zosciimq.core.checkpoint import Durability, Mode
from zosciimq.core.commit import QueueCommitter
from zosciimq.core.index import IndexFile
from zosciimq.core.nonces import Nonces
from zosciimq.core.outgoing import Outgoing
from zosciimq.core.wal import WriteAheadLog

# In publish order (docs/durability.md). Each is "the state right after this call returned".
STEPS = (
    "written",  # upload content written, not flushed; dies as its commit starts
    "pending",  # B's record in the index, invisible; the header counts it as pending
    "logged",  # B's record appended to the write-ahead log, not flushed
    "log-flushed",  # the log flushed (sync durability): B durable from here
    "renamed",  # B renamed into the queue directory (nothing flushed)
    "nonce-marked",  # nonce marker created (not flushed)
    "committed",  # the header commits B (visible), pending cleared; about to return
    "acked",  # publish returned (acknowledged)
)
# Not a step of publish: renamed, and then the file system commits its journal (as any
# other process's fsync makes it do) while the log is still unflushed (``interval``).
JOURNAL_COMMITTED = "journal-committed"

BODY_A = b"A" * 5000 + bytes(range(256))
BODY_B = b"B" * 7000 + bytes(range(255, -1, -1))
TTL_SECONDS = 3600

trace: list[dict[str, Any]] = []


def nonce_of(queue: str) -> str:
    """Nonces are global across queues: one per queue, so each crash is on its own."""
    return f"n-{queue}"


def die() -> None:
    sys.stdout.flush()
    os._exit(0)


def _path_of(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


def _wrap(owner: Any, name: str, after: Callable[..., None]) -> None:
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        after(*args, **kwargs)
        return result

    setattr(owner, name, wrapper)


def install(step: str) -> None:
    """Record B's calls; die right after ``step``."""

    def record(event: str, **fields: Any) -> None:
        trace.append({"event": event, **fields})

    real_fsync, real_fdatasync = os.fsync, os.fdatasync
    real_rename, real_open, real_pwrite = os.rename, os.open, os.pwrite

    def fsync(fd: int) -> None:
        kind = "dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"
        real_fsync(fd)
        record("fsync", kind=kind, path=_path_of(fd))

    def fdatasync(fd: int) -> None:
        real_fdatasync(fd)
        record("fdatasync", path=_path_of(fd))

    def rename(src: Any, dst: Any, **kwargs: Any) -> None:
        real_rename(src, dst, **kwargs)
        record("rename", src=str(src), dst=str(dst))
        if step == "renamed":  # publish's only rename: the upload into the queue
            die()
        if step == JOURNAL_COMMITTED:
            real_fsync(kwargs["dst_dir_fd"])
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

    real_commit = QueueCommitter.commit

    def commit(self: QueueCommitter, files: Any, group: Any) -> Any:
        if step == "written":
            die()
        return real_commit(self, files, group)

    QueueCommitter.commit = commit  # type: ignore[method-assign]

    def after_header(self: IndexFile, header: Any) -> None:
        if step == "pending" and header.pending:
            die()
        if step == "committed" and not header.pending:
            die()

    _wrap(IndexFile, "write_header", after_header)
    _wrap(WriteAheadLog, "append", lambda *a, **k: die() if step == "logged" else None)
    _wrap(WriteAheadLog, "sync", lambda *a, **k: die() if step == "log-flushed" else None)
    _wrap(Nonces, "mark_many", lambda *a, **k: die() if step == "nonce-marked" else None)


def publish_b(queues: QueueStore, queue: str) -> Any:
    with Upload(queues.data_dir) as upload:
        upload.write(BODY_B)
        message = Outgoing(upload, 1, nonce_of(queue), time.time() + TTL_SECONDS)
        return queues.publish_many(queue, [message])[0]


def main() -> None:
    data_dir, queue, step = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    mode = Mode(sys.argv[4]) if len(sys.argv) > 4 else Mode.SYNC
    assert step in (*STEPS, JOURNAL_COMMITTED), step
    layout = DataDir(data_dir)
    layout.ensure()
    queues = QueueStore(layout, durability=Durability(mode=mode, checkpoint_seconds=600))
    print("acked A", publish_body(queues, queue, BODY_A).name, flush=True)
    if mode is Mode.INTERVAL:  # more than the interval: A's log is flushed by now
        time.sleep(10 * queues.durability.flush_interval)
    install(step)
    result = publish_b(queues, queue)
    assert not result.duplicate, "nonce already used: use a fresh queue name"
    print("acked B", result.name)
    for event in trace:
        print(json.dumps(event))
    die()


if __name__ == "__main__":
    main()
