"""The lock behind every queue, group and nonce shard: exclusive across threads and
processes, and its per-process descriptor never closed while a thread holds or waits."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from pathlib import Path

from tests.support.locks import held_by_another_process
from zosciimq.core import locking
from zosciimq.core.locking import FileLock


def _count_in_lock(path: str, counter: str, rounds: int) -> None:
    """Read-modify-write a counter file under the lock: lost updates mean no exclusion."""
    for _ in range(rounds):
        with FileLock(path):
            value = int(Path(counter).read_text() or "0")
            Path(counter).write_text(str(value + 1))


def test_fresh_lock_objects_per_operation_exclude_threads_while_the_table_churns(
    tmp_path: Path, monkeypatch
) -> None:
    """Each operation makes its own FileLock (as ConsumerGroups does) while other threads
    cycle through more paths than the table keeps: the shared lock's descriptor must stay
    open while it is used (an earlier table closed it from ``__del__`` and raced: EBADF)."""
    monkeypatch.setattr(locking, "_TABLE", locking._LockTable(keep=8))
    shared, counter = str(tmp_path / "shared.lock"), tmp_path / "counter"
    counter.write_text("0")
    errors: list[BaseException] = []

    def count() -> None:
        try:
            _count_in_lock(shared, str(counter), 300)
        except BaseException as exc:
            errors.append(exc)

    def churn(offset: int) -> None:
        try:
            for i in range(600):
                with FileLock(tmp_path / f"other-{offset}-{i % 40}.lock"):
                    pass
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=count) for _ in range(4)]
    threads += [threading.Thread(target=churn, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert counter.read_text() == "1200"
    assert len(locking._TABLE) <= 8 + 6, "idle locks beyond the limit were not forgotten"


def test_a_lock_held_is_never_forgotten(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(locking, "_TABLE", locking._LockTable(keep=1))
    held = FileLock(tmp_path / "held.lock")
    held.acquire()
    try:
        for i in range(5):
            with FileLock(tmp_path / f"x{i}.lock"):
                pass
        assert str(tmp_path / "held.lock") in locking._TABLE._locks
        # another process cannot take it: the descriptor holding it is still open
        assert not _other_process_gets(tmp_path / "held.lock")
    finally:
        held.release()
    assert _other_process_gets(tmp_path / "held.lock")


def _try_in_child(path: str, result) -> None:
    result.put(FileLock(path).try_acquire())


def _other_process_gets(path: Path) -> bool:
    context = multiprocessing.get_context("fork")
    result = context.Queue()
    child = context.Process(target=_try_in_child, args=(str(path), result))
    child.start()
    child.join(10)
    return bool(result.get(timeout=5))


def test_processes_exclude_each_other(tmp_path: Path) -> None:
    counter = tmp_path / "counter"
    counter.write_text("0")
    context = multiprocessing.get_context("fork")
    lock = str(tmp_path / "q.lock")
    children = [
        context.Process(target=_count_in_lock, args=(lock, str(counter), 100)) for _ in range(3)
    ]
    for child in children:
        child.start()
    _count_in_lock(lock, str(counter), 100)
    for child in children:
        child.join(60)
        assert child.exitcode == 0
    assert counter.read_text() == "400"


def test_try_acquire_says_no_while_another_thread_holds_it(tmp_path: Path) -> None:
    path = tmp_path / "job.lock"
    with FileLock(path):
        other: list[bool] = []
        thread = threading.Thread(target=lambda: other.append(FileLock(path).try_acquire()))
        thread.start()
        thread.join()
        assert other == [False]
    second = FileLock(path)
    assert second.try_acquire()
    second.release()
    assert os.path.exists(path)


def test_holder_tells_this_process_from_another_whatever_instance_holds_it(
    tmp_path: Path,
) -> None:
    """``holder`` asks the process-wide lock, not the instance: a lock another instance
    of the same path holds (a purge's, an orphan cleanup's) is "here", a lock another
    process holds is "elsewhere", and asking takes nothing (the lock is free after)."""
    path = tmp_path / "q.lock"
    asking = FileLock(path)
    assert asking.holder() == ""
    with FileLock(path):
        assert asking.holder() == "here"
    assert asking.holder() == ""
    with held_by_another_process(path):
        assert asking.holder() == "elsewhere"
    assert asking.holder() == ""
    assert asking.try_acquire()
    asking.release()


def test_idle_locks_are_closed_so_the_volume_can_be_remounted(tmp_path: Path, monkeypatch) -> None:
    """A descriptor open for writing keeps a read-only remount busy: locks nobody used
    for the idle time are closed by the table's background thread; held ones never."""
    table = locking._LockTable(idle_seconds=0.2)
    monkeypatch.setattr(locking, "_TABLE", table)
    held = FileLock(tmp_path / "held.lock")
    held.acquire()
    with FileLock(tmp_path / "used.lock"):
        pass
    assert table.open_descriptors() == 2
    deadline = time.monotonic() + 30
    while table.open_descriptors() > 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert table.open_descriptors() == 1, "the idle lock was not closed"
    assert not _other_process_gets(tmp_path / "held.lock")
    held.release()
    with FileLock(tmp_path / "used.lock"):  # reopened on next use
        assert table.open_descriptors() >= 1


def test_a_child_forked_while_a_thread_holds_the_table_takes_locks(tmp_path: Path) -> None:
    """Only the forking thread survives a fork: a child must not inherit the lock table's
    mutex held by another thread (the idle closer), or its first lock waits for ever."""
    holding, release = threading.Event(), threading.Event()

    def hold_the_table() -> None:
        with locking._TABLE._mutex:
            holding.set()
            release.wait(30)

    holder = threading.Thread(target=hold_the_table)
    holder.start()
    try:
        assert holding.wait(10)
        context = multiprocessing.get_context("fork")
        child = context.Process(
            target=_count_in_lock, args=(str(tmp_path / "q.lock"), str(tmp_path / "n"), 1)
        )
        (tmp_path / "n").write_text("0")
        child.start()
        child.join(20)
        assert child.exitcode == 0, "the child hung on the parent's table"
    finally:
        release.set()
        holder.join(10)
    assert (tmp_path / "n").read_text() == "1"
