"""Exit codes that scripts can test, and which client error maps to which.

The mapping looks only at the error's type and HTTP status, never at its text, so it
means the same against this project's api and against the original (which answers 200
on errors and is classified by the client from its ``error`` field).
"""

from __future__ import annotations

from zosciimq.client import (
    Forbidden,
    InvalidInput,
    NotFound,
    PayloadTooLarge,
    ProtocolError,
    QueueFull,
    RangeNotSatisfiable,
    ReplyTooLarge,
    ServerError,
    StorageFull,
    TooLarge,
    TransportError,
    TruncatedReply,
    TryAgain,
    ZosciiClientError,
)

OK = 0
ERROR = 1
USAGE = 2
NOT_FOUND = 3
NOTHING_NEW = 4
AUTH = 5
INVALID = 6
UNAVAILABLE = 7
FULL = 8
INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C
BROKEN_PIPE = 141  # 128 + SIGPIPE: the reader of stdout went away (| head)

TABLE = (
    (OK, "success"),
    (ERROR, "any other error (a server bug, a reply that is not ZOSCII MQ, a local file)"),
    (USAGE, "usage error (bad options or arguments)"),
    (NOT_FOUND, "queue or message not found; identify: a name was not renamed"),
    (NOTHING_NEW, "nothing new: fetch/tail caught up or queue empty, scan found nothing"),
    (AUTH, "not authenticated or not allowed (HTTP 401/403, action or queue switched off)"),
    (INVALID, "too large or invalid input (HTTP 400/413/416, an unreadable input file)"),
    (UNAVAILABLE, "server unavailable or network error (after retries; HTTP 5xx)"),
    (FULL, "the queue is full (its policy's limits, HTTP 507): nothing was stored"),
    (INTERRUPTED, "interrupted (Ctrl-C)"),
)


def epilog() -> str:
    return "exit codes:\n" + "\n".join(f"  {code:<4} {meaning}" for code, meaning in TABLE)


def exit_code_for(error: ZosciiClientError) -> int:
    status = getattr(error, "status", None)
    if isinstance(error, QueueFull):  # not the server: that queue, until it is drained
        return FULL
    if isinstance(error, (TransportError, TruncatedReply, TryAgain, StorageFull)):
        return UNAVAILABLE
    if status in (401, 403) or isinstance(error, Forbidden):
        return AUTH
    if isinstance(error, NotFound):
        return NOT_FOUND
    if isinstance(
        error, (InvalidInput, TooLarge, PayloadTooLarge, RangeNotSatisfiable, ReplyTooLarge)
    ):
        return INVALID
    if isinstance(error, (ServerError, ProtocolError)) and status is not None and status >= 500:
        return UNAVAILABLE  # a 5xx (also a proxy's HTML error page): try again later
    return ERROR
