"""Every error of the protocol, each with the HTTP status it is answered with.

The core raises the storage ones, the api the ones about a request; the api answers any
of them as the JSON envelope with ``status`` (``zoscii_api.endpoint.error_response``),
and the client raises the same classes for the replies it gets
(``zosciimq.client.errors``), so ``except InvalidInput`` means one thing everywhere.
``reason`` is a short fixed word, safe as a metrics label.
"""

from __future__ import annotations


class ZosciiError(Exception):
    """Base class: ``str(error)`` is the text that goes into the envelope's ``error``."""

    # Class attributes, not ClassVars: the client's errors (``zosciimq.client.errors``)
    # subclass these and keep the status the server actually answered on the instance.
    status: int = 500
    reason: str = "error"

    def headers(self) -> dict[str, str]:
        """HTTP headers the reply carries besides the envelope."""
        return {}


class InvalidInput(ZosciiError):
    """A parameter that the protocol would have to guess at (PROTOCOL.md 3, cleaning)."""

    status = 400
    reason = "invalid_input"


class MissingMessage(InvalidInput):
    """publish or store without ``msg``."""


class WrongMethod(InvalidInput):
    """HEAD on an action that writes: HEAD must be safe."""

    status = 405

    def headers(self) -> dict[str, str]:
        return {"Allow": "GET, POST"}


class PostRequired(WrongMethod):
    """An admin action that changes something (or hands out a pointer) by GET or HEAD."""

    def headers(self) -> dict[str, str]:
        return {"Allow": "POST"}


class RangeNotSatisfiable(InvalidInput):
    """An offset at or past the end, or an HTTP Range outside the message. ``size``: the
    message's length, sent as ``Content-Range: bytes */<size>`` (RFC 9110 15.5.17) so a
    client can ask again for what exists."""

    status = 416
    reason = "range"

    def __init__(self, message: str, *, size: int | None = None) -> None:
        super().__init__(message)
        self.size = size

    def headers(self) -> dict[str, str]:
        return {} if self.size is None else {"Content-Range": f"bytes */{self.size}"}


class Unauthenticated(ZosciiError):
    """No credentials, or none that match."""

    status = 401
    reason = "unauthenticated"

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": 'Bearer realm="zoscii", Basic realm="zoscii"'}


class Forbidden(ZosciiError):
    """Valid credentials without the right for this action or queue."""

    status = 403
    reason = "forbidden"


class ActionDisabled(Forbidden):
    """An action switched off by ZOSCII_ACTIONS (the original's ALLOW_* switches)."""


class QueueBlocked(Forbidden):
    """A publish to a queue on ZOSCII_BLOCKED_QUEUES."""


class NotFound(ZosciiError):
    status = 404
    reason = "not_found"


class QueueNotFound(NotFound):
    """fetch on a queue directory that does not exist."""


class MessageNotFound(NotFound):
    """retrieve of a store name whose file does not exist."""


class QueueUnusable(ZosciiError):
    """queues/<q> is not a directory of the data directory (a link, a file)."""

    status = 409
    reason = "unusable"


class Fenced(ZosciiError):
    """A consumer group receipt that no longer holds its message (acked, requeued,
    dead-lettered, or leased again to another consumer)."""

    status = 409
    reason = "fenced"


class ClientTooSlow(ZosciiError):
    """The client did not send its request within the time allowed."""

    status = 408
    reason = "too_slow"


class TooLarge(ZosciiError):
    """A message (or batch) over the configured maximum size."""

    status = 413
    reason = "too_large"


class RateLimited(ZosciiError):
    """Over the client's request rate; ``retry_after`` in whole seconds."""

    status = 429
    reason = "rate_limited"

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}


class TryAgain(ZosciiError):
    """A transient limit (more than 10,000 names in one second on one queue)."""

    status = 503
    reason = "try_again"

    def headers(self) -> dict[str, str]:
        return {"Retry-After": "1"}


class VolumeUnavailable(ZosciiError):
    """The data volume is missing, read-only or not writable (a mount that went away, a
    full inode table...): nothing was kept; try again once an operator fixed it."""

    status = 503
    reason = "volume_unavailable"

    def __init__(self, message: str, retry_after: int = 5) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}


class ReadOnly(ZosciiError):
    """A write to a server that serves a read-only copy (ZOSCII_READ_ONLY)."""

    status = 503
    reason = "read_only"


class StorageFull(ZosciiError):
    """The volume has no space left; nothing was kept."""

    status = 507
    reason = "storage_full"


class QueueFull(ZosciiError):
    """A publish over its queue's ``max_messages`` or ``max_bytes`` (the queue policy,
    ``when_full = "refuse"``); nothing was kept."""

    status = 507
    reason = "queue_full"
