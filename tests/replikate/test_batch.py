"""Replication by batch fetch and long-poll, and the fallback against the original."""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.replikate.fake_original import FakeOriginalServer
from tests.support.publisher import publish_from_another_process
from tests.support.queues import queue_contents, queue_name
from tests.support.replikate_jobs import make_job, make_replicator, metrics_text, publish_all
from zoscii_replikate.pointer import pointer_path
from zoscii_replikate.replicator import Replicator, RunResult
from zosciimq.core import DataDir, parse_name
from zosciimq.core.states import read_pointer


def varied_payloads(count: int) -> list[bytes]:
    rng = random.Random(5)
    out = [b"", b"\r\n--zoscii-\r\n", bytes(range(256))]
    while len(out) < count:
        out.append(rng.randbytes(rng.choice((0, 1, 700, 1000, 1001, 2500, 9000))))
    out[17] = rng.randbytes(200_000)  # over every budget below: a batch of its own
    return out


def fetches(replicator: Replicator) -> float:
    return replicator.metrics.fetches.labels(replicator.job.name)._value.get()


def temp_files(data_dir: Path) -> list[str]:
    temp = data_dir / "queues" / "temp"
    return os.listdir(temp) if temp.exists() else []


@dataclass
class Varied:
    """150 varied messages (retention 12) at the source, and their replication one fetch
    per message: what every batched replication below must equal."""

    queue: str
    at_source: list[tuple[str, bytes]]
    single: Replicator
    single_result: RunResult
    single_dir: Path


@pytest.fixture(scope="module")
def varied(source: tuple[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Varied:
    sq = queue_name()
    at_source = publish_all(source[0], sq, varied_payloads(150), retention=12)
    single_dir = tmp_path_factory.mktemp("single")
    single = make_replicator(
        make_job(source[0], sq, "single", name="single", batch_count=1), single_dir
    )
    return Varied(sq, at_source, single, single.run(), single_dir)


def test_single_fetch_replication_is_one_fetch_per_message(varied: Varied) -> None:
    assert varied.single_result.messages == 150
    one = queue_contents(varied.single_dir, "single")
    assert [d for _, d in one] == [d for _, d in varied.at_source]
    assert varied.single.client.capabilities.batch_fetch is None
    assert fetches(varied.single) == 151  # one per message, and the one that found nothing
    assert temp_files(varied.single_dir) == []


@pytest.mark.parametrize(
    ("batch_count", "batch_bytes", "cap"),
    [(7, 16 << 20, 1000), (7, 3000, 1000), (25, 1, 1000), (100, 50_000, 33), (1000, 16 << 20, 60)],
)
def test_batched_replication_equals_single_fetch_replication(
    source: tuple[str, Path],
    varied: Varied,
    tmp_path: Path,
    batch_count: int,
    batch_bytes: int,
    cap: int,
) -> None:
    """Byte-exact, in order, with the source's retention, whatever the batch boundaries."""
    sq, at_source = varied.queue, varied.at_source
    batched = make_replicator(
        make_job(
            source[0],
            sq,
            "batched",
            name="batched",
            batch_count=batch_count,
            batch_bytes=batch_bytes,
            max_messages_per_run=cap,
        ),
        tmp_path,
    )
    results = []
    while not results or results[-1].outcome != "caught_up":
        results.append(batched.run())
        assert results[-1].ok, results[-1].error
        assert results[-1].messages <= cap
    assert sum(r.messages for r in results) == 150
    assert all(r.messages == cap for r in results[:-1])  # every capped run did its whole cap

    one, many = queue_contents(varied.single_dir, "single"), queue_contents(tmp_path, "batched")
    assert [d for _, d in many] == [d for _, d in one] == [d for _, d in at_source]
    assert all(parse_name(name).retention_days == 12 for name, _ in many)
    assert read_pointer(pointer_path(DataDir(tmp_path), batched.job)) == at_source[-1][0]
    assert batched.client.capabilities.batch_fetch is True
    if batch_bytes >= 50_000:
        assert fetches(batched) < 151 / 2
    assert temp_files(tmp_path) == []


def test_a_stopped_run_discards_what_it_fetched_ahead(
    source: tuple[str, Path], tmp_path: Path
) -> None:
    sq = queue_name()
    publish_all(source[0], sq, [b"a", b"b", b"c"])
    stop = threading.Event()
    stop.set()
    replicator = make_replicator(make_job(source[0], sq, "t"), tmp_path, stop=stop)
    result = replicator.run()
    assert (result.outcome, result.messages) == ("stopped", 0)
    assert temp_files(tmp_path) == [] and queue_contents(tmp_path, "t") == []
    assert read_pointer(pointer_path(DataDir(tmp_path), replicator.job)) == ""


# --- the original implementation ----------------------------------------------------------------
@pytest.fixture
def original() -> Iterator[FakeOriginalServer]:
    server = FakeOriginalServer()
    yield server
    server.close()


def test_against_the_original_batches_fall_back_to_single_fetches(
    original: FakeOriginalServer, tmp_path: Path
) -> None:
    payloads = varied_payloads(40)
    for payload in payloads:
        original.add("orders", payload, retention=4)
    expected = [original.queues["orders"][n] for n in sorted(original.queues["orders"])]
    replicator = make_replicator(make_job(original.url, "orders", "mirror"), tmp_path)
    result = replicator.run()
    assert (result.outcome, result.messages) == ("caught_up", 40)
    assert [d for _, d in queue_contents(tmp_path, "mirror")] == expected
    params = [p for _, _, p in original.requests]
    assert params[0][b"count"] == b"100"
    assert all(b"count" not in p for p in params[1:])  # the client remembered
    assert replicator.client.capabilities.batch_fetch is False
    body = metrics_text(replicator)
    assert 'zoscii_replikate_source_batch_support{replication="test-job"} 0.0' in body


@pytest.mark.slow  # times a polling pace over seconds
def test_waiting_against_the_original_polls_at_a_steady_pace(
    original: FakeOriginalServer, tmp_path: Path
) -> None:
    """The original answers at once: the waiting run polls about once a second."""
    original.add("orders", b"first", when=datetime.now() - timedelta(hours=1))
    job = make_job(original.url, "orders", "mirror", wait_seconds=4, interval_seconds=4)
    threading.Timer(0.5, lambda: original.add("orders", b"second")).start()
    result = make_replicator(job, tmp_path).run()
    assert (result.outcome, result.messages) == ("caught_up", 2)
    assert [d for _, d in queue_contents(tmp_path, "mirror")] == [b"first", b"second"]
    assert len(original.requests) <= 10  # about 3 s of waiting at one poll a second


# --- long-poll against the api -------------------------------------------------------------------


@pytest.mark.slow  # waits out its whole window (7 s); against the original (above): fast
def test_a_waiting_run_replicates_a_message_published_meanwhile(
    source: tuple[str, Path], tmp_path: Path
) -> None:
    """The run is caught up, then long-polls; a publish by another process arrives in it."""
    sq = queue_name()
    publish_all(source[0], sq, [b"before"])
    job = make_job(source[0], sq, "near", wait_seconds=8, interval_seconds=8)
    replicator = make_replicator(job, tmp_path)
    results = []
    runner = threading.Thread(target=lambda: results.append(replicator.run()))
    runner.start()
    while not queue_contents(tmp_path, "near"):
        assert runner.is_alive(), results
        threading.Event().wait(0.02)
    name = publish_from_another_process(source[1], sq, "meanwhile")
    runner.join(timeout=30)
    assert results and (results[0].outcome, results[0].messages) == ("caught_up", 2)
    local = [d for _, d in queue_contents(tmp_path, "near")]
    assert local[0] == b"before" and local[1].startswith(b"meanwhile:0")
    assert read_pointer(pointer_path(DataDir(tmp_path), job)) == name
    # caught up, it waited in long-polls of at most 5 s instead of polling
    assert fetches(replicator) <= 8


def test_without_wait_seconds_a_caught_up_run_ends_at_once(
    source: tuple[str, Path], tmp_path: Path
) -> None:
    sq = queue_name()
    publish_all(source[0], sq, [b"x"])
    replicator = make_replicator(make_job(source[0], sq, "t", interval_seconds=3600), tmp_path)
    assert replicator.run().outcome == "caught_up"
    assert fetches(replicator) == 2
