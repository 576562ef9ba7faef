"""Fixtures of the replicator tests: a real api as the partner's server, jobs, replicators."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.api_server import running_api


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The partner's server: a real api under gunicorn (base URL, data dir)."""
    data_dir = tmp_path_factory.mktemp("source")
    with running_api(data_dir) as url:
        yield url, data_dir


