"""A small hostile HTTP server for tests: every way a source can misbehave.

``server.scenario`` picks the misbehaviour for every request. Slow scenarios are
bounded (they stop after a few seconds or when the client hangs up).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

POINTER = "202501011200000000-0007-0b9e3c59-8a3e-4f6a-9d7c-5c2b8f0e6a11.bin"
EARLIER = "202401011200000000-0007-1c9e3c59-8a3e-4f6a-9d7c-5c2b8f0e6a11.bin"
LATER = "202601011200000000-0007-2d9e3c59-8a3e-4f6a-9d7c-5c2b8f0e6a11.bin"


class HostileServer(ThreadingHTTPServer):
    daemon_threads = True
    scenario = "html"

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests = 0
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_port}/index.php"

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: HostileServer

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self._answer()

    def _answer(self) -> None:
        self.server.requests += 1
        getattr(self, "s_" + self.server.scenario)()

    # --- helpers -------------------------------------------------------------------------
    def _reply(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _binary(self, name: str, body: bytes, **extra: str) -> None:
        headers = {
            "Content-Type": "application/octet-stream",
            "Content-Disposition": f'attachment; filename="{name}"',
            **extra,
        }
        self._reply(200, body, headers)

    def _hang_up(self) -> None:
        self.wfile.flush()
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # --- scenarios -----------------------------------------------------------------------
    def s_html(self) -> None:
        self._reply(
            200,
            b"<html><body><h1>Welcome to nginx!</h1></body></html>",
            {"Content-Type": "text/html"},
        )

    def s_html_error(self) -> None:
        self._reply(502, b"<html><body>Bad Gateway</body></html>", {"Content-Type": "text/html"})

    def s_garbage(self) -> None:
        self._reply(200, b"\x00\xff\xfe garbage {", {"Content-Type": "application/json"})

    def s_foreign_json(self) -> None:
        body = json.dumps({"status": "ok", "error": "", "result": []}).encode()
        self._reply(200, body, {"Content-Type": "application/json"})

    def s_json_list(self) -> None:
        self._reply(200, b"[1, 2, 3]", {"Content-Type": "application/json"})

    def s_octet_without_name(self) -> None:
        self._reply(200, b"some bytes", {"Content-Type": "application/octet-stream"})

    def s_path_filename(self) -> None:
        self._binary("../../etc/passwd", b"root:x:0:0")

    def s_not_a_message_name(self) -> None:
        self._binary("report.pdf", b"%PDF")

    def s_earlier_name(self) -> None:
        self._binary(EARLIER, b"old message")

    def s_same_name(self) -> None:
        self._binary(POINTER, b"the pointer's own message again")

    def s_truncated(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Disposition", f'attachment; filename="{LATER}"')
        self.send_header("Content-Length", "5000")
        self.end_headers()
        self.wfile.write(b"x" * 1000)
        self._hang_up()

    def s_huge_header(self) -> None:
        self._binary(LATER, b"body", **{"X-Padding": "a" * 100_000})

    def s_many_headers(self) -> None:
        self.send_response(200)
        for i in range(80):
            self.send_header(f"X-Padding-{i}", "b" * 1000)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Disposition", f'attachment; filename="{LATER}"')
        self.send_header("Content-Length", "4")
        self.end_headers()
        self.wfile.write(b"body")

    def s_slow_body(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Disposition", f'attachment; filename="{LATER}"')
        self.send_header("Content-Length", "1000")
        self.end_headers()
        self._drip(b"y" * 1000)

    def s_slow_headers(self) -> None:
        head = (
            "HTTP/1.1 200 OK\r\n"
            "Content-Type: application/octet-stream\r\n"
            f'Content-Disposition: attachment; filename="{LATER}"\r\n'
            + "".join(f"X-Drip-{i}: {'z' * 20}\r\n" for i in range(60))
        )
        self._drip(head.encode())

    def _drip(self, data: bytes) -> None:
        """One byte every 50 ms: never a read timeout, never done (bounded to ~8 s)."""
        started = time.monotonic()
        for byte in data:
            if time.monotonic() - started > 8:
                break
            try:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
            except OSError:
                return
            time.sleep(0.05)
        self._hang_up()

    def s_silent(self) -> None:
        time.sleep(4)  # longer than the client's read timeout
        self._hang_up()

    def s_too_large(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Disposition", f'attachment; filename="{LATER}"')
        self.send_header("Content-Length", str(50 << 20))
        self.end_headers()
        try:
            self.wfile.write(b"z" * (2 << 20))
        except OSError:
            pass
        self._hang_up()

    def s_too_large_undeclared(self) -> None:
        """No Content-Length, connection-delimited body, larger than the limit."""
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Disposition", f'attachment; filename="{LATER}"')
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            for _ in range(40):
                self.wfile.write(b"z" * (64 << 10))
        except OSError:
            pass
        self._hang_up()

    def s_envelope_error(self) -> None:
        body = {"system": "ZOSCII MQ", "version": "1.0", "error": "Queue 'x' not found.",
                "message": "", "result": []}  # fmt: skip
        self._reply(200, json.dumps(body).encode(), {"Content-Type": "text/html"})

    def s_redirect(self) -> None:
        self._reply(302, b"", {"Location": "http://127.0.0.1:1/elsewhere"})

    def s_error_status_with_quiet_envelope(self) -> None:
        body = {"system": "ZOSCII MQ", "version": "1.0", "error": "", "message": "", "result": []}
        self._reply(500, json.dumps(body).encode(), {"Content-Type": "application/json"})
