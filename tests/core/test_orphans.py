"""The core's files of a vanished queue: deleted under the queue lock, never a live one's."""

from __future__ import annotations

from pathlib import Path

from zosciimq.core import DataDir
from zosciimq.core.orphans import forget_if_vanished
from zosciimq.core.walk import Found, Kind, iter_index_files

SUFFIXES = ("idx", "journal", "ttl", "usage")


def write(path: Path, body: bytes = b"12345") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body)
    return path


def found_by_name(data_dir: DataDir) -> dict[str, Found]:
    return {found.name: found for found in iter_index_files(data_dir)}


def test_a_vanished_queues_index_journal_and_sidecars_go_a_live_ones_stay(
    data_dir: DataDir,
) -> None:
    data_dir.queue_dir("live").mkdir(parents=True)
    for queue in ("live", "gone"):
        for path in (
            data_dir.index_path(queue),
            data_dir.journal_path(queue),
            data_dir.ttl_path(queue),
            data_dir.usage_path(queue),
        ):
            write(path)
    write(data_dir.indexes / ".gone.idx.0123abcd.tmp")  # a leftover: not this rule's
    write(data_dir.indexes / "notes.txt")  # a stray: not this rule's
    lock = write(data_dir.queue_lock_path("gone"), b"")
    entries = found_by_name(data_dir)

    dry = {n: forget_if_vanished(data_dir, f, dry_run=True) for n, f in entries.items()}
    assert {n for n, size in dry.items() if size is not None} == {
        "gone.idx",
        "gone.journal",
        "gone.ttl",
        "gone.usage",
    }
    assert all(size == 5 for size in dry.values() if size is not None)
    assert found_by_name(data_dir).keys() == entries.keys()  # a dry run deletes nothing

    freed = {n: forget_if_vanished(data_dir, f) for n, f in entries.items()}
    assert freed == dry
    left = sorted(p.name for p in data_dir.indexes.iterdir())
    assert left == [".gone.idx.0123abcd.tmp", *(f"live.{s}" for s in SUFFIXES), "notes.txt"]
    assert lock.exists()  # lock files are never removed
    assert forget_if_vanished(data_dir, entries["gone.idx"]) is None  # gone already


def test_a_queue_made_anew_after_the_listing_keeps_its_files(data_dir: DataDir) -> None:
    write(data_dir.index_path("back"))
    (entry,) = [f for f in iter_index_files(data_dir) if f.kind is Kind.INDEX]
    data_dir.queue_dir("back").mkdir(parents=True)  # a publisher created it meanwhile
    assert forget_if_vanished(data_dir, entry) is None
    assert data_dir.index_path("back").exists()
