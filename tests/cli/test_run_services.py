"""run: the services' one-shot jobs, when the service package is importable."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.api_server import REPO
from tests.support.cli_run import Run, cli_env, run_process
from tests.support.queues import publish_body
from zosciimq.core import DataDir, QueueStore


def data_dir_with(tmp_path: Path, retentions: list[int]) -> tuple[Path, list[Path]]:
    """A data directory with one message per retention, written through the core."""
    layout = DataDir(tmp_path / "data")
    layout.ensure()
    queues = QueueStore(layout)
    paths = []
    for days in retentions:
        name = publish_body(queues, "jobs", b"payload", days).name
        paths.append(layout.root / "queues" / "jobs" / name)
    return layout.root, paths


def test_run_claireup_dry_run_then_for_real(cli: Callable[..., Run], tmp_path: Path) -> None:
    root, (expired, kept) = data_dir_with(tmp_path, [0, 30])
    dry = cli("run", "claireup", "--dry-run", "--data-dir", str(root))
    assert dry.code == 0
    assert dry.out.decode() == f"7\t{expired}\n"  # what would go: the 0-day message only
    assert expired.exists()
    real = cli("run", "claireup", "--", "--data-dir", str(root))
    assert (real.code, real.out) == (0, b"")
    assert not expired.exists() and kept.exists()


def test_run_passes_the_service_exit_code_through(
    cli: Callable[..., Run], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("ZOSCII_REPLIKATE_CONFIG", raising=False)
    monkeypatch.setenv("ZOSCII_DATA_DIR", str(tmp_path))
    assert cli("run", "replikate").code == 2  # its "no jobs configured" configuration error
    assert cli("run", "claireup", "--no-such-flag").code == 2  # its usage error


def test_run_of_a_service_that_is_not_installed_explains(
    cli: Callable[..., Run], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The services are installed in the test venv: here they are hidden from the CLI."""
    import importlib.util

    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, *args: object):
        return None if name.startswith("zoscii_") else real_find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    result = cli("run", "claireup", "--dry-run")
    assert result.code == 1
    assert "zoscii_claireup" in result.err and "pip install ./services/claireup" in result.err
    as_json = cli("--json", "run", "statissa")
    assert json.loads(as_json.out)["reason"] == "not_installed"


def test_run_finds_a_service_on_pythonpath_as_a_process(tmp_path: Path) -> None:
    root, (expired,) = data_dir_with(tmp_path, [0])
    env = cli_env(PYTHONPATH=f"{REPO / 'src'}:{REPO / 'services' / 'claireup'}")
    result = run_process("run", "claireup", "--dry-run", "--data-dir", str(root), env=env)
    assert result.code == 0, result.err
    assert result.out.decode() == f"7\t{expired}\n"


@pytest.mark.slow
def test_run_statissa_prints_its_statistics(cli: Callable[..., Run], tmp_path: Path) -> None:
    root, _ = data_dir_with(tmp_path, [5, 5])
    result = cli("run", "statissa", "--data-dir", str(root))
    assert result.code == 0
    stats = json.loads(result.out)
    assert stats["totals"] == {"messages": 2, "bytes": 14}
