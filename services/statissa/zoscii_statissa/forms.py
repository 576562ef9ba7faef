"""Cross-site request forgery guards for the console's POST forms.

A browser resends Basic credentials (and, without access control, comes from the
operator's address) with any form another site makes it post here, so a POST that
changes something is accepted only when

* the browser says it comes from a page of this origin: ``Sec-Fetch-Site`` (when sent)
  is ``same-origin``, and ``Origin`` (or, without it, ``Referer``) names this host
  (the ``Host`` header: a proxy in front must pass it through; ``hosts`` has refused
  any name the operator did not configure, so a rebound DNS name cannot pass); neither
  header: refused, as every browser sends ``Origin`` with a POST;
* and it carries a token only this process issues: an HMAC over the action, the queue,
  the confirmed parameter and the caller's credentials, with the issuing time, under a
  key made when the app is built. Another site can make the browser post but cannot read
  the confirmation page that holds the token. Tokens are not stored: a restart (new key)
  or ``TOKEN_SECONDS`` make a form stale and the operator opens it again.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

TOKEN_SECONDS = 900


class FormTokens:
    def __init__(self, key: bytes | None = None, *, clock: Callable[[], float] = time.time) -> None:
        self._key = key if key is not None else secrets.token_bytes(32)
        self._clock = clock

    def issue(self, *fields: str) -> str:
        """A token for a form whose POST will carry exactly ``fields``."""
        issued = str(int(self._clock()))
        return f"{issued}.{self._mac(issued, fields)}"

    def valid(self, token: str, *fields: str) -> bool:
        issued, _, mac = token.partition(".")
        if not issued.isdigit() or not mac:
            return False
        age = self._clock() - int(issued)
        if not 0 <= age <= TOKEN_SECONDS + 1:
            return False
        return hmac.compare_digest(mac, self._mac(issued, fields))

    def _mac(self, issued: str, fields: tuple[str, ...]) -> str:
        message = "\0".join((issued, *fields)).encode("utf-8", "replace")
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()


def credential(authorization: str | None) -> str:
    """What binds a token to its caller: a hash of the credentials, never the secret."""
    return hashlib.sha256((authorization or "").encode("utf-8", "replace")).hexdigest()


def cross_site(environ: Mapping[str, Any]) -> str | None:
    """Why this POST is not from a page of this origin, or None when it is."""
    fetch_site = environ.get("HTTP_SEC_FETCH_SITE")
    if fetch_site is not None and fetch_site != "same-origin":
        return f"the browser says this form came from another site ({fetch_site})"
    host = str(environ.get("HTTP_HOST") or "").lower()
    origin = environ.get("HTTP_ORIGIN")
    source = origin if origin is not None else environ.get("HTTP_REFERER")
    if source is None:
        return "no Origin or Referer header: the console's forms are for browsers"
    try:
        netloc = urlsplit(str(source)).netloc.lower()
    except ValueError:
        netloc = ""
    if not host or netloc != host:
        return f"the form was sent from {str(source)[:100]!r}, not from this console ({host})"
    return None
