"""A small fake of the original PHP server's behaviour, for compatibility tests.

What matters of the original (index.php): every parameter by GET or urlencoded POST
(PHP's $_REQUEST), always HTTP 200 (errors only in the envelope), envelopes with PHP's
default ``text/html`` content type, messages as ``application/octet-stream`` with
``Content-Disposition: attachment; filename="<name>"``, names in local time with a
``0000`` counter and a random GUID, fetch = the first name sorting after ``after``.
"""

from __future__ import annotations

import json
import threading
import uuid
from datetime import datetime
from urllib.parse import unquote_to_bytes

from tests.support.http_servers import QuietHandler, QuietHTTPServer


def parse_form(raw: bytes) -> dict[bytes, bytes]:
    """PHP's form decoding, to bytes: '+' is a space, %XX any byte."""
    params = {}
    for pair in raw.split(b"&"):
        if pair:
            key, _, value = pair.partition(b"=")
            params[unquote_to_bytes(key.replace(b"+", b" "))] = unquote_to_bytes(
                value.replace(b"+", b" ")
            )
    return params


class FakeOriginalServer(QuietHTTPServer):
    def __init__(self) -> None:
        super().__init__(_Handler)
        self.queues: dict[str, dict[str, bytes]] = {}
        self.requests: list[tuple[str, str, dict[bytes, bytes]]] = []  # method, type, params
        self.lock = threading.Lock()
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_port}/index.php"

    def add(
        self, queue: str, payload: bytes, retention: int = 0, when: datetime | None = None
    ) -> str:
        """As the original names it: local time, counter 0000, so two messages added in
        one second sort by their random GUID (pass an earlier ``when`` to order them)."""
        stamp = (when or datetime.now()).strftime("%Y%m%d%H%M%S")
        name = f"{stamp}0000-{retention:04d}-{uuid.uuid4()}.bin"
        with self.lock:
            self.queues.setdefault(queue, {})[name] = payload
        return name


class _Handler(QuietHandler):
    protocol_version = "HTTP/1.1"
    server: FakeOriginalServer

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._handle(b"")

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if not self.headers.get("Content-Type", "").startswith("application/x-www-form-urlencoded"):
            body = b""  # the original knows forms only (multipart aside)
        self._handle(body)

    def _handle(self, body: bytes) -> None:
        query = self.path.partition("?")[2].encode("latin-1")
        params = parse_form(query)
        params.update(parse_form(body))
        self.server.requests.append((self.command, self.headers.get("Content-Type", ""), params))
        action = params.get(b"action", b"").decode()
        if action == "fetch":
            self._fetch(params)
        elif action == "publish":
            queue = params.get(b"q", b"").decode().lower()
            self.server.add(queue, params.get(b"msg", b""), int(params.get(b"r", b"0") or 0))
            self._envelope(message="Message published.")
        else:
            self._envelope(error="Invalid action.")

    def _fetch(self, params: dict[bytes, bytes]) -> None:
        queue = params.get(b"q", b"").decode().lower()
        after = params.get(b"after", b"").decode()
        with self.server.lock:
            messages = self.server.queues.get(queue)
            if messages is None:
                return self._envelope(error="Queue not found.")
            names = sorted(name for name in messages if name > after)
            if not names:
                message = "No new messages." if messages else "Queue is empty."
                return self._envelope(message=message)
            name, payload = names[0], messages[names[0]]
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Disposition", f'attachment; filename="{name}"')
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _envelope(self, *, error: str = "", message: str = "") -> None:
        body = json.dumps(
            {
                "system": "ZOSCII MQ",
                "version": "1.0",
                "error": error,
                "message": message,
                "result": [],
            }
        ).encode()
        self.send_response(200)  # always 200, as the original
        self.send_header("Content-Type", "text/html; charset=UTF-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
