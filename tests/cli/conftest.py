"""The CLI against a real api on loopback, in-process (``main([...])``) and as a process."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.api_server import running_api
from zosciimq.cli import main


@dataclass(frozen=True)
class Run:
    code: int
    out: bytes
    err: str


@pytest.fixture(scope="package")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A real api under gunicorn: (base URL, data dir), one for the package's modules
    (a test uses queues of its own: ``queue_name()`` or a name no other module uses)."""
    data_dir = tmp_path_factory.mktemp("api-data")
    with running_api(data_dir) as url:
        yield url, data_dir


@pytest.fixture
def url(api: tuple[str, Path]) -> str:
    return api[0]


@pytest.fixture
def cli(
    capsysbinary: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Run]:
    """``cli(*argv, stdin=b"")``: run main() in this process, capture what it printed."""
    monkeypatch.delenv("ZOSCII_URL", raising=False)
    monkeypatch.delenv("ZOSCII_TOKEN", raising=False)

    def run(*argv: str, stdin: bytes = b"") -> Run:
        capsysbinary.readouterr()
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
        code = main(list(argv))
        captured = capsysbinary.readouterr()
        return Run(code, captured.out, captured.err.decode())

    return run


def cli_env(**extra: str) -> dict[str, str]:
    """The environment of a ``python -m zosciimq.cli`` child: no ZOSCII_ settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZOSCII_")}
    env.update(extra)
    return env


def run_process(
    *argv: str | bytes, stdin: bytes = b"", env: dict[str, str] | None = None, timeout: float = 60
) -> Run:
    done = subprocess.run(
        [sys.executable, "-m", "zosciimq.cli", *argv],
        input=stdin,
        capture_output=True,
        env=env or cli_env(),
        timeout=timeout,
        cwd="/",
    )
    return Run(done.returncode, done.stdout, done.stderr.decode(errors="replace"))
