"""``python -m zoscii_statissa`` as it runs in its container: served, and ``--once``.

Each test starts its own process (its own JVM), so these are the slow ones.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.statissa.served import free_port, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        ZOSCII_SPARK_MASTER="local[2]",
        ZOSCII_SPARK_DRIVER_MEMORY="512m",
        ZOSCII_SPARK_LOCAL_DIR=str(tmp_path / "spark"),
        **extra,
    )
    return env


def test_once_prints_the_json(tmp_path: Path, data_root: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "zoscii_statissa", "--once", "--data-dir", str(data_root)],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    assert body["totals"] == {"messages": 10, "bytes": 485}
    assert [q["name"] for q in body["queues"]] == ["empty-q", "logs_2", "orders"]
    assert body["store"]["unidentified"] == 1
    ours = "INFO statissa zoscii_statissa"  # the service's own lines: Spark is quiet
    assert "INFO" not in result.stderr.replace(ours, "")


def test_once_fails_cleanly_without_a_data_dir(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "zoscii_statissa", "--once", "--data-dir", str(tmp_path / "no")],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert result.returncode == 1
    assert "does not exist" in result.stderr and result.stdout == ""


def test_served_process(tmp_path: Path, data_root: Path) -> None:
    port = free_port()
    env = _env(
        tmp_path,
        ZOSCII_STATISSA_PORT=str(port),
        ZOSCII_STATISSA_HOST="127.0.0.1",
        ZOSCII_STATISSA_INTERVAL_SECONDS="3600",
        ZOSCII_DATA_DIR=str(data_root),
    )
    log = (tmp_path / "statissa.log").open("w+")
    process = subprocess.Popen(
        [sys.executable, "-m", "zoscii_statissa"], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    base = f"http://127.0.0.1:{port}"
    try:
        with requests.Session() as http:
            wait_until(
                lambda: http.get(f"{base}/healthz", timeout=5).status_code == 200, 60, pause=0.5
            )
            # The server answers while Spark starts; the first run is scheduled at once.
            wait_until(
                lambda: http.get(f"{base}/stats.json", timeout=5).status_code == 200, 240, pause=0.5
            )
            stats = http.get(f"{base}/stats.json", timeout=5).json()
            assert stats["totals"] == {"messages": 10, "bytes": 485}
            metrics = http.get(f"{base}/metrics", timeout=5).text
            values = {
                (s.name, tuple(s.labels.values())): s.value
                for family in text_string_to_metric_families(metrics)
                for s in family.samples
            }
            assert values[("zoscii_queue_messages", ("orders",))] == 6
            assert values[("zoscii_statissa_last_run_success", ())] == 1
            assert values[("process_resident_memory_bytes", ())] > 0
            refreshed = http.post(f"{base}/refresh", timeout=120)
            assert refreshed.status_code == 200
            assert refreshed.json()["last_run"]["runs_total"] == 2
            page = http.get(f"{base}/", timeout=5)
            assert "ZOSCII MQ statistics" in page.text and "orders" in page.text

            # Spark's JVM dies: that run fails, the figures stay, the next run starts a new JVM.
            for jvm in _jvms(process.pid):
                jvm.kill()
            failed = http.post(f"{base}/refresh", timeout=120)
            assert failed.status_code == 500
            kept = http.get(f"{base}/stats.json", timeout=5).json()
            assert kept["totals"]["messages"] == 10 and not kept["last_run"]["last_run_success"]
            recovered = http.post(f"{base}/refresh", timeout=240)
            assert recovered.status_code == 200, recovered.text
            assert recovered.json()["last_run"]["runs_failed_total"] == 1
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        log.seek(0)
        output = log.read()
        log.close()
    assert "statistics computed" in output
    assert "Starting gunicorn" in output and "Booting worker" in output  # not a dev server
    assert "the Spark context has stopped; a new one starts on the next run" in output


def _jvms(pid: int) -> list[psutil.Process]:
    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if child.name() == "java":
                found.append(child)
        except psutil.Error:
            continue  # gone, or a zombie
    assert found, "no Spark JVM below the statissa process"
    return found
