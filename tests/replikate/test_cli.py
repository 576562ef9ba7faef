"""The process's edges, shared by every service: --version, a bad setting (exit 2, one
line), JSON logs, the ops port (/healthz, /metrics, 405) and a stop by SIGTERM."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from urllib.error import HTTPError

import pytest

import zosciimq
from tests.support.replikate_jobs import replikate_env
from zoscii_replikate import __main__ as cli

DOWN_JOB = '[jobs.down]\nsource_url = "http://127.0.0.1:9/"\nsource_queue = "q"\n'


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No ZOSCII_* variable of the machine running the tests; a valid jobs file."""
    for name in list(os.environ):
        if name.startswith("ZOSCII_"):
            monkeypatch.delenv(name)
    config = tmp_path / "replikate.toml"
    config.write_text(DOWN_JOB)
    monkeypatch.setenv("ZOSCII_REPLIKATE_CONFIG", str(config))
    monkeypatch.setenv("ZOSCII_DATA_DIR", str(tmp_path / "data"))
    return monkeypatch


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"zoscii-replikate {cli.version()}\n"
    assert cli.version() == zosciimq.__version__  # pyproject.toml and the package agree


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("ZOSCII_LOG_FORMAT", "xml"),
        ("ZOSCII_LOG_LEVEL", "loud"),
        ("ZOSCII_REPLIKATE_LOG_LEVEL", "loud"),
        ("ZOSCII_REPLIKATE_METRICS_PORT", "70000"),
        ("ZOSCII_REPLIKATE_READ_TIMEOUT", "soon"),
        ("ZOSCII_REPLIKATE_VERIFY_TLS", "maybe"),
        ("ZOSCII_DEFAULT_RETENTION_DAYS", "10000"),
    ],
)
def test_a_bad_setting_exits_2_with_one_line_naming_it(
    clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], variable: str, value: str
) -> None:
    clean_env.setenv(variable, value)
    with pytest.raises(SystemExit) as exited:
        cli.main(["--once"])
    assert exited.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    (line,) = err.splitlines()
    assert line.startswith("configuration error: ")
    assert variable in line


def test_a_bad_job_exits_2_naming_the_file_the_job_and_the_key(
    clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "replikate.toml"
    config.write_text(DOWN_JOB + "retries = true\n")
    with pytest.raises(SystemExit) as exited:
        cli.main(["check"])
    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        f"configuration error: {config}: [jobs.down]: retries must be a whole number, not True\n"
    )


def test_json_logs_one_object_per_line(tmp_path: Path) -> None:
    config = tmp_path / "replikate.toml"
    config.write_text(DOWN_JOB + "retries = 0\n")
    result = subprocess.run(
        [sys.executable, "-m", "zoscii_replikate", "--once"],
        env={**replikate_env(tmp_path / "data", config), "ZOSCII_LOG_FORMAT": "json"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    lines = [json.loads(line) for line in result.stderr.splitlines()]
    assert lines
    for line in lines:
        assert {"time", "level", "service", "message"} <= set(line)
        assert line["service"] == "replikate"
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line["time"])
    (failed,) = [line for line in lines if "[unreachable]" in line["message"]]
    assert failed["level"] == "WARNING"


class RunningService:
    """``python -m zoscii_replikate`` in a child process, its stderr collected as it comes."""

    def __init__(self, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "zoscii_replikate"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)

    def wait_for(self, pattern: str, timeout: float = 30) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if found := re.search(pattern, line):
                    return found
            assert self.process.poll() is None, "".join(self.lines)
            time.sleep(0.05)
        raise AssertionError(f"no {pattern!r} in:\n{''.join(self.lines)}")

    def stop(self, signal_number: int) -> int:
        self.process.send_signal(signal_number)
        code = self.process.wait(timeout=30)
        self._reader.join(timeout=5)
        return code


def test_ops_port_and_sigterm(tmp_path: Path) -> None:
    config = tmp_path / "replikate.toml"
    config.write_text(DOWN_JOB + "interval_seconds = 3600\nretries = 0\n")
    env = {
        **replikate_env(tmp_path / "data", config),
        "ZOSCII_REPLIKATE_METRICS_HOST": "127.0.0.1",
        "ZOSCII_REPLIKATE_METRICS_PORT": "0",
    }
    service = RunningService(env)
    try:
        port = int(service.wait_for(r"on port (\d+)").group(1))
        service.wait_for(r"job down: run failed")  # the first run is at once
        base = f"http://127.0.0.1:{port}"

        with urllib.request.urlopen(f"{base}/healthz", timeout=10) as reply:
            assert reply.headers["Content-Type"] == "application/json"
            health = json.loads(reply.read())
        assert health["status"] == "ok"  # a partner being down is not our health
        assert health["jobs"]["down"]["last_outcome"] == "error"
        assert health["jobs"]["down"]["failures"] == 1

        with pytest.raises(HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(f"{base}/healthz", data=b"x"))
        assert refused.value.code == 405
        assert refused.value.headers["Allow"] == "GET, HEAD"

        with urllib.request.urlopen(f"{base}/metrics", timeout=10) as reply:
            metrics = reply.read().decode()
        assert 'zoscii_replikate_runs_total{outcome="error",replication="down"} 1.0' in metrics
        assert not any('"POST /healthz' in line for line in service.lines)  # quiet at INFO
    finally:
        code = service.stop(signal.SIGTERM)
    assert code == 0
    log = "".join(service.lines)
    assert "received SIGTERM" in log
    assert "stopping: letting running jobs finish their current batch" in log
