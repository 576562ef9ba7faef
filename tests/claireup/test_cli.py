"""``python -m zoscii_claireup`` as a container runs it: real processes, real signals."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support.message_files import (
    all_files,
    set_mtime,
    write_queue_message,
    write_store_message,
)
from zosciimq.core import DataDir


def claireup_env(data_dir: DataDir, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("ZOSCII_")}
    env.update(
        {
            "ZOSCII_DATA_DIR": str(data_dir.root),
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra)
    return env


def claireup(*args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "zoscii_claireup", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.mark.parametrize("zone", ["Pacific/Auckland", "America/Los_Angeles", "UTC"])
def test_the_container_time_zone_changes_nothing(data_dir, zone):
    """Names are UTC: a run that read local time would be off by up to 13 hours."""
    if not Path("/usr/share/zoneinfo", zone).exists():
        pytest.skip(f"no tzdata for {zone}")
    now = datetime.now(UTC)
    # expires in 2 hours (UTC): kept, although it is past due in Auckland's wall time
    due_soon = write_queue_message(data_dir, "q", now - timedelta(days=1, hours=-2), 1)
    # expired 2 hours ago (UTC): deleted, although not yet due in Los Angeles' wall time
    overdue = write_queue_message(data_dir, "q", now - timedelta(days=1, hours=2), 1)
    store_due_soon = write_store_message(data_dir, now - timedelta(hours=22), 1)
    store_overdue = write_store_message(data_dir, now - timedelta(hours=26), 1)
    fresh_nonce = data_dir.nonce_path("fresh")
    stale_nonce = data_dir.nonce_path("stale")
    fresh_nonce.write_bytes(b"")
    stale_nonce.write_bytes(b"")
    set_mtime(fresh_nonce, now - timedelta(minutes=50))
    set_mtime(stale_nonce, now - timedelta(minutes=70))

    result = claireup(
        "--once", env=claireup_env(data_dir, TZ=zone, ZOSCII_NONCE_WINDOW_SECONDS="3600")
    )

    assert result.returncode == 0, result.stderr
    assert due_soon.exists() and store_due_soon.exists() and fresh_nonce.exists()
    assert not overdue.exists() and not store_overdue.exists() and not stale_nonce.exists()
    assert "deleted 3 files" in result.stderr


def test_dry_run_prints_what_it_would_delete_and_deletes_nothing(data_dir):
    now = datetime.now(UTC)
    overdue = write_queue_message(data_dir, "q", now - timedelta(days=3), 1, b"12345")
    kept = write_queue_message(data_dir, "q", now, 1)
    before = all_files(data_dir.root)

    result = claireup("--once", "--dry-run", env=claireup_env(data_dir))

    assert result.returncode == 0, result.stderr
    assert all_files(data_dir.root) == before
    assert result.stdout.splitlines() == [f"5\t{overdue}"]
    assert str(kept) not in result.stdout
    assert "would delete 1 files" in result.stderr


def test_data_dir_flag_overrides_the_environment(data_dir, tmp_path):
    overdue = write_queue_message(data_dir, "q", datetime.now(UTC) - timedelta(days=3), 1)
    env = claireup_env(data_dir, ZOSCII_DATA_DIR=str(tmp_path / "elsewhere"))
    result = claireup("--once", "--data-dir", str(data_dir.root), env=env)
    assert result.returncode == 0, result.stderr
    assert not overdue.exists()


@pytest.mark.parametrize(
    ("args", "extra", "complaint"),
    [
        (["--schedule", "0 0 * *"], {}, "not a valid 5-field cron expression"),
        ([], {"ZOSCII_CLAIREUP_SCHEDULE": "61 * * * *"}, "ZOSCII_CLAIREUP_SCHEDULE"),
        ([], {"ZOSCII_CLAIREUP_TEMP_MAX_AGE_SECONDS": "soon"}, "TEMP_MAX_AGE_SECONDS"),
        ([], {"ZOSCII_NONCE_WINDOW_SECONDS": "0"}, "ZOSCII_NONCE_WINDOW_SECONDS"),
        (["--once"], {"ZOSCII_LOG_LEVEL": "loud"}, "ZOSCII_LOG_LEVEL"),
        (["--once"], {"ZOSCII_LOG_FORMAT": "xml"}, "ZOSCII_LOG_FORMAT"),
    ],
)
def test_bad_configuration_fails_at_start_naming_the_setting(data_dir, args, extra, complaint):
    overdue = write_queue_message(data_dir, "q", datetime.now(UTC) - timedelta(days=3), 1)
    result = claireup(*args, env=claireup_env(data_dir, **extra), timeout=30)
    assert result.returncode == 2  # as every service: a configuration error
    assert result.stderr.startswith("configuration error: ")
    assert len(result.stderr.splitlines()) == 1 and complaint in result.stderr
    assert overdue.exists()  # nothing was done


def test_version(capsys):
    from zoscii_claireup.__main__ import main

    with pytest.raises(SystemExit) as stopped:
        main(["--version"])
    assert stopped.value.code == 0
    assert re.fullmatch(r"zoscii-claireup \S+\n", capsys.readouterr().out)


def test_json_log_lines(data_dir):
    write_queue_message(data_dir, "q", datetime.now(UTC) - timedelta(days=3), 1)
    result = claireup("--once", env=claireup_env(data_dir, ZOSCII_LOG_FORMAT="json"))
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stderr.splitlines()]
    assert lines and all(line["service"] == "claireup" for line in lines)
    assert {"time", "level", "logger", "message"} <= set(lines[0])
    assert any("deleted 1 files" in line["message"] for line in lines)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_sigterm_ends_a_run_and_a_rerun_finishes_it(data_dir):
    now = datetime.now(UTC)
    kept = set()
    for queue in ("a", "b", "c"):
        for number in range(8_000):
            published = now - timedelta(days=2, seconds=number)
            write_queue_message(data_dir, queue, published, 1, b"")
        for _ in range(5):
            kept.add(write_queue_message(data_dir, queue, now, 1, b""))
    env = claireup_env(data_dir, ZOSCII_CLAIREUP_PROGRESS_EVERY_FILES="500")
    process = subprocess.Popen(
        [sys.executable, "-m", "zoscii_claireup", "--once"],
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    lines = []
    for line in process.stderr:
        lines.append(line)
        if "progress:" in line:
            process.send_signal(signal.SIGTERM)
            break
    _, rest = process.communicate(timeout=60)
    log = "".join(lines) + rest

    assert process.returncode == 143, log
    assert "interrupted" in log
    left = all_files(data_dir.queues)
    assert kept <= left
    assert len(left) > len(kept), "the run finished before SIGTERM arrived"

    rerun = claireup("--once", env=env, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    assert all_files(data_dir.queues) == kept


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(url: str) -> tuple[int, str]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError:
        return 0, ""


@pytest.mark.timeout(60)
def test_the_daemon_serves_health_and_metrics_and_stops_on_sigterm(data_dir):
    port = free_port()
    env = claireup_env(
        data_dir, ZOSCII_CLAIREUP_PORT=str(port), ZOSCII_CLAIREUP_HOST="127.0.0.1", TZ="Asia/Tokyo"
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "zoscii_claireup"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        status, body = 0, ""
        while time.monotonic() < deadline and status != 200:
            time.sleep(0.1)
            status, body = _get(f"http://127.0.0.1:{port}/healthz")
        assert status == 200, body
        status, metrics = _get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200
        assert 'zoscii_claireup_runs_total{outcome="success"} 0.0' in metrics
        assert _get(f"http://127.0.0.1:{port}/nothing")[0] == 404
    finally:
        process.send_signal(signal.SIGTERM)
        _, log = process.communicate(timeout=20)
    assert process.returncode == 0, log
    assert "scheduled with '0 0 * * *' (UTC)" in log
    next_run = log.split("next run at ")[1].split()[0]
    assert next_run.endswith("T00:00:00+00:00")  # midnight UTC, not midnight in Tokyo
