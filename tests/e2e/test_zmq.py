"""The zmq image beside the api, on one volume, as deploy/compose.zmq.yml runs it.

* a zpipes writer (zbroker's bytes over TCP) and an HTTP consumer see the same bytes: a
  chunk answered WRITE_OK is a queue message the api serves byte-exact;
* an HTTP publish into the pipe's queue is read by a zpipes reader;
* the gateway container killed (SIGKILL) and started again: the reader that opens the
  pipe again gets what it was not answered yet;
* request-reply publishes, and the api serves what it published.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator

import pytest
import requests
import zmq

from tests.e2e import mq
from tests.e2e.compose_spec import REPO_ROOT, PortSpec, load_services
from tests.e2e.stack import Service, Stack, network, wait_healthy
from tests.support.e2e_run import E2E, image_tag_env
from tests.zmq import wire

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def stack(e2e: E2E) -> Iterator[tuple[Service, Service]]:
    """api and zmq, the gateway's spec read from deploy/compose.zmq.yml (its volumes_from
    becomes the stack's volume at /data); ports on every interface for the tests."""
    (zmq_spec,) = load_services(REPO_ROOT / "deploy" / "compose.zmq.yml", image_tag_env()).values()
    zmq_spec = dataclasses.replace(
        zmq_spec,
        data_mount="/data",
        ports=tuple(PortSpec(p.container_port, "") for p in zmq_spec.ports),
    )
    api = e2e.services["api"]
    api = dataclasses.replace(api, ports=tuple(PortSpec(p.container_port, "") for p in api.ports))
    specs = {**e2e.services, "api": api, "zmq": zmq_spec}
    with network(e2e.client, e2e.run_id, "zmq") as net:
        group = Stack(e2e.client, specs, e2e.run_id, "zmq", net)
        try:
            a = group.start("api")
            g = group.start("zmq", env={"ZOSCII_ZPIPES_IDLE_SECONDS": "60"})
            wait_healthy([a.container, g.container], timeout=180)
            yield a, g
        finally:
            group.close()


def endpoint(service: Service, port: int) -> str:
    host = service.tc.get_container_host_ip()
    return f"tcp://{host}:{service.tc.get_exposed_port(port)}"


def test_zpipes_and_http_share_the_queue(stack: tuple[Service, Service]) -> None:
    api, gateway = stack
    context = zmq.Context()
    name = b"e2e" + uuid.uuid4().hex[:10].encode()
    queue = "zpipe-" + name.decode()
    http = requests.Session()
    try:
        writer = wire.Pipe(context, endpoint(gateway, 5560), 10_000)
        reader = wire.Pipe(context, endpoint(gateway, 5560), 10_000)
        reader.open_reader(name)
        writer.open_writer(name)
        chunks = [bytes(range(256)) * 4, b"\x00\xff" * 100, b"last"]
        for chunk in chunks:
            assert writer.write(chunk) == "WRITE_OK"
        # answered WRITE_OK: the api serves each chunk as a message, byte-exact
        assert mq.bodies(mq.drain(http, api.url(), queue)) == chunks
        assert reader.read(1024, 5000) == ("READ_OK", chunks[0])
        assert reader.read(10, 5000) == ("READ_OK", chunks[1][:10])

        # a crash: the reader opens the pipe again after the restart
        gateway.kill_and_start()
        gateway.wait_healthy(120)
        reader.close()
        writer.close()
        reader = wire.Pipe(context, endpoint(gateway, 5560), 10_000)
        reader.open_reader(name)
        # the last READ answered before the kill comes again (its reply might not have
        # reached us), then the rest: nothing lost
        assert reader.read(10, 5000) == ("READ_OK", chunks[1][:10])
        assert reader.read(190 + 4, 5000) == ("READ_OK", chunks[1][10:] + b"last")

        # HTTP into the pipe's queue: the zpipes reader reads it
        mq.publish_raw(http, api.url(), queue, b"from http", None)
        assert reader.read(9, 5000) == ("READ_OK", b"from http")
        reader.close()

        # request-reply publishes; the api fetches it
        req = context.socket(zmq.REQ)
        req.rcvtimeo = 10_000
        req.connect(endpoint(gateway, 5561))
        req.send_multipart([b"publish", b"zmqe2e", b"\x01\x02request"])
        status, message = req.recv_multipart()
        assert status == b"ok"
        reply = mq.fetch(http, api.url(), "zmqe2e")
        assert mq.message_name(reply) == message.decode()
        assert reply.content == b"\x01\x02request"
        req.close()
        status = requests.get(f"{gateway.url(9105)}/healthz", timeout=10)
        assert status.status_code == 200, status.text
    finally:
        context.destroy(linger=0)
