"""Fixtures of the reliability and security tests: small volumes, real servers, a tally.

Volumes are real mounts (tmpfs, or ext4 on a loop device), so they need root, as in CI;
without the right the tests that need them are skipped, never faked.
"""

from __future__ import annotations

import gc
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.api_server import ApiServer


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, check=False)


class Mount:
    """A file system mounted for one test, unmounted (lazily if still busy) afterwards."""

    def __init__(self, point: Path) -> None:
        self.point = point

    def remount(self, options: str, *, busy_for: float = 0.0) -> None:
        """Remount; with ``busy_for``, keep trying that long while files are open for
        writing (a running api closes a queue's files once it is idle)."""
        deadline = time.monotonic() + busy_for
        while True:
            done = run("mount", "-o", f"remount,{options}", str(self.point))
            if done.returncode == 0 or "busy" not in done.stderr:
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert done.returncode == 0, done.stderr

    def unmount(self) -> None:
        gc.collect()  # files an app under test may have left open
        if run("umount", str(self.point)).returncode != 0:
            run("umount", "--lazy", str(self.point))


@pytest.fixture
def mount(tmp_path: Path) -> Iterator[Callable[..., Mount]]:
    """``mount(fstype, options, source="none")``: a fresh mount under tmp_path."""
    if shutil.which("mount") is None:
        pytest.skip("no mount(8) here")
    mounted: list[Mount] = []

    def make(fstype: str, options: str, source: str = "none", name: str = "") -> Mount:
        point = tmp_path / (name or f"volume{len(mounted)}")
        point.mkdir()
        done = run("mount", "-t", fstype, "-o", options, source, str(point))
        if done.returncode != 0:
            pytest.skip(f"cannot mount {fstype}: {done.stderr.strip()}")
        mounted.append(Mount(point))
        return mounted[-1]

    yield make
    for volume in reversed(mounted):
        volume.unmount()


@pytest.fixture
def servers() -> Iterator[Callable[..., ApiServer]]:
    """Start ApiServers (``servers(data_dir, **kwargs)``); all are stopped afterwards."""
    started: list[ApiServer] = []

    def start(data_dir: Path, **kwargs: object) -> ApiServer:
        server = ApiServer(data_dir, **kwargs)  # type: ignore[arg-type]
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.stop()


def tree(root: Path) -> dict[str, int]:
    """Every path under ``root`` with its size (directories -1): a snapshot to compare."""
    found = {}
    for path in sorted(root.rglob("*")):
        relative = str(path.relative_to(root))
        found[relative] = -1 if path.is_dir() else path.stat().st_size
    return found
