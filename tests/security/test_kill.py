"""kill -9 of a worker, and of the whole server, during concurrent publishing.

Nothing acknowledged may be lost, nothing may be stored twice (every message carries a
nonce and is retried until acknowledged), everything visible must be whole (sha256),
in name order, and no file may sit in the queue directory that a consumer cannot fetch.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.security.figures import TALLY
from tests.security.load import PublishLoad, check
from tests.support.api_server import ApiServer


def assert_sound(url: str, load: PublishLoad, queue_dir: Path) -> None:
    found = check(url, load, queue_dir)
    TALLY["kill -9: messages verified by sha256"] += len(load.acked)
    TALLY["kill -9: acknowledged messages lost"] += len(found.lost)
    assert found.lost == [], f"{len(found.lost)} acknowledged messages lost"
    assert found.duplicated == [], f"stored twice: {found.duplicated[:10]}"
    assert found.strangers == 0, "a body that is no message: torn or mixed"
    assert found.names == sorted(found.names) and len(set(found.names)) == len(found.names)
    assert found.unfetchable == [], f"in the queue directory, never served: {found.unfetchable}"
    assert len(found.names) == len(load.acked) == load.total


@pytest.mark.slow
def test_kill_9_of_one_worker(tmp_path: Path, servers) -> None:
    data_dir = tmp_path / "data"
    server = servers(data_dir, workers=2, threads=8)
    load = PublishLoad(lambda: server.url, "w", 2000, threads=8, tag="worker").start()
    killed = []
    for target in (400, 1200):
        load.wait_for(target)
        victim = server.worker_pids()[0]
        os.kill(victim, signal.SIGKILL)
        killed.append(victim)
        deadline = time.monotonic() + 30
        while True:  # the master notices and starts a new worker
            pids = server.worker_pids()
            if len(pids) == 2 and victim not in pids:
                break
            assert time.monotonic() < deadline, f"no new worker after killing {victim}"
            time.sleep(0.05)
    load.join()
    assert server.process is not None and server.process.poll() is None  # the master lived
    TALLY["kill -9: faults injected"] += len(killed)
    print(f"worker kills: {len(killed)}, publish retries: {load.retries}")
    assert_sound(server.url, load, data_dir / "queues" / "w")


@pytest.mark.slow
def test_kill_9_of_the_server_during_10000_concurrent_publishes(tmp_path: Path) -> None:
    """8 publishers, 10,000 messages; the whole server (master and workers) is killed
    three times and restarted on the same data directory; the publishers carry on."""
    data_dir = tmp_path / "data"
    current: list[ApiServer] = [ApiServer(data_dir, workers=2, threads=8).start()]
    load = PublishLoad(lambda: current[-1].url, "k", 10_000, threads=8, tag="server").start()
    try:
        for target in (2000, 5000, 8000):
            load.wait_for(target)
            current[-1].kill()
            current.append(ApiServer(data_dir, workers=2, threads=8).start())
        load.join()
        final = ApiServer(data_dir, workers=2, threads=8)  # and once more when all is done
        current[-1].kill()
        current.append(final.start())
        TALLY["kill -9: faults injected"] += 4
        temp_leftovers = len(list((data_dir / "queues" / "temp").iterdir()))
        print(f"server kills: 4, publish retries: {load.retries}, temp files: {temp_leftovers}")
        assert_sound(final.url, load, data_dir / "queues" / "k")
    finally:
        for server in current:
            server.stop()
