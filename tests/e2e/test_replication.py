"""Two stacks on two volumes: stack B's replikate pulls queues from stack A's api over a
shared network (A's api is reachable as ``source-api``), and B's api serves the copies.

B's replikate runs two jobs, configured both ways a deployment can: the single job of the
``ZOSCII_REPLIKATE_SOURCE_*`` variables (orders -> orders_in, every 2 s) and a jobs file
on the data volume named by ``ZOSCII_REPLIKATE_CONFIG`` (bulk -> bulk_in, 10 messages a
run, one second apart, so that a restart lands in the middle of the replication).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import requests

from tests.e2e import mq
from tests.e2e.stack import Service, Stack, network, wait_healthy
from tests.support.e2e_run import E2E

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

SOURCE_URL = "http://source-api:8080/index.php"
JOBS_FILE = "/data/replikate.toml"
JOBS_TOML = f"""\
[defaults]
backoff_initial_seconds = 1.0   # the source queues appear only once the tests publish
backoff_max_seconds = 2.0

[jobs.bulk]
source_url = "{SOURCE_URL}"
source_queue = "bulk"
target_queue = "bulk_in"
interval_seconds = 1
max_messages_per_run = 10
"""
CATCH_UP_TIMEOUT = 120


@dataclass
class Pair:
    a: Stack
    b: Stack

    @property
    def replikate(self) -> Service:
        return self.b["replikate"]


def write_file(service: Service, path: str, text: str) -> None:
    """Write a file onto a stack's volume from inside one of its containers (as the
    image's user, as an operator with ``docker exec`` would)."""
    script = "import sys; open(sys.argv[1], 'w').write(sys.argv[2])"
    code, output = service.exec(["python", "-c", script, path, text])
    assert code == 0, output


def read_pointer(service: Service, source_queue: str, target_queue: str) -> str:
    """A replikate job's pointer (its state file), "" while it has copied nothing."""
    path = f"/data/states/replikate_state_{source_queue}_{target_queue}.txt"
    code, output = service.exec(["cat", path])
    return output.decode().strip() if code == 0 else ""


def count_messages(service: Service, queue: str) -> int:
    """``*.bin`` files in a queue directory, as written (a duplicate counts too)."""
    script = (
        "import os, sys; d = sys.argv[1]; "
        "print(sum(n.endswith('.bin') for n in os.listdir(d)) if os.path.isdir(d) else 0)"
    )
    code, output = service.exec(["python", "-c", script, f"/data/queues/{queue}"])
    assert code == 0, output
    return int(output)


@pytest.fixture(scope="module")
def pair(e2e: E2E) -> Iterator[Pair]:
    with network(e2e.client, e2e.run_id, "replication") as net:
        a = Stack(e2e.client, e2e.services, e2e.run_id, "a", net)
        b = Stack(e2e.client, e2e.services, e2e.run_id, "b", net)
        try:
            a.start("api", aliases=["source-api"])
            b.start("api")
            wait_healthy([a["api"].container, b["api"].container], timeout=120)
            write_file(b["api"], JOBS_FILE, JOBS_TOML)
            b.start(
                "replikate",
                {
                    "ZOSCII_REPLIKATE_CONFIG": JOBS_FILE,
                    "ZOSCII_REPLIKATE_SOURCE_URL": SOURCE_URL,
                    "ZOSCII_REPLIKATE_SOURCE_QUEUE": "orders",
                    "ZOSCII_REPLIKATE_TARGET_QUEUE": "orders_in",
                    "ZOSCII_REPLIKATE_INTERVAL_SECONDS": "2",
                },
            )
            b["replikate"].wait_healthy(timeout=120)
            yield Pair(a, b)
        finally:
            b.close()
            a.close()


@pytest.fixture(scope="module")
def http() -> Iterator[requests.Session]:
    with requests.Session() as session:
        yield session


def wait_caught_up(pair: Pair, http: requests.Session, source: str, target: str) -> None:
    """Until the job's pointer names the source queue's last message: from then on the
    job writes nothing more (until the source gets new messages)."""
    last = mq.drain(http, pair.a["api"].url(), source)[-1][0]
    try:
        mq.wait_for(
            lambda: read_pointer(pair.replikate, source, target) == last,
            CATCH_UP_TIMEOUT,
            f"replikate to copy {source} up to {last}",
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- replikate log:\n{pair.replikate.logs(60)}") from None


def assert_same_queue(
    pair: Pair, http: requests.Session, source: str, target: str, sent: list[bytes]
) -> None:
    """B's copy holds the source's messages, byte-exact, in order, each once, with the
    source's retention digits."""
    on_a = mq.drain(http, pair.a["api"].url(), source)
    on_b = mq.drain(http, pair.b["api"].url(), target)
    assert mq.bodies(on_a) == sent
    assert len(on_b) == len(on_a), f"{len(on_a)} messages on A, {len(on_b)} on B"
    for index, ((a_name, a_body), (b_name, b_body)) in enumerate(zip(on_a, on_b, strict=True)):
        assert b_body == a_body, f"message {index} ({a_name}) differs on B ({b_name})"
        assert b_name[19:23] == a_name[19:23], f"retention of {a_name} became {b_name}"


def test_replikate_copies_a_queue_from_the_other_stack_including_later_messages(
    pair: Pair, http: requests.Session
) -> None:
    source = pair.a["api"].url()
    methods = list(mq.PUBLISHERS.values())
    first = [mq.ALL_BYTES, b"\xff\xfe\x00 not utf-8 \x80", *(mq.payload("o", n) for n in range(8))]
    for number, body in enumerate(first):
        methods[number % len(methods)](http, source, "orders", body, 7 + number)

    wait_caught_up(pair, http, "orders", "orders_in")
    assert_same_queue(pair, http, "orders", "orders_in", first)

    # Published after replication started (and caught up): the next runs carry them.
    later = [mq.payload("later", n, size=50_000) for n in range(10)]
    for body in later:
        mq.publish_raw(http, source, "orders", body, 30)
    wait_caught_up(pair, http, "orders", "orders_in")
    assert_same_queue(pair, http, "orders", "orders_in", first + later)


def wait_while_copying(service: Service, queue: str, at_least: int, timeout: float) -> int:
    """Until the copy has ``at_least`` messages and grew since the previous look, that is,
    a run is (most likely still) copying; returns the count then."""
    previous = count_messages(service, queue)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        count = count_messages(service, queue)
        if count >= at_least and count > previous:
            return count
        previous = count
    raise AssertionError(f"{queue}: no progress past {at_least} within {timeout:.0f} s")


def test_restarting_and_killing_replikate_mid_replication_loses_and_repeats_nothing(
    pair: Pair, http: requests.Session
) -> None:
    total = 100
    sent = [mq.payload("bulk", n, size=4096) for n in range(total)]
    source = pair.a["api"].url()
    # A backlog: published while replikate is stopped, so it cannot keep up with the
    # publisher and be done before it is interrupted, however slow publishing is.
    pair.replikate.container.stop()
    for body in sent:
        mq.publish_raw(http, source, "bulk", body, 30)
    pair.replikate.container.start()
    pair.replikate.wait_healthy(timeout=60)
    b_api = pair.b["api"]

    wait_while_copying(b_api, "bulk_in", 20, timeout=60)
    pair.replikate.restart()  # docker restart: SIGTERM, then start
    at_restart = count_messages(b_api, "bulk_in")
    pair.replikate.wait_healthy(timeout=60)

    wait_while_copying(b_api, "bulk_in", at_restart + 10, timeout=60)
    pair.replikate.kill_and_start()  # docker kill -s KILL, docker start
    at_kill = count_messages(b_api, "bulk_in")
    pair.replikate.wait_healthy(timeout=60)

    assert at_restart < total and at_kill < total, (
        f"replication had finished before the restart ({at_restart}) or the kill "
        f"({at_kill}) of {total}: the test did not interrupt it"
    )
    wait_caught_up(pair, http, "bulk", "bulk_in")
    assert_same_queue(pair, http, "bulk", "bulk_in", sent)
