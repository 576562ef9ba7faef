"""The operators' actions over HTTP: queues, purge, delete, replay (PROTOCOL.md 3, "Admin actions").

Only parameters and replies here; the disk work is ``zosciimq.core.admin``. Who may call
them is decided before the handler runs (``AdminGate``, from ``Endpoint._admit``): a
credential always, since queue names are partners' capabilities and nothing may list
them to anyone else; every call leaves a line in the audit trail (``zoscii_api.audit``).

* ``queues`` (q?): every queue (or q) with messages, bytes, oldest and newest name and
  time, and its consumer groups with their lag (waiting + leased).
* ``purge`` (q, before?): the messages visible when it starts, or those published before
  ``before`` (ISO-8601 with a zone) or sorting before it (a message name).
* ``delete`` (q): the queue, its index and its consumer groups' state.
* ``replay`` (q, since): the pointer after which a fetch starts at ``since``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from werkzeug.wrappers import Request

from zoscii_api.audit import Audit, queue_label
from zoscii_api.context import RequestContext, context_of
from zoscii_api.params import RequestParams
from zoscii_api.responses import Answer, envelope
from zoscii_api.waiting import QueueWatcher
from zosciimq import addresses
from zosciimq.access import AccessControl, Client
from zosciimq.core.admin import QueueAdmin, QueueInfo, parse_utc
from zosciimq.errors import Forbidden, InvalidInput, PostRequired, ZosciiError

Handler = Callable[[Request, RequestParams], Answer]
POST_ONLY = frozenset({"purge", "delete", "replay"})


class AdminGate:
    """Who may run an admin action, checked in this order (the first failure answers and
    is written to the audit trail):

    1. purge, delete and replay by POST only (405): a link or an image another page
       shows cannot make a browser run them;
    2. not from a web page (403): a browser that was once given the token (Basic, in
       its prompt) sends it again with any form another site makes it post, and says
       so with ``Origin`` or ``Sec-Fetch-Site``. The CLI, the client library and the
       console's relay send neither;
    3. a credential: with access control on, the client's ``admin`` right (the
       operator's token has it); without, the operator's token itself
       (``ZOSCII_ADMIN_TOKEN_SHA256``), 401 without it;
    4. when ``ZOSCII_ADMIN_ALLOW`` is set, an address in it as well (403).
    """

    def __init__(
        self,
        access: AccessControl,
        allow: tuple[str, ...] | None,
        client_address: addresses.ClientAddress,
        audit: Audit,
    ) -> None:
        self.access = access
        self.allow = None if allow is None else addresses.networks(allow)
        self.client_address = client_address
        self.audit = audit

    def admit(
        self,
        environ: dict[str, Any],
        context: RequestContext,
        action: str,
        queue: str | None,
        client: Client | None,
    ) -> None:
        """Raises why ``action`` is refused; else notes who runs it (context) for the trail."""
        address = context.address = self.client_address.of_environ(environ) or "-"
        try:
            operator = self._check(environ, action, client, address)
        except ZosciiError as exc:
            self.audit.refused(context, action, queue, str(exc))
            raise
        context.operator = operator.name

    def _check(
        self, environ: dict[str, Any], action: str, client: Client | None, address: str
    ) -> Client:
        method = environ.get("REQUEST_METHOD", "GET")
        if action in POST_ONLY and method != "POST":
            raise PostRequired(f"Action '{action}' needs POST, not {method}.")
        site = environ.get("HTTP_SEC_FETCH_SITE")
        if environ.get("HTTP_ORIGIN") is not None or site not in (None, "none"):
            raise Forbidden(
                "Admin actions are not taken from web pages (the request has an Origin or "
                "Sec-Fetch-Site header): use the zoscii CLI or the console."
            )
        if client is None:  # access control off: the operator's token, or nothing
            client = self.access.authenticate_operator(environ.get("HTTP_AUTHORIZATION"))
        self.access.authorize(client, action)
        if self.allow is not None and not addresses.is_in(
            addresses.parse_address(address), self.allow
        ):
            raise Forbidden(
                f"Admin actions are allowed only from the addresses in ZOSCII_ADMIN_ALLOW, "
                f"not from {address}."
            )
        return client


@dataclass
class AdminActions:
    admin: QueueAdmin
    watcher: QueueWatcher
    audit: Audit

    def handlers(self) -> dict[str, Handler]:
        actions: dict[str, Handler] = {
            "queues": self.queues,
            "purge": self.purge,
            "delete": self.delete,
            "replay": self.replay,
        }
        return {name: self._audited(name, run) for name, run in actions.items()}

    def _audited(self, action: str, run: Handler) -> Handler:
        """``run``, with its failures in the audit trail (its success it writes itself,
        with what it changed)."""

        def handler(request: Request, params: RequestParams) -> Answer:
            try:
                return run(request, params)
            except ZosciiError as exc:
                queue = queue_label(params.text("q"))
                self.audit.failed(context_of(request.environ), action, queue, str(exc))
                raise

        return handler

    def queues(self, request: Request, params: RequestParams) -> Answer:
        only = params.text("q") or None
        found = self.admin.list_queues(only)
        self.audit.done(context_of(request.environ), "queues", queue_label(only), listed=len(found))
        return envelope(message=f"{len(found)} queue(s).", result=[_queue(q) for q in found])

    def purge(self, request: Request, params: RequestParams) -> Answer:
        queue = _queue_name(params)
        before = params.text("before") or None
        removed = self.admin.purge(queue, before)
        self.audit.done(
            context_of(request.environ),
            "purge",
            removed.queue,
            purged=removed.messages,
            bytes=removed.bytes,
            before=before,
        )
        return envelope(
            message=f"{removed.messages} message(s) purged.",
            result={
                "queue": removed.queue,
                "purged": removed.messages,
                "bytes": removed.bytes,
                "before": before,
            },
        )

    def delete(self, request: Request, params: RequestParams) -> Answer:
        removed = self.admin.delete(_queue_name(params))
        self.watcher.notify(removed.queue)  # long-polls see the end at once
        self.audit.done(
            context_of(request.environ),
            "delete",
            removed.queue,
            messages=removed.messages,
            bytes=removed.bytes,
            groups=",".join(removed.groups) or "-",
        )
        return envelope(
            message=f"Queue '{removed.queue}' deleted.",
            result={
                "queue": removed.queue,
                "messages": removed.messages,
                "bytes": removed.bytes,
                "groups": removed.groups,
            },
        )

    def replay(self, request: Request, params: RequestParams) -> Answer:
        queue = _queue_name(params)
        raw = params.text("since")
        if not raw:
            raise InvalidInput("Missing since (an ISO-8601 time with a zone).")
        replay = self.admin.replay_pointer(queue, parse_utc(raw))
        s = replay.since
        since = f"{s[0:4]}-{s[4:6]}-{s[6:8]}T{s[8:10]}:{s[10:12]}:{s[12:14]}Z"
        self.audit.done(
            context_of(request.environ),
            "replay",
            replay.queue,
            since=since,
            pointer=replay.pointer or '""',
            waiting=replay.waiting,
        )
        return envelope(
            message="Fetch after this pointer to replay from that time.",
            result={
                "queue": replay.queue,
                "since": since,
                "pointer": replay.pointer,
                "first": replay.first,
                "waiting": replay.waiting,
            },
        )


def _queue_name(params: RequestParams) -> str:
    queue = params.text("q")
    if not queue:
        raise InvalidInput("Missing queue (q).")
    return queue


def _queue(info: QueueInfo) -> dict[str, Any]:
    return {
        "queue": info.name,
        "messages": info.messages,
        "bytes": info.bytes,
        "oldest": info.oldest,
        "oldest_at": info.oldest_at,
        "newest": info.newest,
        "newest_at": info.newest_at,
        "groups": [
            {
                "group": g.name,
                "lag": g.lag,
                "waiting": g.waiting,
                "leased": g.leased,
                "acked": g.acked,
                "dead_lettered": g.dead_lettered,
                "oldest_unacked": g.oldest_unacked,
            }
            for g in info.groups
        ],
    }
