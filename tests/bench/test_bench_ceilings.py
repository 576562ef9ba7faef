"""The physical disk ceiling: a preallocated log written in place and flushed once per
group, the message files and index records written after it, unflushed."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from bench import ceilings
from bench.ceilings import INDEX_RECORD_BYTES, PreallocatedLog, wal_write_factory
from bench.harness import run_clients


def test_the_log_is_zero_filled_once_and_never_changes_size(tmp_path: Path) -> None:
    log = PreallocatedLog(tmp_path / "q.wal", size=64 * 1024)
    assert os.path.getsize(tmp_path / "q.wal") == 64 * 1024
    assert os.stat(tmp_path / "q.wal").st_blocks * 512 >= 64 * 1024  # written, not sparse
    for number in range(200):  # 200 x 1 KB in 64 KiB: round the ring three times
        log.commit(b"%04d" % number + bytes(1020))
    assert os.path.getsize(tmp_path / "q.wal") == 64 * 1024
    with pytest.raises(ValueError):
        log.commit(bytes(64 * 1024 + 1))


def test_a_commit_returns_once_a_flush_begun_after_its_write_covers_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight threads: every record is in the file as a flush that began after it was
    written saw it, and one flush serves several records."""
    log = PreallocatedLog(tmp_path / "q.wal")
    seen: list[bytes] = []  # the log's contents as each flush began
    flush = os.fdatasync

    def slow_flush(fd: int) -> None:
        seen.append(os.pread(fd, log.size, 0))
        threading.Event().wait(0.005)
        flush(fd)

    monkeypatch.setattr(ceilings.os, "fdatasync", slow_flush)
    late: list[bytes] = []

    def publisher(number: int) -> None:
        for count in range(10):
            record = b"<record %d.%d>" % (number, count)
            log.commit(record)
            if not any(record in contents for contents in seen):
                late.append(record)

    threads = [threading.Thread(target=publisher, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert late == []
    assert len(seen) < 80 / 2  # groups: far fewer flushes than records


def test_each_message_is_a_file_and_an_index_record(tmp_path: Path) -> None:
    payload = bytes(range(256)) * 4
    timing = run_clients(4, wal_write_factory(tmp_path, "q", payload), count=50)
    files = sorted((tmp_path / "q").iterdir())
    assert timing.operations == len(files) == 50
    assert all(path.read_bytes() == payload for path in files)
    assert os.path.getsize(tmp_path / "index" / "q.idx") == 50 * INDEX_RECORD_BYTES
    assert os.path.getsize(tmp_path / "index" / "q.wal") == ceilings.LOG_BYTES
    assert list((tmp_path / "temp").iterdir()) == []
