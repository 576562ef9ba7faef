"""A data directory on real disk, a controllable clock, and message files written by name."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.support.clock import FakeClock
from tests.support.message_files import (
    utc,
)
from zoscii_claireup.cleaner import Cleaner
from zosciimq.core import DataDir


@pytest.fixture
def data_dir(tmp_path: Path) -> DataDir:
    data = DataDir(tmp_path / "data")
    data.ensure()
    return data


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(utc(2025, 6, 15, 12, 0, 0))


@pytest.fixture
def make_cleaner(data_dir: DataDir, clock: FakeClock):
    def make(**overrides: object) -> Cleaner:
        options: dict = {
            "nonce_window_seconds": 300,
            "temp_max_age_seconds": 86_400,
            "clock": clock,
            "stop": threading.Event(),
        }
        options.update(overrides)
        return Cleaner(data_dir, **options)

    return make
