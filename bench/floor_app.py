"""The floors: the least an app under the api's gunicorn settings can do per request.

Both read the whole body, as the api must, and answer the same 77-byte JSON envelope.
What the api costs beyond them (parameter parsing, the queue, the disk) is the api's
own; what they cost is gunicorn and the loopback, plus Flask for ``app``:

* ``app``: a Flask app, as the api was before its publish path was mounted before
  Flask; the floor of anything routed through Flask;
* ``raw_app``: a bare WSGI callable, the floor of any Python app under this server.

    gunicorn --worker-class zoscii_api.gunicorn_worker.ThreadWorker ... 'bench.floor_app:raw_app'
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from flask import Flask, Response, request

from zosciimq.protocol import envelope_bytes

ENVELOPE = envelope_bytes("", "ok", [])
HEADERS = [("Content-Type", "application/json"), ("Content-Length", str(len(ENVELOPE)))]

app = Flask(__name__)


@app.route("/", defaults={"path": ""}, methods=["GET", "POST", "PUT"])
@app.route("/<path:path>", methods=["GET", "POST", "PUT"])
def answer(path: str) -> Response:
    request.get_data()  # the body, read in full and dropped
    return Response(ENVELOPE, mimetype="application/json")


def raw_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """Any method, any path: the body read in full and dropped, the envelope answered."""
    environ["wsgi.input"].read()
    start_response("200 OK", HEADERS)
    return [ENVELOPE]
