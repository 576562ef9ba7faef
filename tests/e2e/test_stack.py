"""One stack of the four containers on one volume: the api carries binary messages
byte-exact, claireup deletes what has expired and nothing else, statissa counts what
is there.

Every test uses its own queue and publishes with r > 0 unless it means to test expiry,
so the tests do not disturb each other and share the stack.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e import mq
from tests.e2e.stack import Stack, network, wait_healthy
from tests.support.e2e_run import E2E
from zosciimq.client import ZosciiClient
from zosciimq.client.publish_batch import FramedBody, MultipartBody

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

STATISSA_FIRST_RUN_TIMEOUT = 240  # /refresh waits for the first Spark run (30-60 s here)


@pytest.fixture(scope="module")
def stack(e2e: E2E) -> Iterator[Stack]:
    with network(e2e.client, e2e.run_id, "single") as net:
        stack = Stack(e2e.client, e2e.services, e2e.run_id, "single", net)
        try:
            for service in ("api", "replikate", "claireup", "statissa"):
                stack.start(service)
            wait_healthy([s.container for s in stack.services.values()], timeout=180)
            yield stack
        finally:
            stack.close()


@pytest.fixture(scope="module")
def http() -> Iterator[requests.Session]:
    with requests.Session() as session:
        yield session


PAYLOADS = {
    "all-256-bytes": mq.ALL_BYTES,
    "not-utf-8": b"\xff\xfe\xc3\x28 \xa0\xa1 \xe2\x28\xa1 \x80\x00+%&=?#",
    "empty": b"",
    "looks-like-an-envelope": b'{"system":"ZOSCII MQ","error":"x"}',
    "spaces-and-plus": b" + a b+c ",
}


def test_binary_messages_by_every_method_come_back_byte_exact_in_order(
    stack: Stack, http: requests.Session
) -> None:
    base = stack["api"].url()
    sent = []
    for method, publish in mq.PUBLISHERS.items():
        for label, body in PAYLOADS.items():
            if (method, label) == ("raw", "empty"):
                continue  # see test_an_empty_raw_body_is_an_empty_message
            publish(http, base, "binary", body, 30)
            sent.append((method, label, body))

    received = mq.drain(http, base, "binary")

    assert len(received) == len(sent)
    for (method, label, body), (name, got) in zip(sent, received, strict=True):
        assert got == body, f"{label} sent by {method} came back as {got[:80]!r} ({name})"
    names = [name for name, _ in received]
    assert names == sorted(names) and len(set(names)) == len(names)
    assert all(name[19:23] == "0030" for name in names), names  # r=30 kept in the name


def test_publish_many_sends_framed_batches_to_the_container_byte_exact(
    stack: Stack, http: requests.Session
) -> None:
    """The client's batches through the image's gunicorn: the probe as a multipart form,
    then, as its reply announced, framed bodies; every message back byte-exact, in order."""
    messages = [*PAYLOADS.values(), b"12 n=x\nend\n", bytes(range(256)) * 300] * 3
    with ZosciiClient(stack["api"].url()) as client:
        bodies: list[object] = []
        client.session.hooks["response"].append(
            lambda response, **_: bodies.append(response.request.body)
        )
        results = client.publish_many("framed", messages, retention_days=30, batch_size=8)
    assert [type(b) for b in bodies] == [MultipartBody, FramedBody, FramedBody, FramedBody]
    received = mq.drain(http, stack["api"].url(), "framed")
    assert [got for _, got in received] == messages
    assert [r.name for r in results] == [name for name, _ in received]


def test_an_empty_raw_body_is_an_empty_message(stack: Stack, http: requests.Session) -> None:
    base = stack["api"].url()
    mq.publish_raw(http, base, "empty_raw", b"", 30)
    assert mq.bodies(mq.drain(http, base, "empty_raw")) == [b""]


def test_claireup_run_deletes_the_expired_message_and_keeps_the_other(
    stack: Stack, http: requests.Session
) -> None:
    base = stack["api"].url()
    mq.publish_raw(http, base, "retention", b"expires now\x00\xff", 0)
    mq.publish_raw(http, base, "retention", b"kept for 30 days\x00\xff", 30)
    before = mq.drain(http, base, "retention")
    assert mq.bodies(before) == [b"expires now\x00\xff", b"kept for 30 days\x00\xff"]

    code, output = stack["claireup"].exec(["python", "-m", "zoscii_claireup", "--once"])

    assert code == 0, output.decode("utf-8", "replace")
    after = mq.drain(http, base, "retention")
    assert after == [before[1]], f"after the claireup run: {after}"
    # The pointer of a consumer that had read the deleted message still works.
    assert mq.message_name(mq.fetch(http, base, "retention", before[0][0])) == before[1][0]


def queue_samples(text: str, queue: str) -> dict[str, float]:
    """The zoscii_queue_* samples of one queue from a /metrics page."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("zoscii_queue_") and sample.labels.get("queue") == queue:
                found[sample.name] = sample.value
    return found


def test_statissa_metrics_count_the_published_messages_and_bytes(
    stack: Stack, http: requests.Session
) -> None:
    base = stack["api"].url()
    bodies = [mq.payload("stats", n, size=n * 1000) for n in range(7)]
    for body in bodies:
        mq.publish_raw(http, base, "stats", body, 30)
    statissa = stack["statissa"].url()

    refresh = http.post(f"{statissa}/refresh", timeout=STATISSA_FIRST_RUN_TIMEOUT)
    assert refresh.status_code == 200, f"{refresh.text[:2000]}\n{stack['statissa'].logs()}"
    metrics = http.get(f"{statissa}/metrics", timeout=30)

    assert metrics.status_code == 200
    samples = queue_samples(metrics.text, "stats")
    assert samples.get("zoscii_queue_messages") == len(bodies), samples
    assert samples.get("zoscii_queue_bytes") == sum(len(b) for b in bodies), samples
    assert samples.get("zoscii_queue_messages_expired") == 0, samples
