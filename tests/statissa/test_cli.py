"""The command line every service shares: --version, exit 2 on a bad setting, JSON logs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from zoscii_statissa.__main__ import main


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["--version"])
    assert stopped.value.code == 0
    assert re.fullmatch(r"zoscii-statissa \S+\n", capsys.readouterr().out)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ZOSCII_STATISSA_PORT", "http"),
        ("ZOSCII_SPARK_CONF", "executor.memory=4g"),
        ("ZOSCII_LOG_LEVEL", "loud"),
        ("ZOSCII_LOG_FORMAT", "xml"),
    ],
)
def test_a_bad_setting_exits_2_before_anything_starts(
    name: str, value: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as stopped:
        main(["--once"])
    assert stopped.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("configuration error: ") and name in captured.err
    assert len(captured.err.splitlines()) == 1


def test_json_log_lines(tmp_path: Path) -> None:
    """A run that fails before Spark starts: quick, and it logs an exception too."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("ZOSCII_")}
    env.update(
        ZOSCII_LOG_FORMAT="json",
        ZOSCII_SPARK_LOCAL_DIR=str(tmp_path / "spark"),
    )
    result = subprocess.run(
        [sys.executable, "-m", "zoscii_statissa", "--once", "--data-dir", str(tmp_path / "no")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1 and result.stdout == ""
    lines = [json.loads(line) for line in result.stderr.splitlines()]
    assert lines and all(line["service"] == "statissa" for line in lines)
    failed = next(line for line in lines if line["message"] == "statistics run failed")
    assert failed["level"] == "ERROR" and "does not exist" in failed["exception"]
