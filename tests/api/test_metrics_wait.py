"""Long-poll waiting is kept out of the request latency histogram (its own histogram)."""

from __future__ import annotations

import re

from flask.testing import FlaskClient

from tests.support.api_app import drain


def _sample(text: str, name: str, labels: str) -> float:
    match = re.search(rf"^{re.escape(name)}\{{{re.escape(labels)}\}} (\S+)$", text, re.M)
    assert match, f"{name}{{{labels}}} not in /metrics"
    return float(match.group(1))


def test_a_long_poll_wait_is_not_request_latency(client: FlaskClient) -> None:
    client.get("/?action=publish&q=quiet&msg=x")
    ((name, _),) = drain(client, "quiet")
    reply = client.get(f"/?action=fetch&q=quiet&after={name}&wait=1")
    assert reply.status_code == 200 and reply.json["message"] == "No new messages."
    text = client.get("/metrics").data.decode()

    waited = _sample(text, "zoscii_api_wait_seconds_sum", 'action="fetch"')
    answering = _sample(text, "zoscii_api_request_duration_seconds_sum", 'action="fetch"')
    # The long poll's whole second is in one histogram or the other, most of it waiting.
    assert 0.5 < waited < 5 and waited + answering >= 1.0, (waited, answering)
    assert _sample(text, "zoscii_api_wait_seconds_count", 'action="fetch"') == 1.0
    # Every fetch (the drain's two and the long poll) answered in under 0.5 s.
    fetches = _sample(text, "zoscii_api_request_duration_seconds_count", 'action="fetch"')
    fast = _sample(text, "zoscii_api_request_duration_seconds_bucket", 'action="fetch",le="0.5"')
    assert fetches == fast == 3.0
    assert answering < 0.5


def test_a_fetch_that_does_not_wait_records_no_wait(client: FlaskClient) -> None:
    client.get("/?action=publish&q=busy&msg=x")
    assert client.get("/?action=fetch&q=busy&wait=5").status_code == 200
    text = client.get("/metrics").data.decode()
    assert 'zoscii_api_wait_seconds_count{action="fetch"}' not in text
    assert _sample(text, "zoscii_api_requests_total", 'action="fetch",status="200"') == 1.0


def test_a_consume_long_poll_is_kept_apart_too(client: FlaskClient) -> None:
    client.get("/?action=publish&q=jobs&msg=x")
    assert client.get("/?action=consume&q=jobs&group=g").status_code == 200
    reply = client.get("/?action=consume&q=jobs&group=g&wait=1")
    assert reply.status_code == 200
    text = client.get("/metrics").data.decode()
    waited = _sample(text, "zoscii_api_wait_seconds_sum", 'action="consume"')
    answering = _sample(text, "zoscii_api_request_duration_seconds_sum", 'action="consume"')
    # Time between two waits (a wake-up that found nothing to lease, on a busy machine)
    # is answering time: the long poll's second is in one histogram or the other.
    assert 0.5 < waited < 5 and waited + answering >= 1.0, (waited, answering)
    assert answering < 0.5
