"""One errors module: each class carries its status; the client raises the same classes."""

from __future__ import annotations

import inspect

from zosciimq import errors
from zosciimq.client import errors as client_errors


def _classes(module):
    return [
        c for _, c in inspect.getmembers(module, inspect.isclass) if c.__module__ == module.__name__
    ]


def test_every_error_has_a_status_and_a_reason() -> None:
    kinds = _classes(errors)
    assert kinds  # the loop below checks something
    for kind in kinds:
        assert 400 <= kind.status < 600, kind
        assert kind.reason.replace("_", "").isalpha(), kind


def test_the_client_raises_the_shared_classes() -> None:
    """``except zosciimq.errors.X`` catches X whether found locally or reported by a server."""
    shared = [
        kind
        for kind in _classes(client_errors)
        if issubclass(kind, client_errors.ServerError) and kind.__name__ in vars(errors)
    ]
    assert shared  # the loop below checks something
    for kind in shared:
        assert issubclass(kind, vars(errors)[kind.__name__]), kind
    reply = client_errors.server_error("Invalid queue name.", status=400, envelope={})
    assert isinstance(reply, errors.InvalidInput)
    assert isinstance(
        client_errors.server_error("No space.", status=507, envelope={}), errors.StorageFull
    )


def test_416_and_503_carry_their_headers() -> None:
    """Built from the classes, never by hand: the reply's headers come with the error."""
    assert errors.RangeNotSatisfiable("past the end", size=42).headers() == {
        "Content-Range": "bytes */42"
    }
    assert errors.RangeNotSatisfiable("past the end").headers() == {}
    unavailable = errors.VolumeUnavailable("/data is not writable")
    assert (unavailable.status, unavailable.reason) == (503, "volume_unavailable")
    assert unavailable.headers() == {"Retry-After": "5"}
    assert errors.VolumeUnavailable("gone", retry_after=30).headers() == {"Retry-After": "30"}
    reported = client_errors.server_error(
        "Requested range not satisfiable.", status=416, envelope={}
    )
    assert isinstance(reported, errors.RangeNotSatisfiable) and reported.headers() == {}
