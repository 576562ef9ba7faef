"""Real gateway processes (``python -m zoscii_phpmq``) on temporary data directories.

Ports are chosen by the system (``ZOSCII_PHPMQ_PORT=0``) and read from the gateway's log;
the log is kept, so tests can check the reasons it gives for closing a connection.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.phpmq_gateway import GatewayProcess


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """One gateway for a module's tests (each test uses queues of its own)."""
    process = GatewayProcess(
        tmp_path_factory.mktemp("phpmq-data"),
        ZOSCII_PHPMQ_LEASE_SECONDS="3",
        ZOSCII_PHPMQ_MAX_MESSAGE_BYTES=str(4 << 20),
        ZOSCII_DEFAULT_RETENTION_DAYS="7",
    ).start()
    try:
        yield process
    finally:
        process.terminate()
        process.kill()
