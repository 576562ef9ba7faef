"""The service around the jobs: back-off, locks, metrics, health, the command line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from urllib.error import HTTPError
from urllib.parse import urlsplit

import pytest

from tests.client.proxy import TcpProxy
from tests.support.queues import queue_contents, queue_name
from tests.support.replikate_jobs import (
    make_job,
    make_replicator,
    metrics_text,
    publish_all,
    replikate_env,
)
from zoscii_replikate.pointer import job_lock, pointer_path
from zoscii_replikate.service import Service
from zoscii_replikate.settings import Settings
from zosciimq.core import DataDir
from zosciimq.core.states import read_pointer
from zosciimq.settings import CoreSettings


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_source_down_for_a_while_then_back(source: tuple[str, Path], tmp_path: Path) -> None:
    sq, tq = queue_name(), queue_name()
    names = [n for n, _ in publish_all(source[0], sq, [b"1", b"2", b"3"])]
    url = urlsplit(source[0])
    proxy = TcpProxy(url.hostname, url.port).start()
    clock = FakeMonotonic()
    job = make_job(proxy.url, sq, tq, max_messages_per_run=2)
    replicator = make_replicator(job, tmp_path, monotonic=clock)
    try:
        assert replicator.run().messages == 2
        proxy.stop()  # the partner's server goes away
        down = replicator.run()
        assert (down.outcome, down.reason) == ("error", "unreachable")
        assert read_pointer(pointer_path(DataDir(tmp_path), job)) == names[1]

        assert replicator.run().outcome == "backoff"  # 5 s have not passed
        clock.now += 5
        assert replicator.run().reason == "unreachable"  # second failure: 10 s now
        clock.now += 6
        assert replicator.run().outcome == "backoff"
        clock.now += 4
        proxy.start()  # back on the same port
        assert replicator.run().outcome == "caught_up"
        assert replicator.failures == 0
    finally:
        proxy.stop()
    assert [d for _, d in queue_contents(tmp_path, tq)] == [b"1", b"2", b"3"]


def test_back_off_is_capped(tmp_path: Path) -> None:
    clock = FakeMonotonic()
    job = make_job(
        "http://127.0.0.1:9/", "q", "t", backoff_initial_seconds=1, backoff_max_seconds=4
    )
    replicator = make_replicator(job, tmp_path, monotonic=clock)
    delays = []
    for _ in range(5):
        assert replicator.run().outcome == "error"
        delays.append(replicator.not_before - clock.now)
        clock.now = replicator.not_before
    assert delays == [1, 2, 4, 4, 4]


def test_a_job_held_by_another_process_is_skipped(source: tuple[str, Path], tmp_path: Path) -> None:
    sq = queue_name()
    publish_all(source[0], sq, [b"x"])
    job = make_job(source[0], sq, "t")
    lock_path = job_lock(DataDir(tmp_path), job).path
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; "
            "from zosciimq.core.locking import FileLock; "
            f"lock = FileLock(Path({str(lock_path)!r})); lock.acquire(); "
            "print('held', flush=True); time.sleep(30)",
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout.readline() == b"held\n"
        replicator = make_replicator(job, tmp_path)
        assert replicator.run().outcome == "locked"
        assert not (tmp_path / "queues" / "t").exists()
    finally:
        holder.kill()
        holder.wait()
    assert replicator.run().messages == 1  # the kernel dropped the dead holder's lock


def test_metrics_and_health(source: tuple[str, Path], tmp_path: Path) -> None:
    sq = queue_name()
    publish_all(source[0], sq, [b"abc", b"defg"])
    data_dir = tmp_path / "data"
    settings = Settings(
        core=CoreSettings(data_dir=data_dir),
        jobs=(make_job(source[0], sq, "mirror", name="metered", interval_seconds=3600),),
        metrics_host="127.0.0.1",
        metrics_port=0,
    )
    service = Service(settings)
    assert service.prepare() is None
    thread = threading.Thread(target=service.serve, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while service.replicators["metered"].last_result is None:  # first run is immediate
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert service.ops_server is not None
        port = service.ops_server.port
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
        assert 'zoscii_replikate_messages_total{replication="metered"} 2.0' in metrics
        assert 'zoscii_replikate_bytes_total{replication="metered"} 7.0' in metrics
        lag = re.search(r'zoscii_replikate_lag_seconds\{replication="metered"\} (\S+)', metrics)
        assert lag is not None and 0 <= float(lag[1]) < 5  # caught up a moment ago
        assert 'zoscii_replikate_last_success_timestamp_seconds{replication="metered"}' in metrics
        health = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz").read())
        assert health["status"] == "ok"
        assert health["jobs"]["metered"]["last_outcome"] == "caught_up"

        os.rename(data_dir, tmp_path / "gone")  # the volume disappears
        with pytest.raises(HTTPError) as unhealthy:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz")
        assert unhealthy.value.code == 503
        assert "does not exist" in json.loads(unhealthy.value.read())["reason"]
    finally:
        service.stop.set()
        thread.join(timeout=30)
        service.close()
    assert not thread.is_alive()


def test_errors_are_counted_by_reason(tmp_path: Path) -> None:
    replicator = make_replicator(make_job("http://127.0.0.1:9/", "q", "t"), tmp_path)
    replicator.run()
    body = metrics_text(replicator)
    assert 'zoscii_replikate_errors_total{reason="unreachable",replication="test-job"} 1.0' in body


# --- the command line ----------------------------------------------------------------------
def run_cli(args: list[str], data_dir: Path, config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "zoscii_replikate", *args],
        env=replikate_env(data_dir, config),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow  # eight processes in a row (the fast tier starts one in the tests below)
def test_once_and_pointer_commands(source: tuple[str, Path], tmp_path: Path) -> None:
    sq = queue_name()
    names = [n for n, _ in publish_all(source[0], sq, [b"a", b"b", b"c"])]
    config = tmp_path / "replikate.toml"
    config.write_text(
        f'[jobs.cli]\nsource_url = "{source[0]}"\nsource_queue = "{sq}"\ntarget_queue = "m"\n'
    )
    data = tmp_path / "data"

    shown = run_cli(["pointer", "show", "cli"], data, config)
    assert shown.returncode == 0 and "(empty" in shown.stdout

    once = run_cli(["--once"], data, config)
    assert once.returncode == 0, once.stderr
    assert run_cli(["pointer", "show", "cli"], data, config).stdout.strip().endswith(names[-1])

    reset = run_cli(["pointer", "reset", "cli", "--to", names[0]], data, config)
    assert reset.returncode == 0, reset.stderr
    assert read_pointer(data / "states" / f"replikate_state_{sq}_m.txt") == names[0]
    bad = run_cli(["pointer", "reset", "cli", "--to", "../../etc/passwd"], data, config)
    assert bad.returncode == 2 and "Invalid pointer" in bad.stderr
    unknown = run_cli(["pointer", "show", "nope"], data, config)
    assert unknown.returncode == 2 and "no job named" in unknown.stderr

    # a rerun after the reset writes nothing twice: the nonces remember b and c
    assert run_cli(["--once"], data, config).returncode == 0
    assert [d for _, d in queue_contents(data, "m")] == [b"a", b"b", b"c"]
    assert run_cli(["check"], data, config).returncode == 0


def test_once_fails_with_exit_1_when_a_job_fails(tmp_path: Path) -> None:
    config = tmp_path / "replikate.toml"
    config.write_text(
        '[jobs.down]\nsource_url = "http://127.0.0.1:9/"\nsource_queue = "q"\nretries = 0\n'
    )
    result = run_cli(["--once"], tmp_path / "data", config)
    assert result.returncode == 1
    assert "[unreachable]" in result.stderr


def test_configuration_errors_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "replikate.toml"
    config.write_text('[jobs.bad]\nsource_url = "ftp://x"\nsource_queue = "q"\n')
    result = run_cli(["--once"], tmp_path / "data", config)
    assert result.returncode == 2 and "source_url" in result.stderr
