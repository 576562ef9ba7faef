"""A fetched batch is written in one core call, with one pointer save after it."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.queues import queue_contents, queue_name
from tests.support.replikate_jobs import make_job, make_replicator, metrics_text, publish_all
from zoscii_replikate import replicator as replicator_module
from zoscii_replikate.pointer import pointer_path
from zosciimq.core import DataDir, DataStore
from zosciimq.core.states import read_pointer, write_pointer


def payloads(count: int, seed: int = 3) -> list[bytes]:
    rng = random.Random(seed)
    return [f"{i:04d}:".encode() + rng.randbytes(rng.randrange(0, 1500)) for i in range(count)]


def counting(calls: list[Any], fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, recording the arguments of every call in ``calls``."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return fn(*args, **kwargs)

    return wrapper


@pytest.fixture
def pointer_saves(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every pointer save of the replicator: (path, pointer)."""
    calls: list[Any] = []
    monkeypatch.setattr(
        replicator_module, "write_pointer", counting(calls, replicator_module.write_pointer)
    )
    return calls


def test_a_batch_is_one_publish_and_one_pointer_save_in_source_order(
    source: tuple[str, Path], tmp_path: Path, pointer_saves: list[Any]
) -> None:
    sq, tq = queue_name(), "mirror"
    at_source = publish_all(source[0], sq, payloads(120), retention=9)
    names = [name for name, _ in at_source]
    replicator = make_replicator(make_job(source[0], sq, tq, batch_count=40), tmp_path)
    publishes: list[Any] = []
    replicator.queues.publish_many = counting(publishes, replicator.queues.publish_many)  # type: ignore[method-assign]

    result = replicator.run()

    assert (result.outcome, result.messages, result.duplicates) == ("caught_up", 120, 0)
    assert [len(messages) for _queue, messages in publishes] == [40, 40, 40]
    assert [pointer for _path, pointer in pointer_saves] == [names[39], names[79], names[119]]
    local = queue_contents(tmp_path, tq)
    assert [data for _, data in local] == [data for _, data in at_source]  # source order
    local_names = [name for name, _ in local]
    assert local_names == sorted(local_names) and len(set(local_names)) == 120
    body = metrics_text(replicator)
    assert 'zoscii_replikate_messages_total{replication="test-job"} 120.0' in body
    total = sum(len(data) for _, data in at_source)
    assert f'zoscii_replikate_bytes_total{{replication="test-job"}} {float(total)}' in body


def test_a_batch_into_the_store_is_one_put_and_one_pointer_save(
    source: tuple[str, Path], tmp_path: Path, pointer_saves: list[Any]
) -> None:
    sq = queue_name()
    at_source = publish_all(source[0], sq, payloads(60))
    replicator = make_replicator(make_job(source[0], sq, None, batch_count=60), tmp_path)
    puts: list[Any] = []
    replicator.store.put_many = counting(puts, replicator.store.put_many)  # type: ignore[method-assign]

    assert replicator.run().messages == 60

    assert [len(items) for (items,) in puts] == [60]
    assert [pointer for _path, pointer in pointer_saves] == [at_source[-1][0]]
    store = DataStore(DataDir(tmp_path))
    assert store.scan() == [name.replace(".bin", "-u.bin") for name, _ in at_source]


def test_a_batch_partly_written_before_writes_only_the_rest(
    source: tuple[str, Path], tmp_path: Path
) -> None:
    """The pointer set back into the middle of what was written: the batch that follows
    holds repeats and new messages; the repeats are counted and not written again."""
    sq, tq = queue_name(), "mirror"
    at_source = publish_all(source[0], sq, payloads(30))
    names = [name for name, _ in at_source]
    job = make_job(source[0], sq, tq, batch_count=10, max_messages_per_run=20)
    assert make_replicator(job, tmp_path).run().messages == 20
    write_pointer(pointer_path(DataDir(tmp_path), job), names[14])

    again = make_replicator(job, tmp_path).run()

    assert (again.outcome, again.messages, again.duplicates) == ("caught_up", 15, 5)
    assert [data for _, data in queue_contents(tmp_path, tq)] == [d for _, d in at_source]
    assert read_pointer(pointer_path(DataDir(tmp_path), job)) == names[-1]


def test_a_failed_pointer_save_repeats_the_batch_without_duplicating(
    source: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch write succeeded, its pointer save did not: an error; the next run
    fetches the batch again and finds all of it written."""
    sq, tq = queue_name(), "mirror"
    at_source = publish_all(source[0], sq, payloads(25))
    names = [name for name, _ in at_source]
    job = make_job(source[0], sq, tq, batch_count=10)
    saves = {"n": 0}
    save = replicator_module.write_pointer

    def failing_second_save(path: Path, pointer: str) -> None:
        saves["n"] += 1
        if saves["n"] == 2:
            raise OSError(5, "Input/output error")
        save(path, pointer)

    monkeypatch.setattr(replicator_module, "write_pointer", failing_second_save)
    failed = make_replicator(job, tmp_path).run()
    assert (failed.outcome, failed.reason, failed.messages) == ("error", "local_io", 10)
    assert failed.pointer == names[9] == read_pointer(pointer_path(DataDir(tmp_path), job))
    assert len(queue_contents(tmp_path, tq)) == 20  # the second batch is written

    again = make_replicator(job, tmp_path).run()
    assert (again.outcome, again.messages, again.duplicates) == ("caught_up", 15, 10)
    assert [data for _, data in queue_contents(tmp_path, tq)] == [d for _, d in at_source]


def test_a_stop_during_a_batch_write_lets_the_batch_finish(
    source: tuple[str, Path], tmp_path: Path, pointer_saves: list[Any]
) -> None:
    """Either a batch is written and its pointer saved, or neither: a stop that comes
    while a batch is being written ends the run after its pointer save."""
    sq, tq = queue_name(), "mirror"
    at_source = publish_all(source[0], sq, payloads(30))
    replicator = make_replicator(make_job(source[0], sq, tq, batch_count=10), tmp_path)
    write = replicator._write_local

    def write_then_stop(batch: list[Any]) -> list[bool]:
        replicator.stop.set()
        return write(batch)

    replicator._write_local = write_then_stop  # type: ignore[method-assign]
    result = replicator.run()

    assert (result.outcome, result.messages) == ("stopped", 10)
    assert [pointer for _path, pointer in pointer_saves] == [at_source[9][0]]
    assert [data for _, data in queue_contents(tmp_path, tq)] == [d for _, d in at_source[:10]]
    temp = tmp_path / "queues" / "temp"
    assert not list(temp.iterdir())  # the batch fetched ahead was discarded
