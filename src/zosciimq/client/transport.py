"""The HTTP session: connection reuse, retries on network errors only, and deadlines.

Timeouts on connect and on each socket read do not bound a request: a server that
drips one byte a second never trips a read timeout. So every request also runs under
an overall deadline: a timer that, when it fires, shuts down the sockets the request
is using, which wakes the blocked read. The connections register themselves when a
request is sent on them (urllib3 connection classes below), so the same holds for
header reads, body reads and urllib3's own retries.

Retries (urllib3 ``Retry`` via requests' ``HTTPAdapter``) cover connect errors and
requests that got no reply, for every method: publish and store carry a nonce, fetch,
retrieve and scan only read, identify is idempotent. HTTP statuses are never retried
here; they are answers.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.util.retry import Retry

from zosciimq.client.errors import DeadlineExceeded

_local = threading.local()


@dataclass(frozen=True)
class TransportOptions:
    connect_timeout: float = 5.0
    read_timeout: float = 60.0
    deadline: float | None = 600.0  # whole request including body; None: no limit
    retries: int = 3
    backoff_factor: float = 0.5  # 0.5 s, 1 s, 2 s, ... between attempts
    backoff_max: float = 30.0
    pool_size: int = 10
    verify: bool | str = True  # False, True or a CA bundle path
    user_agent: str = "zosciimq-client/1.0"


class Deadline:
    """A point in time after which the sockets of one request are shut down."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self._lock = threading.Lock()
        self._connections: list[HTTPConnection] = []
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True

    def start(self) -> None:
        self._timer.start()

    def cancel(self) -> None:
        self._timer.cancel()
        with self._lock:
            self._connections.clear()

    def register(self, connection: HTTPConnection) -> None:
        with self._lock:
            if self.expired:
                raise DeadlineExceeded(f"request took longer than {self.seconds:g} s")
            self._connections.append(connection)

    def check(self) -> None:
        if self.expired:
            raise DeadlineExceeded(f"request took longer than {self.seconds:g} s")

    def _fire(self) -> None:
        with self._lock:
            self.expired = True
            connections, self._connections = self._connections, []
        for connection in connections:
            sock = getattr(connection, "sock", None)
            if sock is None:
                continue
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@contextmanager
def deadline(seconds: float | None) -> Iterator[Deadline | None]:
    """Run the enclosed requests (and body reads) under one overall deadline."""
    if seconds is None:
        yield None
        return
    current = Deadline(seconds)
    previous = getattr(_local, "deadline", None)
    _local.deadline = current
    current.start()
    try:
        yield current
    finally:
        current.cancel()
        _local.deadline = previous


def _register(connection: HTTPConnection) -> None:
    current: Deadline | None = getattr(_local, "deadline", None)
    if current is not None:
        current.register(connection)


class _DeadlineMixin:
    """Registers the connection with the request's deadline, so it can be cut."""

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]
        _register(self)  # type: ignore[arg-type]

    def request(self, *args: Any, **kwargs: Any) -> None:
        _register(self)  # type: ignore[arg-type]
        super().request(*args, **kwargs)  # type: ignore[misc]


class _DeadlineHTTPConnection(_DeadlineMixin, HTTPConnection):
    pass


class _DeadlineHTTPSConnection(_DeadlineMixin, HTTPSConnection):
    pass


class _HTTPPool(HTTPConnectionPool):
    ConnectionCls = _DeadlineHTTPConnection


class _HTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _DeadlineHTTPSConnection


_POOLS = {"http": _HTTPPool, "https": _HTTPSPool}


class DeadlineAdapter(HTTPAdapter):
    """requests' adapter with connections that obey ``deadline()``."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = dict(_POOLS)

    def proxy_manager_for(self, proxy: str, **kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **kwargs)
        manager.pool_classes_by_scheme = dict(_POOLS)
        return manager


def network_retry(options: TransportOptions) -> Retry:
    """Retry connect errors and lost replies, never on a status, for all methods."""
    return Retry(
        total=options.retries,
        connect=options.retries,
        read=options.retries,
        status=0,
        other=0,
        redirect=False,
        allowed_methods=None,
        status_forcelist=(),
        backoff_factor=options.backoff_factor,
        backoff_max=options.backoff_max,
        raise_on_status=False,
        raise_on_redirect=False,
        respect_retry_after_header=False,
    )


def build_session(
    options: TransportOptions, headers: dict[str, str] | None = None
) -> requests.Session:
    session = requests.Session()
    adapter = DeadlineAdapter(
        max_retries=network_retry(options),
        pool_connections=options.pool_size,
        pool_maxsize=options.pool_size,
    )
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    session.verify = options.verify
    session.headers["User-Agent"] = options.user_agent
    # The body is the message: never let a proxy or server compress it behind our back.
    session.headers["Accept-Encoding"] = "identity"
    if headers:
        session.headers.update(headers)
    return session
