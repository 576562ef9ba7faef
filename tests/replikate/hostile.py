"""A small hostile HTTP server for tests: every way a source can misbehave.

``server.scenario`` picks the misbehaviour for every request. Slow scenarios are
bounded (they stop after a few seconds or when the client hangs up). The ``batch_*``
scenarios answer a ``multipart/mixed`` batch fetch that is wrong in one way each
(``batch_boundary_in_body`` is a correct one whose first message contains the delimiter).
"""

from __future__ import annotations

import json
import socket
import time
from urllib.parse import parse_qs

from tests.support.http_servers import QuietHandler, QuietHTTPServer

POINTER = "202501011200000000-0007-0b9e3c59-8a3e-4f6a-9d7c-5c2b8f0e6a11.bin"
EARLIER = "202401011200000000-0007-1c9e3c59-8a3e-4f6a-9d7c-5c2b8f0e6a11.bin"
LATER = "202601011200000000-0007-2d9e3c59-8a3e-4f6a-9d7c-5c2b8f0e6a11.bin"
LATEST = "202606011200000000-0007-3e9e3c59-8a3e-4f6a-9d7c-5c2b8f0e6a11.bin"
FAR_FUTURE = "999912312359590000-0007-4f9e3c59-8a3e-4f6a-9d7c-5c2b8f0e6a11.bin"
BOUNDARY = "zoscii-hostile"


class HostileServer(QuietHTTPServer):
    scenario = "html"

    def __init__(self) -> None:
        super().__init__(_Handler)
        self.requests = 0
        self.params: list[dict[str, str]] = []  # of every request, query and form
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_port}/index.php"


class _Handler(QuietHandler):
    protocol_version = "HTTP/1.1"
    server: HostileServer

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._answer(b"")

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        length = int(self.headers.get("Content-Length") or 0)
        self._answer(self.rfile.read(length))

    def _answer(self, body: bytes) -> None:
        self.server.requests += 1
        query = self.path.partition("?")[2] + "&" + body.decode("latin-1")
        self.params = {k: v[0] for k, v in parse_qs(query).items()}
        self.server.params.append(self.params)
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

    def s_far_future_name(self) -> None:
        """A name in year 9999: taken, it would push the pointer past every real message."""
        self._binary(FAR_FUTURE, b"from the future")

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

    # --- batch fetches (multipart/mixed) ---------------------------------------------------
    def _multipart(
        self,
        parts: list[tuple[str, bytes]] | list[bytes],
        *,
        content_type: str = f"multipart/mixed; boundary={BOUNDARY}",
        epilogue: bytes = b"",
        hang_up: bool = False,
        **extra: str,
    ) -> None:
        """A batch reply; a part given as bytes is sent as it is (a broken part)."""
        body = b""
        for part in parts:
            if isinstance(part, bytes):
                body += part
                continue
            name, data = part
            body += (
                (
                    f"--{BOUNDARY}\r\nContent-Type: application/octet-stream\r\n"
                    f'Content-Disposition: attachment; filename="{name}"\r\n'
                    f"Content-Length: {len(data)}\r\n\r\n"
                ).encode()
                + data
                + b"\r\n"
            )
        body += f"--{BOUNDARY}--\r\n".encode() + epilogue
        named = [p[0] for p in parts if not isinstance(p, bytes)]
        headers = {"Content-Type": content_type, "X-ZOSCII-Count": str(len(parts)), **extra}
        if named:
            headers.setdefault("X-ZOSCII-Last", named[-1])
        if hang_up:  # the head promises more than comes
            self.send_response(200)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body) + 10_000))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self._hang_up()
            return
        self._reply(200, body, headers)

    def s_batch_boundary_in_body(self) -> None:
        inside = (
            f"\r\n--{BOUNDARY}\r\nContent-Disposition: attachment; "
            f'filename="{EARLIER}"\r\nContent-Length: 1\r\n\r\nx\r\n--{BOUNDARY}--\r\n'
        ).encode()
        self._multipart([(LATER, inside), (LATEST, b"second")])

    def s_batch_out_of_order(self) -> None:
        self._multipart([(LATEST, b"newest"), (LATER, b"older")])

    def s_batch_not_after_pointer(self) -> None:
        self._multipart([(POINTER, b"the pointer's own"), (LATER, b"fine")])

    def s_batch_same_name_twice(self) -> None:
        self._multipart([(LATER, b"one"), (LATER, b"again")])

    def s_batch_bad_part_name(self) -> None:
        self._multipart([("../../etc/passwd", b"root:x:0:0")])

    def s_batch_part_without_name(self) -> None:
        part = f"--{BOUNDARY}\r\nContent-Length: 3\r\n\r\nabc\r\n".encode()
        self._multipart([part])

    def s_batch_part_without_length(self) -> None:
        part = (
            f'--{BOUNDARY}\r\nContent-Disposition: attachment; filename="{LATER}"\r\n\r\nabc\r\n'
        ).encode()
        self._multipart([part])

    def s_batch_length_mismatch(self) -> None:
        part = (
            f'--{BOUNDARY}\r\nContent-Disposition: attachment; filename="{LATER}"\r\n'
            "Content-Length: 3\r\n\r\nabcde\r\n"
        ).encode()
        self._multipart([part])

    def s_batch_truncated(self) -> None:
        self._multipart([(LATER, b"a" * 5000), (LATEST, b"b" * 5000)], hang_up=True)

    def s_batch_too_many_parts(self) -> None:
        count = int(self.params.get("count", "1"))
        names = [
            f"2026010112{i // 60 % 60:02d}{i % 60:02d}0000-0007-{LATER[24:]}"
            for i in range(count + 1)
        ]
        self._multipart([(name, b"m") for name in names])

    def s_batch_count_mismatch(self) -> None:
        self._multipart([(LATER, b"a"), (LATEST, b"b")], **{"X-ZOSCII-Count": "3"})

    def s_batch_last_mismatch(self) -> None:
        self._multipart([(LATER, b"a"), (LATEST, b"b")], **{"X-ZOSCII-Last": LATER})

    def s_batch_no_boundary(self) -> None:
        self._multipart([(LATER, b"a")], content_type="multipart/mixed")

    def s_batch_other_boundary(self) -> None:
        self._multipart([(LATER, b"a")], content_type="multipart/mixed; boundary=something-else")

    def s_batch_empty(self) -> None:
        self._multipart([])

    def s_batch_epilogue(self) -> None:
        self._multipart([(LATER, b"a")], epilogue=b"and then some")

    def s_batch_too_large_part(self) -> None:
        part = (
            f'--{BOUNDARY}\r\nContent-Disposition: attachment; filename="{LATER}"\r\n'
            f"Content-Length: {50 << 20}\r\n\r\n"
        ).encode() + b"z" * 1000
        self._multipart([part])

    def s_batch_many_part_headers(self) -> None:
        padding = "".join(f"X-Padding-{i}: {'c' * 1000}\r\n" for i in range(80))
        part = (
            f'--{BOUNDARY}\r\nContent-Disposition: attachment; filename="{LATER}"\r\n'
            f"{padding}Content-Length: 1\r\n\r\nx\r\n"
        ).encode()
        self._multipart([part])

    def s_batch_long_line(self) -> None:
        part = f"--{BOUNDARY}\r\nX-Long: {'d' * 5000}\r\n".encode()
        self._multipart([part])
