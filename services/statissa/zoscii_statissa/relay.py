"""The console's admin actions, relayed to the api as the operator's own requests.

Why a relay and not ``zosciimq.core.admin`` called here: purge and delete are writes,
and the api is the one writer with the rules around them: the admin right (access
control) or ``ZOSCII_ADMIN_ALLOW``, ``ZOSCII_ACTIONS``, read-only mode, long-polls
woken when a queue is deleted, its log and metrics. Calling the core from statissa
would make a second writer that has to copy every one of those rules and would drift
from them; statissa also runs with a read-only mount in some deployments. So statissa
grants nothing itself: each action is the api's admin action (PROTOCOL.md, "Admin
actions") sent through the project's client with

* the operator's ``Authorization`` header as the browser sent it to statissa (the same
  clients file serves both), so with access control on the api checks *their* ``admin``
  right;
* ``X-Forwarded-For`` set to the peer statissa saw (never a header the browser sent,
  which it could forge), so without access control the api applies
  ``ZOSCII_ADMIN_ALLOW`` to the operator's address when statissa is in its
  ``ZOSCII_TRUSTED_PROXIES``, and to statissa's own address otherwise.

Whatever the api answers (403, 404, 400...) is shown as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from zosciimq.client import ZosciiClient
from zosciimq.client.errors import (
    ProtocolError,
    ServerError,
    TransportError,
    ZosciiClientError,
)
from zosciimq.client.transport import TransportOptions

PROBE_SECONDS = 3.0  # the queue page's question "may this caller use admin actions?"
USER_AGENT = "zoscii-statissa-console/1.0"

T = TypeVar("T")


@dataclass(frozen=True)
class Caller:
    """Who asks, as the api must see them."""

    authorization: str | None
    address: str

    @classmethod
    def of(cls, environ: Mapping[str, Any]) -> Caller:
        return cls(environ.get("HTTP_AUTHORIZATION"), str(environ.get("REMOTE_ADDR") or ""))

    def headers(self) -> dict[str, str]:
        headers = {"X-Forwarded-For": self.address} if self.address else {}
        if self.authorization:
            headers["Authorization"] = self.authorization
        return headers


class RelayError(Exception):
    """The api refused or could not be asked; ``status`` is its HTTP status (502: no
    usable answer)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class ApiRelay:
    url: str
    timeout: float = 120.0

    def check(self, caller: Caller, queue: str) -> None:
        """Raises unless the api lets ``caller`` use the admin actions on ``queue``.

        Asked with the cheapest admin action, a replay from now: a few index reads on
        the api, nothing written, no directory listed.
        """
        self._relay(caller, PROBE_SECONDS, lambda c: c.replay(queue, datetime.now(UTC)))

    def queue(self, caller: Caller, queue: str) -> dict[str, Any]:
        """The api's figures of ``queue`` now (messages, bytes, oldest, newest...)."""
        found = self._relay(caller, PROBE_SECONDS * 3, lambda c: c.queues(queue))
        if not found or not isinstance(found[0], dict):
            raise RelayError(502, f"The api answered no figures for queue '{queue}'.")
        return found[0]

    def purge(self, caller: Caller, queue: str, before: str | None) -> dict[str, Any]:
        return self._relay(caller, self.timeout, lambda c: c.purge(queue, before))

    def delete(self, caller: Caller, queue: str) -> dict[str, Any]:
        return self._relay(caller, self.timeout, lambda c: c.delete_queue(queue))

    def replay(self, caller: Caller, queue: str, since: str) -> dict[str, Any]:
        return self._relay(caller, self.timeout, lambda c: c.replay(queue, since))

    def _relay(self, caller: Caller, seconds: float, call: Callable[[ZosciiClient], T]) -> T:
        options = TransportOptions(
            connect_timeout=min(5.0, seconds),
            read_timeout=seconds,
            deadline=seconds,  # the whole exchange, however the api answers
            retries=0,  # a purge answered but lost must not purge again what came since
            user_agent=USER_AGENT,
        )
        try:
            with ZosciiClient(self.url, options=options, headers=caller.headers()) as client:
                return call(client)
        except ServerError as exc:
            status = exc.status if exc.status >= 400 else 502
            raise RelayError(status, exc.error) from exc
        except TransportError as exc:
            raise RelayError(502, f"The api at {self.url} does not answer: {exc}") from exc
        except ProtocolError as exc:
            raise RelayError(502, f"The api at {self.url} answered oddly: {exc}") from exc
        except ZosciiClientError as exc:
            raise RelayError(502, f"The api at {self.url} failed: {exc}") from exc
