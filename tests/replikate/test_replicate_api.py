"""Replication from a real api on loopback into a local data directory."""

from __future__ import annotations

import os
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support.queues import queue_contents, queue_name
from tests.support.replikate_jobs import make_job, make_replicator, publish_all
from zoscii_replikate.pointer import pointer_path
from zosciimq.client import ZosciiClient
from zosciimq.core import DataDir, DataStore, parse_name
from zosciimq.core.states import read_pointer, write_pointer


def random_payloads(count: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    payloads = [b"", bytes(range(256)), b"\xff\xfe not utf-8 \x80", b"a b+c%20&d=e"]
    while len(payloads) < count:
        payloads.append(rng.randbytes(rng.choice((0, 1, 17, 300, 1024, 5000))))
    return payloads


@pytest.mark.parametrize(
    ("count", "cap"), [pytest.param(2000, 800, marks=pytest.mark.slow), (250, 100)]
)
def test_thousands_of_messages_replicated_byte_exact_and_in_order(
    source: tuple[str, Path], tmp_path: Path, count: int, cap: int
) -> None:
    """Thousands in the full suite; the fast tier's run has the same shape, smaller."""
    sq, tq = queue_name(), queue_name()
    payloads = random_payloads(count, seed=1)
    at_source = publish_all(source[0], sq, payloads, retention=42, threads=4)
    assert sorted(data for _, data in at_source) == sorted(payloads)
    source_names = [name for name, _ in at_source]
    replicator = make_replicator(make_job(source[0], sq, tq, max_messages_per_run=cap), tmp_path)

    outcomes = [replicator.run() for _ in range(3)]
    assert [r.outcome for r in outcomes] == ["capped", "capped", "caught_up"]
    assert sum(r.messages for r in outcomes) == count

    local = queue_contents(tmp_path, tq)
    assert [data for _, data in local] == [data for _, data in at_source]
    assert all(parse_name(name).retention_days == 42 for name, _ in local)  # source's RRRR
    # the pointer file holds only the last source name, as the original's does
    path = pointer_path(DataDir(tmp_path), replicator.job)
    assert path.name == f"replikate_state_{sq}_{tq}.txt"
    assert path.read_text() == source_names[-1]
    assert replicator.run().outcome == "caught_up"  # nothing new: nothing written
    assert len(queue_contents(tmp_path, tq)) == count


def test_new_messages_are_picked_up_on_the_next_run(
    source: tuple[str, Path], tmp_path: Path
) -> None:
    sq, tq = queue_name(), queue_name()
    publish_all(source[0], sq, [b"one", b"two"])
    replicator = make_replicator(make_job(source[0], sq, tq), tmp_path)
    assert replicator.run().messages == 2
    publish_all(source[0], sq, [b"three"])
    assert replicator.run().messages == 1
    assert [d for _, d in queue_contents(tmp_path, tq)] == [b"one", b"two", b"three"]


def test_queue_to_store_keeps_the_source_name_with_u(
    source: tuple[str, Path], tmp_path: Path
) -> None:
    sq = queue_name()
    payloads = random_payloads(30, seed=2)
    names = [name for name, _ in publish_all(source[0], sq, payloads)]
    replicator = make_replicator(make_job(source[0], sq, None), tmp_path)
    assert replicator.run().messages == 30
    store = DataStore(DataDir(tmp_path))
    expected = [name.replace(".bin", "-u.bin") for name in names]
    assert store.scan() == sorted(expected)
    for name, payload in zip(expected, payloads, strict=True):
        file = store.retrieve(name)[1]
        with file:
            assert file.read() == payload
    assert pointer_path(DataDir(tmp_path), replicator.job).name == (
        f"replikate_state_{sq}_store.txt"
    )


def test_repeat_after_a_crash_between_write_and_pointer_save_is_not_duplicated(
    source: tuple[str, Path], tmp_path: Path
) -> None:
    """Simulate the crash window: the pointer is set back after the writes happened."""
    sq, tq = queue_name(), queue_name()
    publish_all(source[0], sq, [b"a", b"b", b"c"])
    job = make_job(source[0], sq, tq)
    replicator = make_replicator(job, tmp_path)
    assert replicator.run().messages == 3
    write_pointer(pointer_path(DataDir(tmp_path), job), "")  # as if no save had happened
    again = make_replicator(job, tmp_path).run()
    assert again.messages == 3 and again.duplicates == 3
    assert [d for _, d in queue_contents(tmp_path, tq)] == [b"a", b"b", b"c"]

    store_job = make_job(source[0], sq, None, name="to-store")
    assert make_replicator(store_job, tmp_path).run().duplicates == 0
    write_pointer(pointer_path(DataDir(tmp_path), store_job), "")
    assert make_replicator(store_job, tmp_path).run().duplicates == 3
    assert len(DataStore(DataDir(tmp_path)).scan()) == 3


def test_a_pointer_at_a_message_deleted_at_the_source_moves_on(
    source: tuple[str, Path], tmp_path: Path
) -> None:
    sq, tq = queue_name(), queue_name()
    names = [name for name, _ in publish_all(source[0], sq, [b"1", b"2", b"3"])]
    job = make_job(source[0], sq, tq)
    write_pointer(pointer_path(DataDir(tmp_path), job), names[1])
    (source[1] / "queues" / sq / names[1]).unlink()
    assert make_replicator(job, tmp_path).run().messages == 1
    assert [d for _, d in queue_contents(tmp_path, tq)] == [b"3"]


def test_a_missing_source_queue_is_an_error_and_writes_nothing(
    source: tuple[str, Path], tmp_path: Path
) -> None:
    job = make_job(source[0], queue_name(), queue_name())
    result = make_replicator(job, tmp_path).run()
    assert (result.outcome, result.reason) == ("error", "not_found")
    assert not (tmp_path / "queues" / job.target_queue).exists()


def test_concurrent_publishers_at_the_source_are_replicated_without_gaps(
    source: tuple[str, Path], tmp_path: Path
) -> None:
    """Replicating while the source is being written: every message once, in name order."""
    sq, tq = queue_name(), queue_name()
    replicator = make_replicator(make_job(source[0], sq, tq, max_messages_per_run=50), tmp_path)
    payloads = [os.urandom(64) for _ in range(400)]

    def publish(chunk: list[bytes]) -> None:
        with ZosciiClient(source[0]) as client:
            for payload in chunk:
                client.publish(sq, payload)

    publish([payloads[0]])
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(publish, payloads[1 + i :: 4]) for i in range(4)]
        while not all(f.done() for f in futures):
            replicator.run()
        for future in futures:
            future.result()
    while replicator.run().outcome != "caught_up":
        pass
    local = [d for _, d in queue_contents(tmp_path, tq)]
    assert sorted(local) == sorted(payloads)
    assert len(local) == len(set(local)) == 400


@pytest.mark.parametrize("target", ["queue", "store"])
def test_pointer_file_compatible_with_the_original(
    source: tuple[str, Path], tmp_path: Path, target: str
) -> None:
    """A pointer written by another replicator (only the name inside) is taken over."""
    sq = queue_name()
    tq = queue_name() if target == "queue" else None
    names = [name for name, _ in publish_all(source[0], sq, [b"x", b"y"])]
    job = make_job(source[0], sq, tq)
    path = pointer_path(DataDir(tmp_path), job)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(names[0] + "\n")  # a trailing newline, as a PHP file_put_contents might
    assert make_replicator(job, tmp_path).run().messages == 1
    assert read_pointer(path) == names[1]
