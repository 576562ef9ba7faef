"""Real gateway processes (``python -m zoscii_zmq``) on temporary data directories.

Each gateway gets a broker name of its own (``ipc://@/zpipes/<name>``, a Linux abstract
socket: it vanishes with the process, so a restart binds it again) and TCP endpoints on
ports the system picks, read from its log; the log is kept for the tests' checks.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import zmq

from tests.support.zmq_gateway import (
    Gateway,
)


@pytest.fixture(scope="module")
def context() -> Iterator[zmq.Context]:
    ctx = zmq.Context()
    yield ctx
    ctx.destroy(linger=0)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """One gateway for a module's tests (each test uses pipes and queues of its own)."""
    process = Gateway(
        tmp_path_factory.mktemp("zmq-data"),
        ZOSCII_ZPIPES_IDLE_SECONDS="3",
        ZOSCII_ZMQ_MAX_CHUNK_BYTES=str(1 << 20),
    ).start()
    try:
        yield process
    finally:
        process.terminate()
        process.kill()


