"""CORS: which web pages of other origins may read the api's and the live service's
answers (``ZOSCII_CORS_ORIGINS``, off by default).

A browser sends ``Origin`` with a cross-origin request and hides the answer from the
page unless the answer names that origin in ``Access-Control-Allow-Origin``. Nothing
here grants a right: access control still decides who may read a queue (a page sends
``Authorization`` like any client, or ``access_token`` on a stream, which EventSource
and WebSocket cannot send headers for). No credentials mode (cookies): the api has none.

The listed origins are exact (``https://console.example.com``, scheme, host and port as
the browser writes them); ``*`` allows every origin.
"""

from __future__ import annotations

from collections.abc import Mapping

from zosciimq.protocol import REPLY_HEADERS
from zosciimq.settings import SettingsError

ALLOWED_METHODS = "GET, POST, HEAD"
ALLOWED_HEADERS = "Authorization, Content-Type, Last-Event-ID, X-Request-ID"
# What a page's script may read of an answer, besides the simple headers.
_BEFORE = ("Content-Disposition", "Content-Length", "X-Request-ID")
EXPOSED_HEADERS = ", ".join((*_BEFORE, *REPLY_HEADERS, "Retry-After", "Accept-Post"))
MAX_AGE_SECONDS = "600"


def parse_origins(raw: str) -> tuple[str, ...]:
    """``ZOSCII_CORS_ORIGINS``: a comma-separated list of origins, or ``*``."""
    origins = tuple(item.strip().rstrip("/") for item in raw.split(",") if item.strip())
    for origin in origins:
        scheme, sep, rest = origin.partition("://")
        if origin != "*" and (
            scheme not in ("http", "https") or not sep or not rest or "/" in rest
        ):
            raise SettingsError(
                f"ZOSCII_CORS_ORIGINS: {origin!r} is not an origin (scheme://host[:port]) or *"
            )
    return origins


class Cors:
    """The CORS headers of an answer to a request from ``origin``."""

    def __init__(self, origins: tuple[str, ...]) -> None:
        self.any = "*" in origins
        self.origins = frozenset(origins)

    @property
    def enabled(self) -> bool:
        return self.any or bool(self.origins)

    def allows(self, origin: str | None) -> bool:
        return bool(origin) and (self.any or origin in self.origins)

    def headers(self, origin: str | None) -> dict[str, str]:
        """For an actual request: empty unless ``origin`` is allowed."""
        if not self.allows(origin):
            return {"Vary": "Origin"} if self.origins else {}
        assert origin is not None
        return {
            "Access-Control-Allow-Origin": "*" if self.any else origin,
            "Access-Control-Expose-Headers": EXPOSED_HEADERS,
            "Vary": "Origin",
        }

    def preflight(self, request_headers: Mapping[str, str]) -> dict[str, str] | None:
        """For an ``OPTIONS`` preflight (header names lower-case): the answer's headers,
        or None when the origin is not allowed (then the answer grants nothing)."""
        origin = request_headers.get("origin")
        if not self.allows(origin):
            return None
        return {
            **self.headers(origin),
            "Access-Control-Allow-Methods": ALLOWED_METHODS,
            "Access-Control-Allow-Headers": ALLOWED_HEADERS,
            "Access-Control-Max-Age": MAX_AGE_SECONDS,
        }
