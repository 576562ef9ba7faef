"""Replication under WAN faults (issue 27, item 9): a real source api behind a proxy that
partitions, throttles and flaps the link (tests.support.wan_proxy). What must hold:

* nothing lost, duplicated or reordered, the pointer never ahead of what was stored;
* what an operator sees is true while a run is in progress: the lag grows through a
  partition (it read 0 through a 60 s one, with ~14,000 messages waiting), a stall is
  counted within seconds (errors_total stayed 0 for 42-44 s), the last success moves
  during a long run (absent for 94 s while 18,000 messages were replicated);
* no APScheduler "maximum number of running instances reached" warning on a healthy
  slow link (9-19 per scenario), and catch-up bounded by the link, not by a default cap
  of 1,000 messages a run.

Small versions here; bench/wan_faults.py runs the eight scenarios at 20,000 messages.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.security.figures import TALLY
from tests.support.queues import queue_contents, queue_name
from tests.support.replikate_jobs import make_job, make_replicator, publish_all
from tests.support.wan_proxy import WanProxy
from zoscii_replikate.replicator import Replicator, RunOutcome, RunResult
from zoscii_replikate.service import Service
from zoscii_replikate.settings import Settings
from zosciimq.core.states import read_pointer
from zosciimq.settings import CoreSettings

pytestmark = pytest.mark.slow  # links slowed and cut on purpose: seconds a test


@pytest.fixture
def link(source: tuple[str, Path]) -> Iterator[WanProxy]:
    parts = urlsplit(source[0])
    with WanProxy((parts.hostname or "127.0.0.1", parts.port or 80)) as proxy:
        yield proxy
    TALLY["wan faults: injected"] += sum(proxy.faults.values())


def sample(replicator: Replicator, name: str, **labels: str) -> float | None:
    wanted = {"replication": replicator.job.name, **labels}
    for family in replicator.metrics.registry.collect():
        for found in family.samples:
            if found.name == name and found.labels == wanted:
                return found.value
    return None


def in_thread(replicator: Replicator, **kwargs: bool) -> tuple[threading.Thread, list]:
    results: list[RunResult] = []
    thread = threading.Thread(target=lambda: results.append(replicator.run(**kwargs)))
    thread.start()
    return thread, results


def assert_exact_copy(source: tuple[str, Path], sq: str, tmp_path: Path, tq: str) -> None:
    """Every source message once, in order, byte for byte; the pointer at the last."""
    want = queue_contents(source[1], sq)
    got = queue_contents(tmp_path, tq)
    assert [body for _, body in got] == [body for _, body in want]
    pointer = read_pointer(next((tmp_path / "states").glob("replikate_state_*.txt")))
    assert pointer == want[-1][0]
    TALLY["wan faults: messages verified"] += len(want)


def test_a_partition_shows_at_once_as_a_stall_and_a_growing_lag(
    source: tuple[str, Path], link: WanProxy, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sq, tq = queue_name(), "mirror"
    publish_all(source[0], sq, [b"before-%d" % i for i in range(40)])
    job = make_job(link.url, sq, tq, stall_seconds=1, read_timeout=4, retries=0, batch_count=10)
    replicator = make_replicator(job, tmp_path)
    assert replicator.run().outcome is RunOutcome.CAUGHT_UP
    assert sample(replicator, "zoscii_replikate_lag_seconds") < 2
    link.partition()
    publish_all(source[0], sq, [b"during-%d" % i for i in range(30)])
    started = time.monotonic()
    thread, results = in_thread(replicator)
    try:
        while not sample(replicator, "zoscii_replikate_errors_total", reason="stalled"):
            assert time.monotonic() - started < 3.5, "no stall counted within seconds"
            time.sleep(0.1)
        first = sample(replicator, "zoscii_replikate_lag_seconds")
        time.sleep(1.0)
        second = sample(replicator, "zoscii_replikate_lag_seconds")
        assert first is not None and second is not None and second >= first + 0.8
        assert second >= time.monotonic() - started - 0.5  # as old as the partition at least
    finally:
        link.heal()
        thread.join(30)
    assert "the source or the link is stalled" in caplog.text
    if results[0].outcome is RunOutcome.ERROR:  # the read timeout ran out first
        assert replicator.run(ignore_backoff=True).outcome is RunOutcome.CAUGHT_UP
    assert_exact_copy(source, sq, tmp_path, tq)
    assert sample(replicator, "zoscii_replikate_lag_seconds") < 2


def test_a_long_run_on_a_slow_link_reports_as_it_goes(
    source: tuple[str, Path], link: WanProxy, tmp_path: Path
) -> None:
    """1,200 messages (over the old per-run cap of 1,000) over a link of 150 KB/s: one run
    takes them all, and the last success, the message count and the lag move during it."""
    sq, tq = queue_name(), "mirror"
    publish_all(source[0], sq, [bytes([i % 251]) * 400 for i in range(1200)])
    link.rate = 150_000
    replicator = make_replicator(make_job(link.url, sq, tq, batch_count=100), tmp_path)
    thread, results = in_thread(replicator)
    seen = []
    while thread.is_alive():
        seen.append(
            (
                sample(replicator, "zoscii_replikate_messages_total"),
                sample(replicator, "zoscii_replikate_last_success_timestamp_seconds"),
                sample(replicator, "zoscii_replikate_lag_seconds"),
            )
        )
        time.sleep(0.2)
    thread.join()
    (result,) = results
    assert (result.outcome, result.messages) == (RunOutcome.CAUGHT_UP, 1200)
    during = [(n, s, lag) for n, s, lag in seen if n and 0 < n < 1200]
    assert during, "no sample while the run was under way"
    assert all(s for _, s, _ in during), "last success absent while batches were written"
    counts = [n for n, _, _ in during]
    assert counts == sorted(counts) and counts[0] < counts[-1]
    assert_exact_copy(source, sq, tmp_path, tq)


def test_a_run_longer_than_the_interval_raises_no_scheduler_warning(
    source: tuple[str, Path], link: WanProxy, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A healthy slow link: a run of about 3 s on a 1 s interval. No "maximum number of
    running instances" warning, and the next run comes once the long one is over."""
    sq, tq = queue_name(), "mirror"
    publish_all(source[0], sq, [b"x" * 900 for _ in range(300)])
    link.rate = 100_000
    settings = Settings(
        core=CoreSettings(data_dir=tmp_path),
        jobs=(make_job(link.url, sq, tq, batch_count=20, interval_seconds=1),),
        metrics_host="127.0.0.1",
        metrics_port=0,
    )
    service = Service(settings)
    assert service.prepare() is None
    caplog.set_level(logging.INFO)
    thread = threading.Thread(target=service.serve, daemon=True)
    thread.start()
    replicator = service.replicators["test-job"]
    try:
        deadline = time.monotonic() + 20
        while len(queue_contents(tmp_path, tq)) < 300:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        link.rate = None
        publish_all(source[0], sq, [b"later"])
        while len(queue_contents(tmp_path, tq)) < 301:  # the schedule resumed
            assert time.monotonic() < deadline
            time.sleep(0.1)
        # The copy is there before its run ends (caught up once its next fetch is empty).
        while sample(replicator, "zoscii_replikate_runs_total", outcome="caught_up") < 2:
            assert time.monotonic() < deadline, "the second run never caught up"
            time.sleep(0.1)
    finally:
        service.stop.set()
        thread.join(20)
        service.close()
    assert "maximum number of running instances" not in caplog.text
    assert_exact_copy(source, sq, tmp_path, tq)


def test_a_stop_during_a_long_run_ends_the_service_soon(
    source: tuple[str, Path], link: WanProxy, tmp_path: Path
) -> None:
    """SIGTERM while a run is under way on a slow link: it ends after its current batch
    and the service returns (the run's job, paused while it runs, is resumed into a
    scheduler that is shutting down: no deadlock on the scheduler's locks)."""
    sq, tq = queue_name(), "mirror"
    publish_all(source[0], sq, [b"y" * 900 for _ in range(300)])
    link.rate = 30_000
    settings = Settings(
        core=CoreSettings(data_dir=tmp_path),
        jobs=(make_job(link.url, sq, tq, batch_count=10, interval_seconds=1),),
        metrics_host="127.0.0.1",
        metrics_port=0,
    )
    service = Service(settings)
    assert service.prepare() is None
    thread = threading.Thread(target=service.serve, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not queue_contents(tmp_path, tq):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    service.stop.set()
    thread.join(10)
    alive = thread.is_alive()
    link.rate = None
    service.close()
    assert not alive, "the service did not stop within 10 s of the stop"
    assert 0 < len(queue_contents(tmp_path, tq)) < 300  # stopped between batches


def test_a_flapping_link_loses_duplicates_and_reorders_nothing(
    source: tuple[str, Path], link: WanProxy, tmp_path: Path
) -> None:
    """Partitions of 0.6 s every 1.2 s, lost segments, and cut connections, while the
    source is published to: runs fail and are retried, and the copy is exact."""
    sq, tq = queue_name(), "mirror"
    job = make_job(link.url, sq, tq, batch_count=25, read_timeout=1, stall_seconds=0.5)
    replicator = make_replicator(job, tmp_path)
    link.loss, link.loss_delay = 0.05, 0.1
    link.flap(up=0.6, down=0.6)
    try:
        for round_ in range(6):
            publish_all(source[0], sq, [b"r%d-%d" % (round_, i) for i in range(50)])
            replicator.run(ignore_backoff=True)
            if round_ == 3:
                link.reset()
    finally:
        link.steady()
        link.loss = 0.0
    assert replicator.run(ignore_backoff=True).outcome is RunOutcome.CAUGHT_UP
    assert_exact_copy(source, sq, tmp_path, tq)
