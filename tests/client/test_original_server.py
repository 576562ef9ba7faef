"""The client against the original implementation's behaviour (always 200, forms only)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.replikate.fake_original import FakeOriginalServer
from zosciimq.client import InvalidInput, QueueNotFound, ServerError, ZosciiClient
from zosciimq.client.errors import server_error


@pytest.fixture
def original() -> Iterator[FakeOriginalServer]:
    server = FakeOriginalServer()
    yield server
    server.close()


def test_errors_in_a_200_envelope_are_typed_from_the_error_text(
    original: FakeOriginalServer,
) -> None:
    with ZosciiClient(original.url, mode="original") as client:
        with pytest.raises(QueueNotFound) as error:
            client.fetch("missing")
        assert error.value.status == 200
        with pytest.raises(InvalidInput):
            client._call({"action": "nonsense"})


def test_publish_and_fetch_against_the_original_byte_exact(original: FakeOriginalServer) -> None:
    payload = bytes(range(256)) + b" + & = %"
    with ZosciiClient(original.url, mode="original") as client:
        client.publish("Orders", payload, retention_days=3)
        message = client.fetch("orders")
        assert message.data == payload
        assert message.name.split("-")[1] == "0003"
        assert client.fetch("orders", message.name) is None
    methods = {(m, t.split(";")[0]) for m, t, _ in original.requests}
    assert methods == {("POST", "application/x-www-form-urlencoded")}


@pytest.mark.parametrize(
    ("status", "error", "kind"),
    [
        (200, "Invalid name 'x'.", "InvalidInput"),
        (200, "Message not found.", "MessageNotFound"),
        (200, "Queue 'q' not found.", "QueueNotFound"),
        (200, "Action 'scan' is disabled on this server.", "Forbidden"),
        (200, "Something odd.", "ServerError"),
        (400, "Whatever the text says.", "InvalidInput"),
        (404, "Queue 'q' not found.", "QueueNotFound"),
        (413, "x", "TooLarge"),
        (503, "x", "TryAgain"),
        (507, "x", "StorageFull"),
        (507, "No space left on the data volume; nothing was stored.", "StorageFull"),
        (507, "Queue 'q' is full (max_messages 3); nothing was kept.", "QueueFull"),
        (507, "Queue 'q' cannot take this: max_bytes 10.", "QueueFull"),
        (500, "Internal server error.", "InternalServerError"),
    ],
)
def test_error_kind_from_status_then_text(status: int, error: str, kind: str) -> None:
    raised = server_error(error, status=status, envelope={})
    assert type(raised).__name__ == kind
    assert isinstance(raised, ServerError) and raised.error == error
