"""The client's operator methods against a real api (loopback: allowed by default)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from zosciimq.client import ZosciiClient


def test_queues_purge_delete_and_replay(client: ZosciiClient) -> None:
    for number in range(3):
        client.publish("adm-client", f"m{number}".encode())
    (listed,) = client.queues("adm-client")
    assert listed["queue"] == "adm-client" and listed["messages"] == 3
    assert listed["bytes"] == 6 and listed["groups"] == []
    assert "adm-client" in {q["queue"] for q in client.queues()}

    future = datetime.now(UTC) + timedelta(days=1)
    assert client.replay_pointer("adm-client", future) == listed["newest"]
    assert client.replay_pointer("adm-client", "2000-01-01T00:00:00Z") == ""

    assert client.purge("adm-client", before="2000-01-01T00:00:00Z")["purged"] == 0
    assert client.purge("adm-client")["purged"] == 3
    client.publish("adm-client", b"again")
    deleted = client.delete_queue("adm-client")
    assert deleted["messages"] == 1 and deleted["queue"] == "adm-client"
    assert "adm-client" not in {q["queue"] for q in client.queues()}


def test_naive_times_are_refused(client: ZosciiClient) -> None:
    with pytest.raises(ValueError, match="naive"):
        client.replay_pointer("anything", datetime(2024, 1, 1))
