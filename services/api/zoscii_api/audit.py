"""The audit trail of the admin actions: who did what to which queue, and what it changed.

Every admin action that reaches the admin check leaves one line in the logger
``zoscii_api.audit``, whatever the outcome: ``done`` (info, with what it changed:
messages and bytes removed, the pointer given), ``refused`` (warning: no or a wrong
credential, an address outside ZOSCII_ADMIN_ALLOW, GET where POST is needed, a web
page's request) or ``failed`` (info: the action's own error, a missing queue, a bad time).
"Who" is the credential's client name (``admin-token`` for the operator's token) and
the address (the forwarded one behind a trusted proxy, as in the access line). In JSON
each of those is a field of its own (``event`` = ``admin``), so a log pipeline can keep
the trail apart; ``zoscii_api_admin_actions_total{action,outcome}`` and
``zoscii_api_admin_removed_messages_total{action}`` count the same events.
"""

from __future__ import annotations

import logging
from typing import Any

from zoscii_api.context import RequestContext
from zoscii_api.metrics import ApiMetrics
from zosciimq.core.names import clean_queue
from zosciimq.errors import InvalidInput

log = logging.getLogger(__name__)

REMOVING = frozenset({"purge", "delete"})


def queue_label(raw: str | None) -> str | None:
    """The queue as the trail names it: cleaned, ``invalid`` for what is not a queue name
    (never the raw text: it would go into a log line), None when there is none."""
    if not raw:
        return None
    try:
        return clean_queue(raw)
    except InvalidInput:
        return "invalid"


class Audit:
    def __init__(self, metrics: ApiMetrics) -> None:
        self.metrics = metrics

    def done(
        self, context: RequestContext, action: str, queue: str | None, **result: Any
    ) -> None:
        removed = result.get("purged", result.get("messages", 0)) if action in REMOVING else 0
        self.metrics.admin_action(action, "done", removed=removed)
        self._line(logging.INFO, context, action, queue, "done", result)

    def failed(
        self, context: RequestContext, action: str, queue: str | None, error: str
    ) -> None:
        self.metrics.admin_action(action, "failed")
        self._line(logging.INFO, context, action, queue, "failed", {"error": error})

    def refused(
        self, context: RequestContext, action: str, queue: str | None, reason: str
    ) -> None:
        self.metrics.admin_action(action, "refused")
        self._line(logging.WARNING, context, action, queue, "refused", {"error": reason})

    def _line(
        self,
        level: int,
        context: RequestContext,
        action: str,
        queue: str | None,
        outcome: str,
        result: dict[str, Any],
    ) -> None:
        if "error" in result:  # it may quote what the client sent
            result = {**result, "error": _printable(result["error"])}
        client, address, request_id = context.operator or "-", context.address, context.request_id
        details = " ".join(f"{key}={_printable(value)}" for key, value in result.items())
        log.log(
            level,
            "admin %s %s %s by %s from %s: %s (request %s)",
            action,
            queue or "*",
            outcome,
            client,
            address,
            details,
            request_id,
            extra={
                "event": "admin",
                "action": action,
                "queue": queue,
                "outcome": outcome,
                "client": client,
                "address": address,
                "request_id": request_id,
                "result": result,
            },
        )


def _printable(value: object) -> str:
    """``value`` on one line: control characters escaped (an error may quote the request)."""
    text = str(value)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
