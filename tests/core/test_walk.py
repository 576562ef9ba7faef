"""Walking the data directory: each walk yields what is there, classified by the core."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from zosciimq.core import DataDir, QueueStore, Upload
from zosciimq.core.names import new_name, parse_name
from zosciimq.core.store import fanout_roots
from zosciimq.core.walk import (
    Found,
    Kind,
    is_nonce_name,
    is_queue_name,
    iter_fanout_files,
    iter_index_files,
    iter_message_files,
    iter_nonce_markers,
    iter_queue_dirs,
    iter_queue_files,
    iter_store_files,
    iter_uploads,
)

MESSAGE = "202511021826110000-0030-9cc1980a-1719-440a-9650-6991c9cba11d.bin"


def touch(path: Path, body: bytes = b"") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body)
    return path


def by_name(found: list[Found]) -> dict[str, Found]:
    return {item.name: item for item in found}


def kinds(found: list[Found]) -> dict[str, Kind]:
    return {item.name: item.kind for item in found}


def test_queue_dirs_are_queues_or_strays_and_temp_is_not_a_queue(data_dir: DataDir) -> None:
    for queue in ("orders", "audit-log_2"):
        data_dir.queue_dir(queue).mkdir()
    (data_dir.queues / "Orders").mkdir()  # a queue name is lowercase
    (data_dir.queues / "bad name").mkdir()
    touch(data_dir.queues / "README")
    (data_dir.queues / "linked").symlink_to(data_dir.queue_dir("orders"))

    found = by_name(list(iter_queue_dirs(data_dir)))

    assert "temp" not in found
    assert {name for name, item in found.items() if item.kind is Kind.QUEUE} == {
        "orders",
        "audit-log_2",
    }
    assert found["orders"].queue == "orders"
    assert found["orders"].path == str(data_dir.queue_dir("orders"))
    for stray in ("Orders", "bad name", "README", "linked"):
        assert found[stray].kind is Kind.STRAY and found[stray].queue is None


def test_queue_files_are_messages_malformed_or_strays(data_dir: DataDir, tmp_path: Path) -> None:
    queue = data_dir.queue_dir("q")
    touch(queue / MESSAGE, b"12345")
    touch(queue / "not-a-message.bin")
    touch(queue / MESSAGE.upper().replace(".BIN", ".bin"))  # upper-case GUID
    touch(queue / "notes.txt")
    (queue / new_name_text()).mkdir()  # a directory named like a message
    (queue / new_name_text()).symlink_to(touch(tmp_path / "outside.bin"))

    found = list(iter_queue_files(data_dir, "q"))

    assert sorted(kinds(found).values()) == sorted(
        [Kind.MESSAGE, Kind.MALFORMED, Kind.MALFORMED, Kind.STRAY, Kind.STRAY, Kind.STRAY]
    )
    message = by_name(found)[MESSAGE]
    assert message.message == parse_name(MESSAGE)
    assert message.entry.stat(follow_symlinks=False).st_size == 5
    assert all(item.message is None for item in found if item.kind is not Kind.MESSAGE)
    assert by_name(found)["notes.txt"].kind is Kind.STRAY
    assert kinds(list(iter_message_files(queue))) == kinds(found)  # any directory of messages


def test_a_missing_directory_is_empty_and_other_errors_are_reported(data_dir: DataDir) -> None:
    assert list(iter_queue_files(data_dir, "never-created")) == []
    assert list(iter_store_files(DataDir(data_dir.root / "nothing-here"))) == []
    not_a_dir = touch(data_dir.queues / "file-not-dir")
    with pytest.raises(NotADirectoryError):
        list(iter_message_files(not_a_dir))
    errors: list[tuple[str, OSError]] = []
    assert list(iter_message_files(not_a_dir, lambda p, e: errors.append((p, e)))) == []
    assert [(path, type(exc)) for path, exc in errors] == [(str(not_a_dir), NotADirectoryError)]


def test_store_files_at_depth_three_and_strays_above(data_dir: DataDir) -> None:
    kept = [put_in_store(data_dir, new_name_text()) for _ in range(5)]
    unidentified = put_in_store(data_dir, new_name_text(unidentified=True))
    touch(data_dir.store / "stray.bin")
    touch(data_dir.store / "a" / "stray")
    touch(data_dir.store / "a" / "b" / "stray")
    touch(data_dir.store / "a" / "b" / "c" / "garbage.bin")
    touch(data_dir.store / "a" / "b" / "c" / "notes")
    (data_dir.store / "a" / "b" / "c" / "deeper").mkdir()

    found = list(iter_store_files(data_dir))

    messages = {item.path for item in found if item.kind is Kind.MESSAGE}
    assert messages == {str(path) for path in [*kept, unidentified]}
    unid = next(item for item in found if item.path == str(unidentified))
    assert unid.message is not None and unid.message.unidentified
    strays = {
        os.path.relpath(item.path, data_dir.store) for item in found if item.kind is Kind.STRAY
    }
    assert strays == {"stray.bin", "a/stray", "a/b/stray", "a/b/c/notes", "a/b/c/deeper"}
    malformed = [item.path for item in found if item.kind is Kind.MALFORMED]
    assert malformed == [str(data_dir.store / "a" / "b" / "c" / "garbage.bin")]

    # the same files, walked one first-level fan-out directory at a time
    pieces = [item for root in fanout_roots(data_dir) for item in iter_fanout_files(root)]
    above = {str(data_dir.store / "stray.bin")}
    assert sorted(item.path for item in pieces) == sorted(
        item.path for item in found if item.path not in above
    )
    assert [item.kind for item in pieces if item.name == "garbage.bin"] == [Kind.MALFORMED]


def test_nonce_markers(data_dir: DataDir) -> None:
    touch(data_dir.nonce_path("order-4711_A"))
    touch(data_dir.nonces / "bad nonce!")
    touch(data_dir.nonces / ("x" * 129))  # longer than a nonce may be
    (data_dir.nonces / "a-directory").mkdir()

    found = kinds(list(iter_nonce_markers(data_dir)))

    assert found == {
        "order-4711_A": Kind.NONCE,
        "bad nonce!": Kind.STRAY,
        "x" * 129: Kind.STRAY,
        "a-directory": Kind.STRAY,
    }


def test_uploads_are_any_file_in_temp(data_dir: DataDir) -> None:
    with Upload(data_dir) as upload:
        upload.write(b"in progress")
        touch(data_dir.temp / "upload_from_the_original.tmp")
        (data_dir.temp / "a-directory").mkdir()
        found = kinds(list(iter_uploads(data_dir)))
        assert found == {
            upload.path.name: Kind.UPLOAD,
            "upload_from_the_original.tmp": Kind.UPLOAD,
            "a-directory": Kind.STRAY,
        }


def test_index_files_say_which_queue_they_belong_to(data_dir: DataDir) -> None:
    queues = QueueStore(data_dir)
    with Upload(data_dir) as upload:
        upload.write(b"m")
        queues.publish("orders", upload, retention_days=1)
    queues.close()
    touch(data_dir.indexes / ".orders.idx.0123456789abcdef0123456789abcdef.tmp")
    touch(data_dir.indexes / ".Bad Name.idx.0123.tmp")
    touch(data_dir.indexes / "Orders.idx")  # not a queue name: not the core's
    touch(data_dir.indexes / "orders.idx.bak")
    touch(data_dir.indexes / "orders.journal")  # an earlier version's
    touch(data_dir.indexes / "format-v2")
    (data_dir.indexes / "sub.idx").mkdir()

    found = by_name(list(iter_index_files(data_dir)))

    assert (found["orders.idx"].kind, found["orders.idx"].queue) == (Kind.INDEX, "orders")
    assert (found["orders.wal"].kind, found["orders.wal"].queue) == (Kind.WAL, "orders")
    assert (found["orders.journal"].kind, found["orders.journal"].queue) == (
        Kind.JOURNAL,
        "orders",
    )
    leftover = found[".orders.idx.0123456789abcdef0123456789abcdef.tmp"]
    assert (leftover.kind, leftover.queue) == (Kind.LEFTOVER, "orders")
    assert (found[".Bad Name.idx.0123.tmp"].kind, found[".Bad Name.idx.0123.tmp"].queue) == (
        Kind.LEFTOVER,
        None,
    )
    for stray in ("Orders.idx", "orders.idx.bak", "format-v2", "sub.idx"):
        assert found[stray].kind is Kind.STRAY and found[stray].queue is None
    assert str(data_dir.index_path("orders")) == found["orders.idx"].path
    assert str(data_dir.journal_path("orders")) == found["orders.journal"].path


def test_name_predicates() -> None:
    assert is_queue_name("orders") and is_queue_name("a_b-9")
    assert not is_queue_name("Orders")  # the directory of a queue is its lowercase name
    assert not is_queue_name("temp") and not is_queue_name("") and not is_queue_name("a/b")
    assert is_nonce_name("Order-4711_x")
    assert not is_nonce_name("") and not is_nonce_name("a b") and not is_nonce_name("x" * 129)


# --- helpers -------------------------------------------------------------------------------
def new_name_text(*, unidentified: bool = False) -> str:
    return str(new_name(datetime.now(UTC), 3, unidentified=unidentified))


def put_in_store(data_dir: DataDir, name: str) -> Path:
    """A store file where the fan-out puts it."""
    return touch(data_dir.store_path(name, parse_name(name).store_dirs), b"s")
