"""An api container restarted or killed keeps every acknowledged message: the volume is
the whole state, and a success reply means the message is on it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests

from tests.e2e import mq
from tests.e2e.stack import Service, Stack, network
from tests.support.e2e_run import E2E

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def api(e2e: E2E) -> Iterator[Service]:
    with network(e2e.client, e2e.run_id, "restart") as net:
        stack = Stack(e2e.client, e2e.services, e2e.run_id, "restart", net)
        try:
            service = stack.start("api")
            service.wait_healthy(timeout=120)
            yield service
        finally:
            stack.close()


def test_restart_and_kill_of_the_api_lose_nothing(api: Service) -> None:
    methods = list(mq.PUBLISHERS.values())
    sent = [mq.ALL_BYTES, b"", b"\xff\xfe\x80\x00"]
    sent += [mq.payload("restart", n, size=n * 500) for n in range(37)]
    with requests.Session() as http:
        for number, body in enumerate(sent):
            publish = methods[number % len(methods)]
            if publish is mq.publish_get and len(body) > 2000:
                publish = mq.publish_form  # gunicorn limits the request line to 8190 bytes
            if publish is mq.publish_raw and body == b"":
                publish = mq.publish_get  # an empty raw body is refused (see test_stack)
            publish(http, api.url(), "durable", body, 30)
        before = mq.drain(http, api.url(), "durable")
        assert mq.bodies(before) == sent

        api.restart()  # docker restart: SIGTERM, gunicorn's graceful stop, start
        api.wait_healthy(timeout=120)
        assert mq.drain(http, api.url(), "durable") == before

        api.kill_and_start()  # docker kill -s KILL, docker start
        api.wait_healthy(timeout=120)
        assert mq.drain(http, api.url(), "durable") == before

        # Publishing goes on after the crash, in order after what was there.
        mq.publish_raw(http, api.url(), "durable", b"after the crash\x00", 30)
        after = mq.drain(http, api.url(), "durable")
        assert after[:-1] == before and after[-1][1] == b"after the crash\x00"
        assert after[-1][0] > before[-1][0]
