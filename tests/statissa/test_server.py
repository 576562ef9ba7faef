"""statissa served by a real gunicorn process (the plain scan in place of Spark, see
``served.py``): the endpoints over HTTP, access control with the right ``statistics``,
the open ops endpoints, on-demand refresh, and a clean stop on SIGTERM."""

from __future__ import annotations

import hashlib
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import requests

from tests.statissa.served import start, wait_until
from zoscii_statissa.web import QUEUES, REFRESH

pytestmark = pytest.mark.timeout(180)  # a process each, but no JVM: about a second

# every path that needs the right (a queue page stands for all of them)
PROTECTED = frozenset({"/", "/stats.json", "/history.json", REFRESH, f"{QUEUES}orders"})
STATS_TOKEN = "statistics-" + "7" * 40
OTHER_TOKEN = "partner-" + "3" * 40
CLIENTS = f"""
[[clients]]
name = "grafana"
token_sha256 = "{hashlib.sha256(STATS_TOKEN.encode()).hexdigest()}"
username = "ops"
actions = ["statistics"]

[[clients]]
name = "partner"
token_sha256 = "{hashlib.sha256(OTHER_TOKEN.encode()).hexdigest()}"
read = ["*"]
write = ["*"]
actions = ["store", "retrieve", "scan", "identify", "metrics"]
"""


@dataclass
class Served:
    base: str
    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text()


def _serve(tmp_path: Path, data_root: Path, **extra: str) -> Iterator[Served]:
    log = tmp_path / "statissa.log"
    process, base = start(data_root, log, ZOSCII_STATISSA_THREADS="3", **extra)
    served = Served(base, process, log)
    try:
        wait_until(lambda: requests.get(f"{served.base}/healthz", timeout=5).status_code == 200, 60)
        yield served
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.fixture
def guarded(tmp_path: Path, data_root: Path) -> Iterator[Served]:
    yield from _serve(tmp_path, data_root, ZOSCII_AUTH_CLIENTS=CLIENTS)


@pytest.fixture
def open_server(tmp_path: Path, data_root: Path) -> Iterator[Served]:
    yield from _serve(tmp_path, data_root)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_the_statistics_need_the_right_and_the_ops_endpoints_stay_open(guarded: Served) -> None:
    base = guarded.base
    with requests.Session() as http:
        assert http.get(f"{base}/healthz", timeout=5).status_code == 200
        metrics = http.get(f"{base}/metrics", timeout=5)
        assert metrics.status_code == 200 and "zoscii_statissa_runs_total" in metrics.text
        assert metrics.headers["Server"].startswith("gunicorn")

        for path in sorted(PROTECTED):
            call = http.post if path == "/refresh" else http.get
            anonymous = call(f"{base}{path}", timeout=5)
            assert anonymous.status_code == 401, path
            assert 'Basic realm="zoscii statissa"' in anonymous.headers["WWW-Authenticate"]
            assert call(f"{base}{path}", headers=bearer("wrong" * 10), timeout=5).status_code == 401
            refused = call(f"{base}{path}", headers=bearer(OTHER_TOKEN), timeout=5)
            assert refused.status_code == 403, path
            assert "statistics" in refused.json()["error"]

        allowed = bearer(STATS_TOKEN)
        wait_until(lambda: http.get(f"{base}/stats.json", headers=allowed, timeout=5).ok, 60)
        stats = http.get(f"{base}/stats.json", headers=allowed, timeout=5).json()
        assert stats["totals"] == {"messages": 10, "bytes": 485}
        assert stats["consumer_groups"] == []
        page = http.get(f"{base}/", auth=("ops", STATS_TOKEN), timeout=5)  # a browser: Basic
        assert page.status_code == 200 and "orders" in page.text
        refreshed = http.post(f"{base}/refresh", headers=allowed, timeout=60)
        assert refreshed.status_code == 200
        assert refreshed.json()["last_run"]["runs_total"] == 2
        button = http.post(
            f"{base}/refresh?redirect=1", headers=allowed, timeout=60, allow_redirects=False
        )
        assert button.status_code == 303
        cross_site = {**allowed, "Sec-Fetch-Site": "cross-site"}  # another site's form
        assert http.post(f"{base}/refresh", headers=cross_site, timeout=5).status_code == 403
        assert http.post(f"{base}/metrics", timeout=5).status_code == 405


def test_without_access_control_everything_is_open(open_server: Served) -> None:
    base = open_server.base
    with requests.Session() as http:
        refreshed = http.post(f"{base}/refresh", timeout=60)
        assert refreshed.status_code == 200
        assert refreshed.json()["totals"]["messages"] == 10
        assert http.get(f"{base}/", timeout=5).status_code == 200
        assert http.get(f"{base}/stats.json", timeout=5).status_code == 200
        assert http.get(f"{base}/nothing", timeout=5).status_code == 404


def test_one_worker_under_a_master_and_a_clean_stop(open_server: Served) -> None:
    master = psutil.Process(open_server.process.pid)
    workers = master.children()
    assert len(workers) == 1  # Spark and the figures live in that one worker
    assert requests.post(f"{open_server.base}/refresh", timeout=60).ok
    open_server.process.send_signal(signal.SIGTERM)
    assert open_server.process.wait(timeout=30) == 0
    assert not workers[0].is_running()
    output = open_server.output()
    assert "Booting worker" in output and "statistics computed" in output
    assert "Traceback" not in output
