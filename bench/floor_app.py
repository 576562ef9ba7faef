"""The floor: the least a Flask app under the api's gunicorn settings can do per request.

It reads the whole body, as the api must, and answers a small JSON envelope. Anything
the api costs beyond this (parameter parsing, the queue, the disk) is the api's own;
what this costs is gunicorn, Flask and the loopback, which no rewrite of the api removes.

    gunicorn --worker-class gthread ... 'bench.floor_app:app'
"""

from __future__ import annotations

from flask import Flask, Response, request

ENVELOPE = b'{"system":"ZOSCII MQ","version":"1.0","error":"","message":"ok","result":[]}\n'

app = Flask(__name__)


@app.route("/", defaults={"path": ""}, methods=["GET", "POST", "PUT"])
@app.route("/<path:path>", methods=["GET", "POST", "PUT"])
def answer(path: str) -> Response:
    request.get_data()  # the body, read in full and dropped
    return Response(ENVELOPE, mimetype="application/json")
