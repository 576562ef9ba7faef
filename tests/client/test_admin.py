"""The client's operator methods against a real api, with the operator's token."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support.api_server import OPERATOR_TOKEN
from zosciimq.client import Unauthenticated, ZosciiClient


@pytest.fixture
def operator(api: tuple[str, Path]) -> Iterator[ZosciiClient]:
    with ZosciiClient(api[0], headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"}) as c:
        yield c


def test_queues_purge_delete_and_replay(operator: ZosciiClient) -> None:
    client = operator
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


def test_without_the_token_nothing_is_listed(client: ZosciiClient) -> None:
    with pytest.raises(Unauthenticated):
        client.queues()
