from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.api_server import running_api
from zosciimq.client import ZosciiClient


@pytest.fixture(scope="package")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A real api under gunicorn: (base URL, data dir), one for the package's modules
    (a test uses queues of its own: ``queue_name()`` or a name no other module uses)."""
    data_dir = tmp_path_factory.mktemp("api-data")
    with running_api(data_dir) as url:
        yield url, data_dir


@pytest.fixture
def client(api: tuple[str, Path]) -> Iterator[ZosciiClient]:
    with ZosciiClient(api[0]) as c:
        yield c


@pytest.fixture
def original(api: tuple[str, Path]) -> Iterator[ZosciiClient]:
    """The same server, spoken to only as the original's clients do (urlencoded POST)."""
    with ZosciiClient(api[0], mode="original") as c:
        yield c
