"""What the endpoint learns about one request, in one typed object.

The access line is written by gunicorn's logger (``logs.ApiLogger``), which sees only the
WSGI environ, so the context travels in the environ under one key; every other reader
(metrics, the audit trail, nonces, long-poll waiting) gets it from there or is handed it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

KEY = "zoscii.context"


@dataclass(slots=True)
class RequestContext:
    request_id: str
    # A bounded label for metrics and the access line: an action of ACTIONS, "invalid"
    # (refused before one was known) or "none" (no action: the welcome text).
    action: str = "none"
    queue: str | None = None  # cleaned, once the checks have judged it
    client: str | None = None  # the credential's client: nonces are kept to their client
    admitted: tuple[str, str | None, str | None] | None = None  # (action, q, group) allowed
    waited: float = 0.0  # seconds spent in long polls: kept out of the latency histogram
    operator: str | None = None  # admin actions: who the admin check admitted
    address: str = "-"  # admin actions: the address the admin check saw

    def attach(self, environ: dict[str, Any]) -> RequestContext:
        environ[KEY] = self
        return self

    def label(self, action: str) -> None:
        """Record ``action`` unless an earlier step already named what happened."""
        if self.action == "none":
            self.action = action


def context_of(environ: Mapping[str, Any]) -> RequestContext:
    """The request's context (a blank one, request id "-", outside the endpoint: a test
    calling an action directly)."""
    context = environ.get(KEY)
    return context if context is not None else RequestContext("-")
