"""The names the console answers to, against DNS rebinding.

A page on ``evil.example`` can make its own name resolve to this host (DNS rebinding);
the browser then treats the console as that site: it reads the pages (queue names,
figures, messages) and posts forms whose ``Origin`` matches the ``Host`` it sends,
``evil.example`` (issue 27). So every request but /healthz and /metrics must name the
console by a name the operator configured, ``ZOSCII_STATISSA_PUBLIC_ORIGINS``
(``https://console.example.com``), or by one that no other site can take: an IP address
or ``localhost``.
Anything else is answered 421 (Misdirected Request). With the ``Host`` known to be the
console's, the CSRF check of the forms (``forms.cross_site``: ``Origin`` = ``Host``)
holds.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

OPEN_PATHS = frozenset({"/healthz", "/metrics"})  # orchestrators and Prometheus, no browser


def origin_netloc(origin: str) -> str:
    """``host[:port]`` of ``scheme://host[:port]``, lower case (ValueError if not one)."""
    parts = urlsplit(origin.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.path not in ("", "/"):
        raise ValueError(origin)
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError(origin)
    return parts.netloc.lower()


class KnownHosts:
    def __init__(self, public_origins: Iterable[str] = ()) -> None:
        self.origins = tuple(public_origins)
        self.netlocs = frozenset(origin_netloc(o) for o in self.origins)

    def refusal(self, environ: Mapping[str, Any]) -> str | None:
        """Why this request's ``Host`` is not the console's, or None when it is."""
        if environ.get("PATH_INFO") in OPEN_PATHS:
            return None
        host = str(environ.get("HTTP_HOST") or "").strip().lower()
        if host in self.netlocs or _unclaimable(host):
            return None
        configured = ", ".join(self.origins) or "none configured"
        return (
            f"This console answers to its IP addresses, localhost and "
            f"ZOSCII_STATISSA_PUBLIC_ORIGINS ({configured}), not to {host[:100]!r}."
        )


def _unclaimable(host: str) -> bool:
    """An IP address or a loopback name: no other site can make a browser send it."""
    name = host
    if host.startswith("["):  # [v6]:port
        name = host[1 : host.find("]")] if "]" in host else ""
    elif host.count(":") == 1:
        name, _, port = host.partition(":")
        if not port.isdigit():
            return False
    if not name:
        return False
    if name == "localhost":
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True
