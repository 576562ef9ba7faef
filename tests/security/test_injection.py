"""Traversal and injection attempts in every parameter, by every way of sending one.

Each hostile value goes into one parameter of an action that reads it, the other
parameters valid, sent four ways (GET query, urlencoded body, multipart body, query with
a raw body). Every answer must be a 4xx envelope, and afterwards nothing may have
changed anywhere under the test's directory: not the data directory (no queue, store
file, nonce or upload) and not the bait directory beside it that ``..`` would reach.

Then what only the HTTP layer sees, against real gunicorn over a socket: raw NUL and
CR/LF in the request line and headers, traversal in the path, oversized request
lines, headers and header counts.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path
from urllib.parse import quote_from_bytes

import pytest

from tests.api_fuzz.helpers import make_app
from tests.security.figures import TALLY
from tests.security.rawhttp import exchange
from tests.support.volumes import tree

FIELD_LIMIT = 4096

PATHS = [
    "../outside",
    "../../outside/pwn",
    "..",
    ".",
    "/",
    "/etc/passwd",
    "..\\outside",
    "a/../../outside",
    "queues/../../outside",
    "./temp",
    "..%2Foutside",
    "..%252Foutside",
    "%2e%2e%2foutside",
    "~/x",
    "\\\\server\\share",
    "file:///etc/passwd",
]
INJECTIONS = [
    "a\x00b",
    "q\x00/../../outside",
    "a\r\nX-Injected: yes",
    "a\nb",
    "a\rb",
    "a\tb",
    "a b",
    "'; rm -rf / #",
    "$(touch ../outside/pwn)",
    "`id`",
    "a;b",
    "a|b",
    "<script>alert(1)</script>",
    '"quoted"',
    "a%00b",
    "*",
    "a*",
    "[a-z]",
]
LOOKALIKES = [
    "\uff51\uff55\uff45\uff55\uff45",  # fullwidth "queue"
    "q\u2215outside",  # division slash
    "q\u2044outside",  # fraction slash
    "q\uff0foutside",  # fullwidth solidus
    "\u202eeueuq",  # right-to-left override
    "q\u0131",  # dotless i
    "\u212a",  # Kelvin sign: lowercases to k
    "q\u200bx",  # zero-width space
    "é",
]
RAW_BYTES = [b"\xff\xfe", b"\xc0\xaf", b"..\xc0\xafoutside", b"\xe2\x88\x95"]
LONG = ["a" * 129, "a" * 5000, "a" * (FIELD_LIMIT + 1)]
TEXT_VALUES: list[bytes] = [
    v.encode() for v in [*PATHS, *INJECTIONS, *LOOKALIKES, *LONG]
] + RAW_BYTES
NUMBER_VALUES: list[bytes] = [
    v.encode()
    for v in [
        "-1",
        "+1",
        " 1",
        "1 ",
        "1.5",
        "1e3",
        "0x10",
        "abc",
        "١٢",  # Arabic-Indic digits: str.isdigit() says yes
        "²",  # superscript two: so does it here
        "99999999999999999999",
        "1\x00",
        "1\r\n",
        "\uff11",  # fullwidth one
    ]
] + TEXT_VALUES

SEEDED_QUEUE = "seeded"


def cases(store_name: str) -> list[tuple[str, dict[str, bytes], str]]:
    """(parameter, the valid rest of the request, kind of values) for every parameter."""
    fetch = {"action": b"fetch", "q": SEEDED_QUEUE.encode()}
    retrieve = {"action": b"retrieve", "name": store_name.encode()}
    publish = {"action": b"publish", "q": b"fresh", "msg": b"hello"}
    store = {"action": b"store", "msg": b"hello"}
    return [
        ("action", {"q": b"fresh", "msg": b"x"}, "text"),
        ("q", {"action": b"publish", "msg": b"x"}, "text"),
        ("q", {"action": b"fetch"}, "text"),
        ("n", publish, "text"),
        ("n", store, "text"),
        ("r", publish, "number"),
        ("r", store, "number"),
        ("u", store, "number"),
        ("after", fetch, "text"),
        ("offset", fetch, "number"),
        ("length", fetch, "number"),
        ("count", fetch, "number"),
        ("wait", fetch, "number"),
        ("max_bytes", fetch, "number"),
        ("name", {"action": b"retrieve"}, "text"),
        ("offset", retrieve, "number"),
        ("length", retrieve, "number"),
        ("names", {"action": b"identify"}, "names"),
    ]


def names_values() -> list[bytes]:
    hostile = [v.decode("utf-8", "replace") for v in TEXT_VALUES]
    lists = [json.dumps([v]) for v in hostile]
    malformed = ['["a"', "{}", '{"a": 1}', "[1, 2]", "[[]]", "null", "not json", "[" * 100_000]
    return [v.encode() for v in lists + malformed]


def urlencode(fields: dict[str, bytes]) -> bytes:
    return "&".join(f"{k}={quote_from_bytes(v, safe='')}" for k, v in fields.items()).encode()


def multipart(fields: dict[str, bytes]) -> tuple[bytes, str]:
    boundary = f"b-{uuid.uuid4().hex}"
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n'.encode() + v + b"\r\n"
        for k, v in fields.items()
    ]
    return b"".join(parts) + f"--{boundary}--\r\n".encode(), boundary


def send(client, transport: str, fields: dict[str, bytes]):
    if transport == "get":
        return client.get("/?" + urlencode(fields).decode())
    if transport == "urlencoded":
        return client.post(
            "/", data=urlencode(fields), content_type="application/x-www-form-urlencoded"
        )
    if transport == "multipart":
        body, boundary = multipart(fields)
        return client.post("/", data=body, content_type=f"multipart/form-data; boundary={boundary}")
    message = fields.pop("msg", b"raw body")
    return client.post(
        "/?" + urlencode(fields).decode(), data=message, content_type="application/octet-stream"
    )


@pytest.fixture
def world(tmp_path: Path):
    """A data directory with a queue and a stored message, and bait beside it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "bait").write_bytes(b"do not touch")
    data_dir = tmp_path / "data"
    client = make_app(data_dir, max_field_bytes=FIELD_LIMIT).test_client()
    assert client.get(f"/?action=publish&q={SEEDED_QUEUE}&msg=seed").status_code == 200
    stored = client.get("/?action=store&msg=seed").get_json()["result"]
    return tmp_path, client, stored


@pytest.mark.parametrize("transport", ["get", "urlencoded", "multipart", "raw"])
def test_hostile_values_in_every_parameter(world, transport: str) -> None:
    root, client, store_name = world
    before = tree(root)
    tried = 0
    failures = []
    statuses: Counter[int] = Counter()
    for parameter, rest, kind in cases(store_name):
        values = {"text": TEXT_VALUES, "number": NUMBER_VALUES, "names": names_values()}[kind]
        for value in values:
            if parameter == "names" and transport == "get" and len(value) > 50_000:
                continue  # over any URL limit: the body transports carry it
            fields = dict(rest) | {parameter: value}
            reply = send(client, transport, fields)
            tried += 1
            statuses[reply.status_code] += 1
            body = reply.get_json(silent=True) or {}
            if not (400 <= reply.status_code < 500 and body.get("error")):
                failures.append((parameter, value[:60], reply.status_code, reply.data[:120]))
    TALLY["injection: requests tried"] += tried
    print(f"{transport}: {tried} requests, statuses {dict(statuses)}")
    assert failures == [], failures[:20]
    assert tree(root) == before, "something was written"


def test_hostile_parameter_names_and_file_names(world) -> None:
    root, client, _ = world
    before = tree(root)
    tried = 0
    for query in [
        "action=fetch&q%00=seeded",
        "action=fetch&..%2Fq=seeded",
        "action=fetch&" + "k" * 65 + "=1",  # parameter names are short
        "action=fetch&q=seeded&q=../outside",  # the last one counts, and is refused
        "action=publish&q=fresh&q=..%2Foutside&msg=x",
        "action=fetch&%C0%AF=1&q=..",
    ]:
        reply = client.get("/?" + query)
        tried += 1
        assert 400 <= reply.status_code < 500 and reply.get_json()["error"], query
    assert tree(root) == before
    # a multipart file name is never used as a path: the message gets its own name
    boundary = "b-fixed"
    body = (
        f"--{boundary}\r\n"
        'Content-Disposition: form-data; name="msg"; filename="../../outside/pwn"\r\n'
        "Content-Type: application/octet-stream\r\n\r\nPAYLOAD\r\n"
        f"--{boundary}--\r\n"
    ).encode()
    reply = client.post(
        "/?action=publish&q=uploads",
        data=body,
        content_type=f"multipart/form-data; boundary={boundary}",
    )
    tried += 1
    assert reply.status_code == 200
    assert sorted(p.name for p in (root / "outside").iterdir()) == ["bait"]
    fetched = client.get("/?action=fetch&q=uploads")
    assert fetched.data == b"PAYLOAD" and "pwn" not in fetched.headers["Content-Disposition"]
    TALLY["injection: requests tried"] += tried


RAW_REQUESTS = [
    b"GET /../../outside/bait HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /%2e%2e/%2e%2e/outside/bait HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /index.php/../../outside HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /?action=fetch&q=see\x00ded HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /?action=fetch&q=a\rX-Injected: 1 HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /?action=fetch&q=seeded HTTP/1.1\r\nHost: x\r\nX-Bad: a\x00b\r\n\r\n",
    b"GET /?action=fetch&q=seeded HTTP/1.1\r\nHost: x\r\nX-Bad: a\rb\r\n\r\n",
    b"GET /?action=fetch&q=seeded HTTP/1.1\r\nHost: x\r\nX-Bad\r\n\r\n",
    b"GET /?action=fetch&q=seeded HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",  # request smuggling
    b"GET /?action=fetch&q=seeded HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n"
    b"Content-Length: 2\r\n\r\nab",
    b"GET /?" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",  # request line over 8190
    b"GET /?action=scan HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 9000 + b"\r\n\r\n",
    b"GET /?action=scan HTTP/1.1\r\nHost: x\r\n"
    + b"".join(b"X-H%d: v\r\n" % i for i in range(150))
    + b"\r\n",  # more than 100 header fields
    b"GET /?action=fetch&q=..%2F..%2Foutside HTTP/1.1\r\nHost: x\r\n\r\n",
    b"POST /?action=publish&q=..%2Foutside HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
    b"Content-Type: application/octet-stream\r\n\r\nabc",
    b"GET /?action=retrieve&name=..%2F..%2F..%2Foutside%2Fbait HTTP/1.1\r\nHost: x\r\n\r\n",
]


def test_raw_http_against_gunicorn(tmp_path: Path, servers) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "bait").write_bytes(b"do not touch")
    server = servers(tmp_path / "data", workers=1)
    exchange(server.port, b"GET /?action=publish&q=seeded&msg=s HTTP/1.1\r\nHost: x\r\n\r\n")
    before = tree(tmp_path)
    statuses = []
    for request in RAW_REQUESTS:
        reply = exchange(server.port, request)
        statuses.append(reply.status)
        assert 400 <= reply.status < 500, (request[:80], reply.raw[:200])
        assert b"do not touch" not in reply.raw
        assert b"X-Injected" not in reply.raw.partition(b"\r\n\r\n")[0]
    TALLY["injection: requests tried"] += len(RAW_REQUESTS)
    assert tree(tmp_path) == before
    print("raw request statuses:", statuses)
