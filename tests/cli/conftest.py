"""The CLI against a real api on loopback, in-process (``main([...])``) and as a process."""

from __future__ import annotations

import io
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.api_server import running_api
from tests.support.cli_run import Run
from zosciimq.cli import main


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


