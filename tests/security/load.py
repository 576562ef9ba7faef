"""Concurrent publishing that survives crashes, and the check of what a consumer sees.

Every message is numbered and carries a nonce, and a publisher retries it (connection
refused, reset, 5xx) until the api acknowledges it: "Message published." or "Nonce
already used." (an earlier attempt had landed, its reply was lost). So after any number
of kill -9, every message must be in the queue exactly once, and each acknowledgement
is a promise the check holds the server to.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import requests

from zosciimq.client.client import ZosciiClient

ACKS = frozenset({"Message published.", "Nonce already used."})


def payload(tag: str, number: int) -> bytes:
    """Up to 4 KiB of bytes of every value, different for every message."""
    seed = hashlib.sha256(f"{tag}:{number}".encode()).digest()
    size = int.from_bytes(seed[:2], "big") % 4096
    return seed + bytes((seed[i % 32] + i) % 256 for i in range(size))


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class PublishLoad:
    """``threads`` publishers sharing numbers 0..total-1 of one queue."""

    def __init__(
        self, url_of: Callable[[], str], queue: str, total: int, *, threads: int = 8, tag: str
    ) -> None:
        self.url_of, self.queue, self.total, self.tag = url_of, queue, total, tag
        self.acked: dict[int, str] = {}  # number: sha256 of the acknowledged body
        self.retries = 0
        self._numbers = itertools.count()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def start(self) -> PublishLoad:
        for thread in self._threads:
            thread.start()
        return self

    def join(self, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        assert not any(t.is_alive() for t in self._threads), "publishers did not finish"

    def wait_for(self, acknowledged: int, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while len(self.acked) < acknowledged:
            assert time.monotonic() < deadline, f"only {len(self.acked)} acknowledged"
            time.sleep(0.002)

    def _run(self) -> None:
        session = requests.Session()
        while (number := next(self._numbers)) < self.total:
            body = payload(self.tag, number)
            params = {"action": "publish", "q": self.queue, "n": f"{self.tag}-{number}"}
            while True:
                try:
                    reply = session.post(
                        self.url_of(),
                        params=params,
                        data=body,
                        headers={"Content-Type": "application/octet-stream"},
                        timeout=30,
                    )
                    if reply.status_code == 200 and reply.json()["message"] in ACKS:
                        with self._lock:
                            self.acked[number] = digest(body)
                        break
                except (requests.RequestException, ValueError):
                    session = requests.Session()  # the server went away: new connections
                with self._lock:
                    self.retries += 1
                time.sleep(0.02)


@dataclass
class Check:
    """What a consumer following the queue by pointer found, against the promises."""

    names: list[str] = field(default_factory=list)
    found: Counter[str] = field(default_factory=Counter)  # sha256: times seen
    lost: list[int] = field(default_factory=list)
    duplicated: list[int] = field(default_factory=list)
    strangers: int = 0  # bodies that are no message of the load at all
    unfetchable: list[str] = field(default_factory=list)  # in the directory, not served


def check(url: str, load: PublishLoad, queue_dir: Path) -> Check:
    result = Check()
    expected = {digest(payload(load.tag, n)): n for n in range(load.total)}
    with ZosciiClient(url) as client:
        after = ""
        while batch := client.fetch_batch(load.queue, after, count=1000):
            for message in batch:
                result.names.append(message.name)
                result.found[digest(message.data)] += 1
            after = batch[-1].name
    for sha in result.found:
        if sha not in expected:
            result.strangers += 1
    result.lost = [n for n, sha in load.acked.items() if result.found[sha] == 0]
    result.duplicated = [expected[s] for s, times in result.found.items() if times > 1]
    served = set(result.names)
    result.unfetchable = sorted(
        p.name for p in queue_dir.iterdir() if p.name.endswith(".bin") and p.name not in served
    )
    return result
