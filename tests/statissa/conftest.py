"""Shared fixtures: one local Spark session for the whole run, the scan that computes the
figures, a fresh data directory, and a client of everything statissa serves on its port.

Every test that computes figures runs twice: with the real Spark job (the slow tier: a JVM
starts), and with the same scan as a plain loop in this process (``scan_locally``, which
test_figures checks gives Spark's figures exactly).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from werkzeug.test import Client

from tests.statissa.datadir import NOW, Clock, build_data_dir
from zoscii_statissa.compute import Scanner, compute_snapshot
from zoscii_statissa.scan import scan_locally
from zoscii_statissa.settings import Settings
from zoscii_statissa.snapshots import SnapshotKeeper
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


@pytest.fixture(scope="module", params=["local", pytest.param("spark", marks=pytest.mark.slow)])
def scan(request: pytest.FixtureRequest) -> Scanner:
    """The scanner of the data directory: Spark's, or the same one in this process."""
    if request.param == "spark":
        return partial(spark_scan, request.getfixturevalue("spark"))
    return scan_locally


@pytest.fixture
def data_root(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    build_data_dir(root)
    return root


@pytest.fixture
def keeper(scan: Scanner, data_root: Path) -> SnapshotKeeper:
    compute = partial(compute_snapshot, scan, DataDir(data_root))
    return SnapshotKeeper(compute, Clock(NOW))


@pytest.fixture
def client(keeper: SnapshotKeeper, data_root: Path) -> Client:
    """The port's WSGI app (the ops endpoints and statissa's own), without a server."""
    return Client(create_app(keeper, DataDir(data_root)))
