"""The base of the tests' fake HTTP servers: quiet, served in a thread, stopped at once.

A client under test hangs up on these servers on purpose (a deadline, a refused reply,
a test that has seen enough), and ``socketserver`` would print each ConnectionResetError
or BrokenPipeError with its traceback into the test output; ``http.server`` would log
every request to stderr. Neither says anything about the test, so neither is printed.
Any other error in a handler still is.
"""

from __future__ import annotations

import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

POLL_INTERVAL = 0.05  # how soon ``close()`` returns (socketserver's default: 0.5 s)


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that does not log every request to stderr, and sends a reply's
    head and body without waiting for the client's delayed ACK in between (Nagle: 40 ms
    a reply on a kept-alive connection)."""

    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: object) -> None:
        pass


class QuietHTTPServer(ThreadingHTTPServer):
    """``QuietHTTPServer(handler).start()`` on a free loopback port; ``close()`` it."""

    daemon_threads = True

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(("127.0.0.1", 0), handler)

    @property
    def port(self) -> int:
        return self.server_address[1]

    def start(self) -> QuietHTTPServer:
        serve = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": POLL_INTERVAL}, daemon=True
        )
        serve.start()
        return self

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):  # a hang-up
            super().handle_error(request, client_address)

    def close(self) -> None:
        self.shutdown()
        self.server_close()
