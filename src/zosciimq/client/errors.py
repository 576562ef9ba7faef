"""Typed errors of the client.

Three families, so a caller can decide what to do without reading any text:

* ``TransportError``: the server could not be reached or did not answer in time
  (after the configured retries). Retrying later is the right response.
* ``ProtocolError``: something answered, but not a ZOSCII MQ reply that can be trusted
  (HTML, someone else's JSON, a truncated body, a bad file name). Nothing was used.
* ``ServerError``: a well-formed envelope whose ``error`` is set. The subclass is chosen
  from the HTTP status (this project) or, for the original implementation, which always
  answers 200, from the envelope's ``error``; never from its ``message``. Each is also
  the shared package's class of the same name (``zosciimq.errors``), so ``except
  zosciimq.errors.InvalidInput`` catches a bad input found here or by the server.

Every error has a short ``reason`` (a fixed vocabulary, safe as a metrics label).
"""

from __future__ import annotations

from typing import Any

from zosciimq import errors


class ZosciiClientError(Exception):
    """``published``/``remaining``: set when ``publish_many``/``publish_iter`` failed part
    way (see there): the ``Published`` of the messages acknowledged before the error, and
    the ``BatchItem``s not acknowledged, with the nonces that were sent. None otherwise."""

    reason = "error"
    published: list[Any] | None = None
    remaining: list[Any] | None = None


# --- the network -----------------------------------------------------------------------
class TransportError(ZosciiClientError):
    reason = "unreachable"


class Timeout(TransportError):
    reason = "timeout"


class DeadlineExceeded(TransportError):
    """The overall time allowed for one request ran out (a slow drip of bytes)."""

    reason = "deadline"


# --- replies that cannot be trusted ------------------------------------------------------
class ProtocolError(ZosciiClientError):
    reason = "not_zoscii"

    def __init__(self, text: str, *, status: int | None = None) -> None:
        super().__init__(text)
        self.status = status


class NotZosciiReply(ProtocolError):
    """HTML, garbage, JSON that is not a ZOSCII MQ envelope, or an unexpected status."""

    reason = "not_zoscii"


class BadHeaders(ProtocolError):
    reason = "bad_headers"


class BadMessageName(ProtocolError):
    """A binary reply whose Content-Disposition file name is missing or not a message name."""

    reason = "bad_name"


class OutOfOrder(ProtocolError):
    """A fetch reply whose name does not sort after the pointer that was asked for."""

    reason = "out_of_order"


class TruncatedReply(ProtocolError):
    reason = "truncated"


class ReplyTooLarge(ProtocolError):
    reason = "too_large"


# --- errors the server reported ----------------------------------------------------------
class ServerError(ZosciiClientError):
    """The envelope's ``error`` was set; ``envelope`` holds the whole reply."""

    reason = "server_error"
    status: int  # as answered (the class's own, zosciimq.errors, for the subclasses)

    def __init__(self, error: str, *, status: int, envelope: dict[str, Any]) -> None:
        super().__init__(error)
        self.error = error
        self.status = status
        self.envelope = envelope


class InvalidInput(ServerError, errors.InvalidInput):
    reason = "invalid_input"


class Unauthenticated(ServerError, errors.Unauthenticated):
    """401: no credentials, or none the server accepts (access control is on)."""

    reason = "unauthenticated"


class Forbidden(ServerError, errors.Forbidden):
    """The action is switched off on the server, or publishing to that queue is blocked."""

    reason = "forbidden"


class NotFound(ServerError, errors.NotFound):
    reason = "not_found"


class QueueNotFound(NotFound, errors.QueueNotFound):
    pass


class MessageNotFound(NotFound, errors.MessageNotFound):
    pass


class RangeNotSatisfiable(ServerError, errors.RangeNotSatisfiable):
    reason = "range"


class TooLarge(ServerError, errors.TooLarge):
    reason = "too_large"


class TryAgain(ServerError, errors.TryAgain):
    reason = "try_again"


class StorageFull(ServerError, errors.StorageFull):
    """507: nothing was kept; the volume is full, or (``QueueFull``) the queue."""

    reason = "storage_full"


class QueueFull(StorageFull, errors.QueueFull):
    """507 for a publish over its queue's ``max_messages``/``max_bytes`` (the queue
    policy, ``when_full = "refuse"``): the other queues still take messages. A
    ``StorageFull``, so ``except StorageFull`` still catches it."""

    reason = "queue_full"


class Fenced(ServerError, errors.Fenced):
    """409: a work-queue receipt that no longer holds its message (acked, requeued,
    dead-lettered, or leased again to another consumer after its lease ran out).
    Nothing was changed; the message is someone else's now, or finished."""

    reason = "fenced"


class InternalServerError(ServerError):
    reason = "server_error"


# The server's statuses (zosciimq.errors) -> the class raised here; 429 (rate limited)
# and 503 are both "try again later" to a client.
_KINDS: tuple[type[ServerError], ...] = (
    InvalidInput,
    Unauthenticated,
    Forbidden,
    NotFound,
    TooLarge,
    RangeNotSatisfiable,
    TryAgain,
    StorageFull,
    Fenced,
)
_BY_STATUS: dict[int, type[ServerError]] = {kind.status: kind for kind in _KINDS}
_BY_STATUS |= {errors.RateLimited.status: TryAgain, errors.WrongMethod.status: InvalidInput}


def server_error(error: str, *, status: int, envelope: dict[str, Any]) -> ServerError:
    """The typed error for an envelope with ``error`` set."""
    kind = _BY_STATUS.get(status)
    if kind is None:
        kind = _from_text(error) if status < 400 else InternalServerError
    if kind is NotFound:
        kind = _not_found_kind(error)
    elif kind is StorageFull and error.lower().startswith("queue"):
        kind = QueueFull  # the envelope carries no reason: "Queue 'q' is full (...)"
    return kind(error, status=status, envelope=envelope)


def _from_text(error: str) -> type[ServerError]:
    """The original answers 200 on errors: its ``error`` texts are all there is."""
    text = error.lower()
    if "not found" in text or "does not exist" in text:
        return NotFound
    if "disabled" in text or "not allowed" in text or "blocked" in text:
        return Forbidden
    if "too large" in text or "larger than" in text:
        return TooLarge
    if "try again" in text:
        return TryAgain
    if "no space" in text:
        return StorageFull
    if text.startswith(("invalid", "missing", "unknown")):
        return InvalidInput
    return ServerError


def _not_found_kind(error: str) -> type[NotFound]:
    text = error.lower()
    if text.startswith("queue"):
        return QueueNotFound
    if text.startswith("message"):
        return MessageNotFound
    return NotFound
