"""Fixtures of the reliability and security tests: small volumes, real servers, a tally.

Volumes are real mounts (tmpfs, or ext4 on a loop device), so they need root, as in CI;
without the right the tests that need them are skipped, never faked.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.api_server import ApiServer
from tests.support.volumes import Mount, run


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


