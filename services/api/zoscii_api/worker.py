"""gunicorn's gthread worker with a deadline for the request head.

gthread reads the request line and headers with a blocking socket and no timeout once
the first byte is in, so a client that trickles its headers holds a thread for ever
(see ``zoscii_api.deadlines``). This worker gives every request head
``ZOSCII_HEADER_TIMEOUT_SECONDS`` from the moment a thread starts on it (TLS handshake
included); a late one gets 408 and the connection is closed. The body's deadline is the
app's business, as only the app reads it.

HTTP/1 only (gunicorn's default ``http_protocols``): an HTTP/2 connection is served by
one long call and would be cut at the head deadline.
"""

from __future__ import annotations

import json
import time
from typing import Any

from gunicorn.workers import gthread

from zoscii_api.deadlines import Watchdog
from zoscii_api.responses import SYSTEM, VERSION
from zoscii_api.settings import ApiSettings

_TIMEOUT_BODY = (
    json.dumps(
        {
            "system": SYSTEM,
            "version": VERSION,
            "error": "Request head too slow: the request line and headers took too long.",
            "message": "",
            "result": [],
        },
        separators=(",", ":"),
    )
    + "\n"
).encode()
TIMEOUT_REPLY = (
    b"HTTP/1.1 408 Request Timeout\r\n"
    b"Content-Type: application/json\r\n"
    b"Content-Length: " + str(len(_TIMEOUT_BODY)).encode() + b"\r\n"
    b"Connection: close\r\n\r\n" + _TIMEOUT_BODY
)


class ThreadWorker(gthread.ThreadWorker):
    def init_process(self) -> None:
        self.head_timeout = ApiSettings.from_env().header_timeout_seconds
        self.head_watchdog = Watchdog(name="head-deadlines")
        super().init_process()

    def handle(self, conn: Any) -> Any:
        deadline = time.monotonic() + self.head_timeout
        self.head_watchdog.watch(conn, lambda: conn.sock, deadline)
        try:
            result = super().handle(conn)
        finally:
            late = self.head_watchdog.forget(conn)
        if late:
            self.log.info(
                "closing %s: request head not complete in %s s", conn.client, self.head_timeout
            )
            if conn.parser is not None:  # an HTTP conversation, not a stalled TLS handshake
                try:
                    conn.sock.sendall(TIMEOUT_REPLY)
                except OSError:
                    pass
            return False
        return result

    def handle_request(self, req: Any, conn: Any) -> Any:
        if self.head_watchdog.forget(conn):  # the head came in just as its time was up
            return False
        return super().handle_request(req, conn)
