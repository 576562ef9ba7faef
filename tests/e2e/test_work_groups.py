"""Two api containers on one volume serve one consumer group: the group's state is its
log on the volume, under a lock both containers take, so it does not matter which
container a consumer asks, nor which one it acks on.

* consumers alternate between the containers, each batch acked on the other one than
  it was leased from: every message is acked exactly once;
* a lease that ran out on container A is fenced on both: its old receipt is refused with
  409 whichever container it is acked on, and the new delivery (from B) acks on A.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest
import requests

from tests.e2e import mq
from tests.e2e.compose_spec import PortSpec
from tests.e2e.stack import Service, Stack, network, wait_healthy
from tests.support.e2e_run import E2E
from tests.support.work_http import ack, ack_one, consume

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

GROUP = "workers"
BATCH_PUBLISH = 50
CONSUMERS = 4


@pytest.fixture(scope="module")
def apis(e2e: E2E) -> Iterator[tuple[Service, Service]]:
    """Containers "api" and "api-b": the compose service twice, on one volume.

    Their port is published on every interface, not only on the compose file's internal
    address (127.0.0.1 by default): the tests may run in a container of their own that
    reaches the engine's ports through its gateway."""
    api = e2e.services["api"]
    api = dataclasses.replace(api, ports=tuple(PortSpec(p.container_port, "") for p in api.ports))
    specs = {**e2e.services, "api": api, "api-b": dataclasses.replace(api, name="api-b")}
    with network(e2e.client, e2e.run_id, "work") as net:
        stack = Stack(e2e.client, specs, e2e.run_id, "work", net)
        try:
            a, b = stack.start("api"), stack.start("api-b")
            wait_healthy([a.container, b.container], timeout=180)
            yield a, b
        finally:
            stack.close()


def publish_batch(http: requests.Session, base: str, queue: str, bodies: list[bytes]) -> list[str]:
    """``batch=1``: the messages as one multipart request; their names."""
    files = [("msg", (f"m{i}", body, "application/octet-stream")) for i, body in enumerate(bodies)]
    reply = http.post(
        f"{base}/", params={"action": "publish", "q": queue, "batch": "1"}, files=files, timeout=60
    )
    document = mq.envelope(reply)
    assert reply.status_code == 200 and document["error"] == "", document
    assert len(document["result"]) == len(bodies), document
    return document["result"]


def group_stats(api: Service, queue: str) -> dict[str, object]:
    """The group's stats as the core reads them from the volume, inside a container."""
    code = (
        "import dataclasses, json, sys\n"
        "from zosciimq.core import DataDir, QueueStore\n"
        "from zosciimq.core.groups import ConsumerGroups\n"
        "layout = DataDir(sys.argv[1])\n"
        "stats = ConsumerGroups(layout, QueueStore(layout)).stats(sys.argv[2], sys.argv[3])\n"
        "print(json.dumps(dataclasses.asdict(stats)))\n"
    )
    status, output = api.exec(["python", "-c", code, api.spec.data_mount, queue, GROUP])
    assert status == 0, output.decode(errors="replace")
    return json.loads(output.decode().strip().splitlines()[-1])


def test_consumers_alternating_between_two_containers_ack_every_message_once(
    apis: tuple[Service, Service],
) -> None:
    a, b = apis
    bases = [a.url(), b.url()]
    queue = "jobs"
    sent: dict[str, bytes] = {}
    with requests.Session() as http:
        for n in range(6):  # publishers on both containers: one queue, one order
            bodies = [mq.payload("work", n * BATCH_PUBLISH + i, 300) for i in range(BATCH_PUBLISH)]
            names = publish_batch(http, bases[n % 2], queue, bodies)
            sent.update(zip(names, bodies, strict=True))

    acked: list[list[str]] = [[] for _ in range(CONSUMERS)]
    leased_from: list[Counter[int]] = [Counter() for _ in range(CONSUMERS)]
    refused: list[str] = []
    errors: list[BaseException] = []

    def consumer(number: int) -> None:
        try:
            with requests.Session() as http:
                for turn in range(10_000):
                    here = (number + turn) % 2  # alternate: A, B, A, ... (or B, A, ...)
                    leased = consume(
                        http, bases[here], queue, GROUP, count=7, lease=60, consumer=f"c{number}"
                    )
                    if not leased:
                        return
                    leased_from[number][here] += 1
                    for message in leased:
                        assert message.body == sent[message.name] and message.deliveries == 1
                    # ...and ack on the other container than the one that leased them.
                    results = ack(http, bases[1 - here], queue, GROUP, [m.receipt for m in leased])
                    acked[number] += [r.name for r in results if r.result == "ok"]
                    refused.extend(r.receipt for r in results if r.result != "ok")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=consumer, args=(n,)) for n in range(CONSUMERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors, errors
    assert not refused, f"acks on the other container refused: {refused[:3]}"
    every = Counter(name for names in acked for name in names)
    assert sorted(every) == sorted(sent), "a message was never acked"
    assert set(every.values()) == {1}, "a message was acked twice"
    assert all(counts[0] and counts[1] for counts in leased_from), leased_from
    for api in (a, b):  # both containers read the same state from the volume
        stats = group_stats(api, queue)
        assert stats["acked"] == len(sent) and stats["redelivered"] == 0, stats
        assert (stats["waiting"], stats["leased"], stats["oldest_unacked"]) == (0, 0, None)


def test_a_lease_that_ran_out_is_fenced_on_both_containers(
    apis: tuple[Service, Service],
) -> None:
    a, b = apis
    queue = "fenced"
    with requests.Session() as http:
        mq.publish_raw(http, a.url(), queue, b"\x00one job\xff", 30)
        (first,) = consume(http, a.url(), queue, GROUP, lease=1)
        # B has it for another consumer once A's lease ran out (a waiting consume
        # looks again each second).
        deadline = time.monotonic() + 30
        again = []
        while not again and time.monotonic() < deadline:
            again = consume(http, b.url(), queue, GROUP, lease=60, wait=5)
        assert again, "not delivered again after the lease ran out"
        (second,) = again
        assert (second.name, second.deliveries, second.body) == (first.name, 2, b"\x00one job\xff")

        for api in (b, a):  # the stale receipt: refused on either container
            reply = http.post(
                f"{api.url()}/",
                data={"action": "ack", "q": queue, "group": GROUP, "receipt": first.receipt},
                timeout=30,
            )
            assert reply.status_code == 409, reply.content[:300]
            assert "does not hold" in mq.envelope(reply)["error"]
        # The current receipt, from B, acks on A; repeated on B it is answered the same.
        assert ack_one(http, a.url(), queue, GROUP, second.receipt) == 200
        assert ack_one(http, b.url(), queue, GROUP, second.receipt) == 200
        assert consume(http, a.url(), queue, GROUP) == []
        assert consume(http, b.url(), queue, GROUP) == []
    stats = group_stats(b, queue)
    assert (stats["acked"], stats["redelivered"], stats["waiting"], stats["leased"]) == (
        1,
        1,
        0,
        0,
    ), stats
