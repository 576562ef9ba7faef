"""Admission (issue 27, item 3): connections that never send anything cannot lock anyone
out. An attack run held all 256 slots of the gateway for 37 s and more with 1,000 idle
TCP connections, and a real publisher stored nothing.

A connection is pending until its first message (the 000 with the token, access control
on here) is read within ZOSCII_PHPMQ_FIRST_MESSAGE_SECONDS and handled; then it is
established. When the gateway or an address is full, a newcomer takes the oldest pending
connection's slot; only established connections can make it refuse. Clients here come
from several loopback addresses (127.0.0.0/8), as from several hosts.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator

import pytest

from tests.phpmq import wire
from tests.phpmq.test_access import CLIENTS, TOKEN
from tests.security.figures import TALLY
from tests.support.phpmq_gateway import GatewayProcess
from tests.support.queues import queue_name

MAX_CONNECTIONS = 24
PER_ADDRESS = 10
PENDING_PER_ADDRESS = 4
FIRST_MESSAGE_SECONDS = 1.5


@pytest.fixture
def gateway(tmp_path) -> Iterator[GatewayProcess]:
    process = GatewayProcess(
        tmp_path,
        ZOSCII_AUTH_CLIENTS=CLIENTS,
        ZOSCII_PHPMQ_MAX_CONNECTIONS=str(MAX_CONNECTIONS),
        ZOSCII_PHPMQ_MAX_CONNECTIONS_PER_ADDRESS=str(PER_ADDRESS),
        ZOSCII_PHPMQ_MAX_PENDING_PER_ADDRESS=str(PENDING_PER_ADDRESS),
        ZOSCII_PHPMQ_FIRST_MESSAGE_SECONDS=str(FIRST_MESSAGE_SECONDS),
    ).start()
    try:
        yield process
    finally:
        process.terminate()
        process.kill()


def idle(gateway: GatewayProcess, count: int, addresses: int, first: int = 2) -> list:
    """``count`` connections that send nothing, from ``addresses`` loopback addresses
    (127.0.0.<first>...); those the gateway refuses or closes at once are left out."""
    made = []
    for number in range(count):
        with contextlib.suppress(OSError):
            made.append(gateway.connect(source=f"127.0.0.{first + number % addresses}"))
    TALLY["phpmq admission: idle connections"] += count
    return made


def wait_for_consumers(gateway: GatewayProcess, count: int) -> None:
    deadline = time.monotonic() + 5
    while json.loads(gateway.get("/healthz")[1])["consumers"] != count:
        assert time.monotonic() < deadline, gateway.get("/healthz")
        time.sleep(0.02)


def close_all(clients: list) -> None:
    for client in clients:
        client.close()


def authenticated_publish(gateway: GatewayProcess, queue: str, content: bytes) -> None:
    with gateway.connect() as client:
        client.send(wire.authenticate(TOKEN))
        client.send(wire.send(queue, content))
        got = gateway.wait_for_messages(queue, 1)
    assert got == [content], gateway.log()[-2000:]


def test_idle_connections_never_lock_out_a_real_client(gateway: GatewayProcess) -> None:
    """Ten times the gateway's slots of idle connections from 20 addresses: an
    established consumer keeps its connection, and a publisher arriving after the flood
    gets a slot and publishes, which the consumer receives."""
    queue = queue_name("in_")
    with gateway.connect() as consumer:
        consumer.send(wire.authenticate("reader-token-0123456789abcdef"))
        consumer.send(wire.consume(queue, 1))
        wait_for_consumers(gateway, 1)
        flood = idle(gateway, 10 * MAX_CONNECTIONS, addresses=20)
        try:
            health = gateway.get("/healthz")[1]
            assert gateway.metric("zoscii_phpmq_open_connections") <= MAX_CONNECTIONS, health
            authenticated_publish(gateway, queue, b"got through")
            assert consumer.read().content == b"got through"
        finally:
            close_all(flood)
    assert gateway.metric("zoscii_phpmq_connections_total", result="evicted") > 0
    gateway.wait_for_log(r"closed: evicted, no first message yet")


def test_no_first_message_within_the_deadline_closes_the_connection(
    gateway: GatewayProcess,
) -> None:
    """Idle, or a first message begun and left (half a header, a token packet cut):
    closed once ZOSCII_PHPMQ_FIRST_MESSAGE_SECONDS is over, whatever arrived."""
    gateway.wait_idle()  # four is the address's share of pending connections: all ours
    with contextlib.ExitStack() as stack:  # the four at once: one deadline's wait
        started = time.monotonic()
        clients = []
        for data in (b"", b"H01", wire.authenticate(TOKEN)[:20], wire.authenticate(TOKEN)[:-3]):
            clients.append(client := stack.enter_context(gateway.connect()))
            if data:
                client.send(data)
        for client in clients:
            client.wait_closed(timeout=FIRST_MESSAGE_SECONDS + 3)
        assert time.monotonic() - started < FIRST_MESSAGE_SECONDS + 1.5
    gateway.wait_for_log(r"closed: idle \(no first message within 1.5 s")
    gateway.wait_for_log(r"closed: timeout \(")
    gateway.wait_idle()


def test_an_address_holds_at_most_its_share_of_pending_connections(
    gateway: GatewayProcess,
) -> None:
    """One address's idle connections: the newest few stay (ZOSCII_PHPMQ_MAX_PENDING_
    PER_ADDRESS), and a real client from the same address (NAT) still gets in."""
    flood = idle(gateway, 12, addresses=1, first=50)
    try:
        gateway.wait_pending(PENDING_PER_ADDRESS)
        with gateway.connect(source="127.0.0.50") as client:
            client.send(wire.authenticate(TOKEN))
            queue = queue_name("in_")
            client.send(wire.send(queue, b"same address"))
            assert gateway.wait_for_messages(queue, 1) == [b"same address"]
    finally:
        close_all(flood)


def test_established_connections_of_one_address_are_limited(gateway: GatewayProcess) -> None:
    """ZOSCII_PHPMQ_MAX_CONNECTIONS_PER_ADDRESS established from one address: the next
    from there is refused, one from another address is not."""
    mine = []
    try:
        for _ in range(PER_ADDRESS):
            client = gateway.connect(source="127.0.0.60")
            client.send(wire.authenticate(TOKEN))
            mine.append(client)
            gateway.wait_pending(0)  # established before the next arrives
        gateway.wait_connections(PER_ADDRESS)
        with gateway.connect(source="127.0.0.60") as extra:
            extra.wait_closed()
        gateway.wait_for_log(r"refused: 10 open from 127\.0\.0\.60")
        authenticated_publish(gateway, queue_name("in_"), b"another address")
        for client in mine:  # still open: established connections are never evicted
            client.expect_nothing(0.05)
    finally:
        close_all(mine)
