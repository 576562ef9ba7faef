"""The operators' actions over HTTP: queues, purge, delete, replay (PROTOCOL.md 3, "Admin actions").

Only parameters and replies here; the disk work is ``zosciimq.core.admin``. Who may call
them is decided before the handler runs (``Endpoint._admit``): with access control on,
clients with the ``admin`` right; without, peers in ``ZOSCII_ADMIN_ALLOW`` only, since
queue names are partners' capabilities and nothing may list them to anyone else.

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

from zoscii_api import addresses
from zoscii_api.params import RequestParams
from zoscii_api.responses import Answer, envelope
from zoscii_api.waiting import QueueWatcher
from zosciimq.core.admin import QueueAdmin, QueueInfo, parse_utc
from zosciimq.errors import Forbidden, InvalidInput


class AdminAllow:
    """The peers that may call the admin actions when access control is off."""

    def __init__(self, networks: tuple[str, ...]) -> None:
        self.networks = addresses.networks(networks)

    def check(self, address: str) -> None:
        """Raises Forbidden unless ``address`` (``ClientAddress.of``) is allowed; an
        IPv4-mapped IPv6 peer (a dual-stack socket) counts as its IPv4 address."""
        if not addresses.is_in(addresses.parse_address(address), self.networks):
            raise Forbidden(
                "Admin actions are allowed only from the addresses in ZOSCII_ADMIN_ALLOW "
                "(or, with access control on, to clients with the 'admin' right)."
            )


@dataclass
class AdminActions:
    admin: QueueAdmin
    watcher: QueueWatcher

    def handlers(self) -> dict[str, Callable[[Request, RequestParams], Answer]]:
        return {
            "queues": self.queues,
            "purge": self.purge,
            "delete": self.delete,
            "replay": self.replay,
        }

    def queues(self, request: Request, params: RequestParams) -> Answer:
        only = params.text("q") or None
        found = self.admin.list_queues(only)
        return envelope(message=f"{len(found)} queue(s).", result=[_queue(q) for q in found])

    def purge(self, request: Request, params: RequestParams) -> Answer:
        queue = _queue_name(params)
        before = params.text("before") or None
        removed = self.admin.purge(queue, before)
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
        return envelope(
            message="Fetch after this pointer to replay from that time.",
            result={
                "queue": replay.queue,
                "since": f"{s[0:4]}-{s[4:6]}-{s[6:8]}T{s[8:10]}:{s[10:12]}:{s[12:14]}Z",
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
