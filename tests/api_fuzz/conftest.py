"""Fixtures of the api fuzz tests."""

from __future__ import annotations

import gc
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def _small_tmpfs(tmp_path: Path, options: str) -> Iterator[Path]:
    """A tmpfs mounted with ``options`` (needs mount rights: root, as in CI)."""
    mount_point = tmp_path / "volume"
    mount_point.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount(8) here")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs: {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        gc.collect()  # close files an app under test may have left open
        busy = subprocess.run(["umount", str(mount_point)], capture_output=True, check=False)
        if busy.returncode != 0:  # a leaked descriptor (a bug under test): detach it anyway
            subprocess.run(["umount", "--lazy", str(mount_point)], check=True)


@pytest.fixture
def full_volume(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs as the data volume."""
    yield from _small_tmpfs(tmp_path, "size=256k")


@pytest.fixture
def few_inodes(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs with room for bytes but only 60 files and directories."""
    yield from _small_tmpfs(tmp_path, "size=8m,nr_inodes=60")
