"""HTTP operations as a client would do them: one keep-alive requests.Session per thread."""

from __future__ import annotations

from collections.abc import Iterator

import requests

from bench.harness import Operation, OperationFactory
from zosciimq.protocol import COUNT, LAST

RAW = {"Content-Type": "application/octet-stream"}
OK = b'"error":""'
TIMEOUT = 600


class BenchError(RuntimeError):
    """The api answered something other than what the benchmark asked for."""


class Sessions:
    """The sessions handed to client threads, closed together at the end."""

    def __init__(self) -> None:
        self._sessions: list[requests.Session] = []

    def new(self) -> requests.Session:
        session = requests.Session()
        self._sessions.append(session)
        return session

    def __enter__(self) -> Sessions:
        return self

    def __exit__(self, *exc: object) -> None:
        for session in self._sessions:
            session.close()


def publish_factory(
    sessions: Sessions, base_url: str, queue: str, payload: bytes
) -> OperationFactory:
    """Raw-body publish (``?action=publish&q=...``, application/octet-stream)."""
    url = f"{base_url}?action=publish&q={queue}"

    def factory(number: int) -> Operation:
        session = sessions.new()

        def publish() -> None:
            reply = session.post(url, data=payload, headers=RAW, timeout=TIMEOUT)
            if reply.status_code != 200 or OK not in reply.content:
                raise BenchError(f"publish failed: {reply.status_code} {reply.text[:300]}")

        return publish

    return factory


def healthz_factory(sessions: Sessions, base_url: str) -> OperationFactory:
    """GET /healthz: the smallest request the api answers (the HTTP floor)."""

    def factory(number: int) -> Operation:
        session = sessions.new()

        def healthz() -> None:
            reply = session.get(base_url + "healthz", timeout=TIMEOUT)
            if reply.status_code != 200:
                raise BenchError(f"healthz answered {reply.status_code}")

        return healthz

    return factory


def fetch(session: requests.Session, base_url: str, queue: str, after: str) -> tuple[str, bytes]:
    """One ``action=fetch&after=``: (name, body) of the next message, or ("", envelope)."""
    reply = session.get(
        base_url, params={"action": "fetch", "q": queue, "after": after}, timeout=TIMEOUT
    )
    if reply.status_code != 200:
        raise BenchError(f"fetch failed: {reply.status_code} {reply.text[:300]}")
    disposition = reply.headers.get("Content-Disposition", "")
    if not disposition:
        return "", reply.content
    return disposition.split('filename="', 1)[1].rstrip('"'), reply.content


def fetch_after_factory(
    sessions: Sessions, base_url: str, queue: str, after: str, expect: str
) -> OperationFactory:
    """The same fetch again and again (a latency sample): must answer ``expect``."""

    def factory(number: int) -> Operation:
        session = sessions.new()

        def fetch_one() -> None:
            name, _body = fetch(session, base_url, queue, after)
            if name != expect:
                raise BenchError(f"fetch after {after} gave {name or 'no message'}, not {expect}")

        return fetch_one

    return factory


def consume_factory(
    sessions: Sessions, base_url: str, queue: str, pointer: list[str]
) -> OperationFactory:
    """Fetch the message after ``pointer[0]`` and move the pointer on (one consumer)."""

    def factory(number: int) -> Operation:
        session = sessions.new()

        def consume_one() -> None:
            name, body = fetch(session, base_url, queue, pointer[0])
            if not name:
                raise BenchError(f"queue ended early after {pointer[0]}: {body[:200]!r}")
            pointer[0] = name

        return consume_one

    return factory


def batch_consume_factory(
    sessions: Sessions, base_url: str, queue: str, pointer: list[str], batch: int, got: list[int]
) -> OperationFactory:
    """One batch fetch (``count=``, multipart/mixed) after ``pointer[0]``; counts into ``got``."""

    def factory(number: int) -> Operation:
        session = sessions.new()
        params = {"action": "fetch", "q": queue, "count": str(batch)}

        def consume_batch() -> None:
            reply = session.get(base_url, params={**params, "after": pointer[0]}, timeout=TIMEOUT)
            last = reply.headers.get(LAST, "")
            if reply.status_code != 200 or not last:
                raise BenchError(f"batch fetch after {pointer[0]}: {reply.text[:200]}")
            got[0] += int(reply.headers[COUNT])
            pointer[0] = last

        return consume_batch

    return factory


class RepeatedBody:
    """``total`` bytes made of one block repeated: a streamed request body of known length.

    requests sends it with Content-Length (it has ``__len__``) in blocks of ``block``
    (it is iterable), so the client never holds more than one block.
    """

    def __init__(self, block: bytes, total: int) -> None:
        self.block, self.total = block, total

    def __len__(self) -> int:
        return self.total

    def __iter__(self) -> Iterator[bytes]:
        view, left = memoryview(self.block), self.total
        while left > 0:
            piece = view[: min(left, len(view))]
            left -= len(piece)
            yield piece
