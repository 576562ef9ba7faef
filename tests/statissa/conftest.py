"""Shared fixtures: one local Spark session for the whole run, and a fresh data directory."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from tests.statissa.datadir import NOW, Clock, build_data_dir
from zoscii_statissa.compute import compute_snapshot
from zoscii_statissa.service import StatsService
from zoscii_statissa.settings import Settings
from zoscii_statissa.spark import build_session, spark_scan
from zoscii_statissa.web import create_app
from zosciimq.core import DataDir


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    settings = Settings(
        spark_master="local[2]",
        spark_driver_memory="512m",
        spark_local_dir=tmp_path_factory.mktemp("spark"),
    )
    session = build_session(settings, shuffle_partitions=2)
    yield session
    session.stop()


@pytest.fixture
def data_root(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    build_data_dir(root)
    return root


@pytest.fixture
def service(spark: object, data_root: Path) -> StatsService:
    compute = partial(compute_snapshot, partial(spark_scan, spark), DataDir(data_root))
    return StatsService(compute, Clock(NOW))


@pytest.fixture
def client(service: StatsService, data_root: Path) -> FlaskClient:
    return create_app(service, DataDir(data_root)).test_client()
