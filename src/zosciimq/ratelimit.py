"""Per-client request rate limit: a token bucket per client, off by default.

``ZOSCII_RATE_LIMIT`` requests per second (0, the default, switches it off) with bursts
of ``ZOSCII_RATE_BURST``. The client is the authenticated client's name when access
control is on, otherwise the remote address; ``X-Forwarded-For`` is believed only when
the peer is listed in ``ZOSCII_TRUSTED_PROXIES``, since anyone can send that header
(``zosciimq.addresses``, shared with the admin check and the access log).
A request with credentials that do not match is charged to its address, so guessing
tokens is rate limited too.

The buckets live in each gunicorn worker process, unshared: a client whose requests
are spread over N workers gets up to N times the rate. That is the price of needing no
shared state; ``SECURITY.md`` says so, and a proxy in front can enforce a global limit.

Memory is bounded: a bucket idle long enough to have refilled is indistinguishable from
a new one and is dropped, and beyond ``max_keys`` the least recently seen go first.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping

from zosciimq.access import AccessControl, Client
from zosciimq.addresses import ClientAddress
from zosciimq.errors import RateLimited, Unauthenticated


class TokenBuckets:
    """One bucket per key: ``burst`` tokens, refilled at ``rate`` per second."""

    def __init__(
        self,
        rate: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = 100_000,
    ) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be positive and burst at least 1")
        self.rate, self.burst, self.max_keys = rate, float(burst), max_keys
        self.clock = clock
        self._refill_seconds = burst / rate  # an empty bucket is full again after this
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key: tokens, when
        self._lock = threading.Lock()

    def take(self, key: str) -> float:
        """Take a token: 0.0 when there was one, else the seconds until there will be."""
        with self._lock:
            now = self.clock()
            tokens, stamp = self._buckets.pop(key, (self.burst, now))
            tokens = min(self.burst, tokens + (now - stamp) * self.rate)
            wait = 0.0
            if tokens >= 1:
                tokens -= 1
            else:
                wait = (1 - tokens) / self.rate
            self._buckets[key] = (tokens, now)  # most recently seen last
            self._evict(now)
            return wait

    def __len__(self) -> int:
        return len(self._buckets)

    def _evict(self, now: float) -> None:
        while self._buckets:
            key, (_, stamp) = next(iter(self._buckets.items()))
            if now - stamp < self._refill_seconds and len(self._buckets) <= self.max_keys:
                return
            del self._buckets[key]


class Admission:
    """Who is asking, and whether they may ask now: authentication, then the rate limit.

    Runs before the body is read, so a client over its rate costs one header parse.
    """

    def __init__(
        self,
        access: AccessControl,
        *,
        rate: float = 0.0,
        burst: int = 0,
        trusted_proxies: tuple[str, ...] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.access = access
        self.addresses = ClientAddress(trusted_proxies)
        self.buckets = (
            TokenBuckets(rate, burst or max(1, math.ceil(rate)), clock=clock) if rate > 0 else None
        )

    def admit(self, environ: Mapping[str, object], authorization: str | None) -> Client | None:
        if self.buckets is None:  # no rate limit (the default): no key to work out
            return self.access.authenticate(authorization)
        try:
            client = self.access.authenticate(authorization)
        except Unauthenticated:
            self._charge(f"address {self._address(environ)}")
            raise
        if client is not None:
            self._charge(f"client {client.name}")
        else:
            self._charge(f"address {self._address(environ)}")
        return client

    def _address(self, environ: Mapping[str, object]) -> str:
        return self.addresses.of_environ(environ)

    def _charge(self, key: str) -> None:
        if self.buckets is None:
            return
        wait = self.buckets.take(key)
        if wait > 0:
            raise RateLimited(
                f"Too many requests: at most {self.buckets.rate:g} per second.",
                retry_after=max(1, math.ceil(wait)),
            )
