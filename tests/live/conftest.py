"""Real live-service processes (``python -m zoscii_live``) on temporary data directories.

The port is chosen by the system (``ZOSCII_LIVE_PORT=0``) and read from the service's
log. Messages are published through the core (``QueueStore``, what the api runs), from
this process: the service sees them as it sees the api's, through the index.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.live_process import LiveProcess, live_service


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveProcess]:
    """One service for a module's tests (each uses queues of its own)."""
    yield from live_service(tmp_path_factory)
