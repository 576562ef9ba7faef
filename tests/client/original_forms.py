"""The fake original server, also reading multipart forms as PHP does, and honouring ``n``.

PHP fills ``$_REQUEST``/``$_FILES`` from a ``multipart/form-data`` body too; several file
fields of the same name (``msg``) leave only the last one. The original knows nothing of
``batch=1`` or of part headers: given a batch it publishes the last message, with the
request's ``r`` and ``n``, and answers a plain "Message published." with ``result: []``.
``parts`` records how many ``msg`` parts each request carried.
"""

from __future__ import annotations

from email.message import Message as _MimeHeaders
from urllib.parse import urlsplit

from tests.replikate.fake_original import FakeOriginalServer, _Handler, parse_form


class FormsOriginal(FakeOriginalServer):
    def __init__(self) -> None:
        super().__init__()
        self.RequestHandlerClass = _FormsHandler
        self.nonces: set[bytes] = set()
        self.parts: list[int] = []  # msg parts per request, in order
        self.queries: list[dict[bytes, bytes]] = []  # the query string of each request

    def stored(self, queue: str) -> list[tuple[str, bytes]]:
        """(name, bytes) in the order they were published (names sort by random GUID)."""
        with self.lock:
            return list(self.queues.get(queue, {}).items())


class _FormsHandler(_Handler):
    server: FormsOriginal

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        content_type = self.headers.get("Content-Type", "")
        query = parse_form(urlsplit(self.path).query.encode("latin-1"))
        params = dict(query)
        parts = 0
        if content_type.startswith("application/x-www-form-urlencoded"):
            params.update(parse_form(body))
        elif content_type.startswith("multipart/form-data"):
            fields, files = _multipart(body, content_type)
            params.update(fields)
            parts = len(files)
            if files:
                params[b"msg"] = files[-1]  # the last file field of a name wins
        self.server.requests.append((self.command, content_type, params))
        self.server.parts.append(parts)
        self.server.queries.append(query)
        action = params.get(b"action", b"")
        if action == b"publish":
            nonce = params.get(b"n", b"")
            if nonce and nonce in self.server.nonces:
                return self._envelope(message="Nonce already used.")
            queue = params.get(b"q", b"").decode().lower()
            self.server.add(queue, params.get(b"msg", b""), int(params.get(b"r", b"0") or 0))
            if nonce:
                self.server.nonces.add(nonce)
            return self._envelope(message="Message published.")
        if action == b"fetch":
            return self._fetch(params)
        return self._envelope(error="Invalid action.")


def _multipart(body: bytes, content_type: str) -> tuple[dict[bytes, bytes], list[bytes]]:
    """Form fields and the ``msg`` file contents, in order (a plain, strict splitter)."""
    headers = _MimeHeaders()
    headers["Content-Type"] = content_type
    boundary = headers.get_param("boundary")
    assert isinstance(boundary, str)
    delimiter = b"\r\n--" + boundary.encode()
    chunks = (b"\r\n" + body).split(delimiter)
    assert chunks[0] == b"" and chunks[-1] == b"--\r\n", "not a well-formed multipart body"
    fields: dict[bytes, bytes] = {}
    files: list[bytes] = []
    for chunk in chunks[1:-1]:
        head, _, data = chunk[2:].partition(b"\r\n\r\n")
        part = _MimeHeaders()
        for line in head.split(b"\r\n"):
            key, _, value = line.decode("latin-1").partition(":")
            part[key.strip()] = value.strip()
        name = part.get_param("name", header="content-disposition")
        if part.get_param("filename", header="content-disposition") is not None:
            if name == "msg":
                files.append(data)
        elif isinstance(name, str):
            fields[name.encode()] = data
    return fields, files
