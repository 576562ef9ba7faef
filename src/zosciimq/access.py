"""Access control: off by default (as the original), one setting away.

Clients are declared in TOML (``ZOSCII_AUTH_FILE``, or the same text in
``ZOSCII_AUTH_CLIENTS``)::

    [[clients]]
    name = "partner-a"                 # for logs and metrics, never the secret
    token_sha256 = "9f86d0..."         # sha256 hex of the bearer token (or Basic password)
    username = "partner-a"             # optional: also accept HTTP Basic for old clients
    read = ["outbox_a"]                # queues it may fetch (fnmatch patterns)
    write = ["inbox_a"]                # queues it may publish to
    groups = ["billing"]               # consumer groups it may use on queues it may read
                                       # (default: its own name, and <name>-*)
    actions = ["store", "retrieve"]    # store, retrieve, scan, identify, metrics, statistics,
                                       # admin (operators: queues, purge, delete, replay)

Any other key or table stops the service at start, naming the file, the client and the
key (``zosciimq.settings_file``): a misspelt ``wirte`` would otherwise leave the client
without that right, and nobody would know why.

Consumer groups belong to clients: two partners that may both read a queue must not
consume, ack or dead-letter each other's group. A group action (consume, ack, requeue,
deadletter, extend) needs the read right on the queue and a ``groups`` pattern that
matches the group; without ``groups``, a client's groups are those named after it (its
name, or its name followed by ``-``, lower-cased as group names are). A group's
dead-letter queue ``<queue>--<group>--dead`` follows the group: it is read by whoever may
use that group on that queue, and by nobody else, whatever the read patterns say.

Only hashes are kept; a presented secret is hashed and compared with every client's
hash in constant time, so neither timing nor an early exit tells which part matched.
Tokens must be long random strings (``openssl rand -hex 32``): a fast hash is right for
those and wrong for human passwords, which is why Basic takes the same tokens.

The operator has a token of their own, ``ZOSCII_ADMIN_TOKEN_SHA256`` (its hash; ``make
up`` makes one when none is configured): with or without access control it is the
client ``admin-token`` (Basic user ``admin``) with the rights ``admin``, ``metrics``
and ``statistics`` and no queue rights. Admin actions thus always need a credential,
while access control can stay off for everything else.

Shared by every service that admits clients: the api (HTTP ``Authorization``) and the
PHPMQ gateway (a bearer token in the first message of a connection) read the same
clients from the same variables.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

from zosciimq.core.groups import dead_letter_owners
from zosciimq.errors import Forbidden, Unauthenticated
from zosciimq.settings import SettingsError, setting
from zosciimq.settings_file import check_keys, load_toml, read_table, table_at

__all__ = [
    "ACTIONS",
    "ADMIN_ACTIONS",
    "ADMIN_RIGHT",
    "GROUP_ACTIONS",
    "OPERATOR",
    "OPERATOR_RIGHTS",
    "READ_ACTIONS",
    "SERVICE_ACTIONS",
    "STORE_ACTIONS",
    "AccessControl",
    "Client",
    "Forbidden",
    "Unauthenticated",
    "load_access_control",
    "operator_client",
    "parse_clients",
]

STORE_ACTIONS = frozenset({"store", "retrieve", "scan", "identify", "metrics"})
# Rights to other services' endpoints: "statistics" is statissa's page, /stats.json and
# POST /refresh (its /healthz and /metrics stay open, for orchestrators and Prometheus).
SERVICE_ACTIONS = frozenset({"statistics"})
# The "admin" right: the api's operator actions on whole queues (list every queue,
# purge, delete, replay). Queue names are partners' capabilities, so listing them is
# as much a right as deleting; it is never implied by a queue's read or write patterns.
ADMIN_RIGHT = "admin"
ADMIN_ACTIONS = frozenset({"queues", "purge", "delete", "replay"})
ACTIONS = STORE_ACTIONS | SERVICE_ACTIONS | {ADMIN_RIGHT}  # what ``actions`` may name
# The operator's token (ZOSCII_ADMIN_TOKEN_SHA256): its client's name and rights.
OPERATOR = "admin-token"
OPERATOR_USER = "admin"  # HTTP Basic (a browser's prompt): this user, the token as password
OPERATOR_RIGHTS = frozenset({ADMIN_RIGHT, "metrics", "statistics"})
# Reading a queue: by pointer, or through a consumer group.
READ_ACTIONS = frozenset({"fetch", "consume", "ack", "requeue", "deadletter", "extend"})
# The actions of a consumer group: they also need the right to the group.
GROUP_ACTIONS = READ_ACTIONS - {"fetch"}


def _sha256(value: object) -> bytes:
    """A token's hash as the file gives it: 64 hex digits."""
    try:
        digest = bytes.fromhex(value) if isinstance(value, str) else b""
    except ValueError:
        digest = b""
    if len(digest) != 32:
        raise SettingsError("must be 64 hex digits (the sha256 of the token)")
    return digest


@dataclass(frozen=True)
class Client:
    """One ``[[clients]]`` entry of the file: its settings are the entry's keys
    (``zosciimq.settings_file``), and no other key is allowed."""

    name: str = setting()  # default in the file: client-<its number>
    token_sha256: bytes = setting(parse=_sha256, required=True)
    username: str | None = setting(None)
    read: tuple[str, ...] = setting(())
    write: tuple[str, ...] = setting(())
    actions: frozenset[str] = setting(frozenset(), choices=tuple(sorted(ACTIONS)))
    groups: tuple[str, ...] | None = setting(None)  # None: named after the client (own_groups)

    def may(self, action: str, queue: str | None, group: str | None = None) -> bool:
        """``group``: the clean group of a group action, or None while it is not known
        yet (the queue is judged before a body is read, the group once it is)."""
        if action == "publish":
            return queue is not None and any(fnmatchcase(queue, p) for p in self.write)
        if action in READ_ACTIONS:
            if queue is None or not self.may_read(queue):
                return False
            return group is None or action not in GROUP_ACTIONS or self.may_use(group)
        if action in ADMIN_ACTIONS:
            return ADMIN_RIGHT in self.actions
        return action in self.actions

    def may_read(self, queue: str) -> bool:
        """A queue by the read patterns; a dead-letter queue by its group's rights."""
        owners = dead_letter_owners(queue)
        if owners:
            return any(self.may_read(q) and self.may_use(g) for q, g in owners)
        return any(fnmatchcase(queue, p) for p in self.read)

    def may_use(self, group: str) -> bool:
        patterns = self.groups if self.groups is not None else self.own_groups
        return any(fnmatchcase(group, p) for p in patterns)

    @property
    def own_groups(self) -> tuple[str, str]:
        """The default: groups named after the client (``partner-a``, ``partner-a-*``)."""
        name = self.name.lower()
        return (name, f"{name}-*")


class AccessControl:
    """The clients (access control is on when there is one) and the operator's token."""

    def __init__(self, clients: list[Client], operator: Client | None = None) -> None:
        self.clients = clients
        self.operator = operator
        self._everyone = [*clients, operator] if operator is not None else clients

    @property
    def enabled(self) -> bool:
        return bool(self.clients)

    def authenticate(self, authorization: str | None) -> Client | None:
        """The client the Authorization header proves, or None when access control is off."""
        if not self.enabled:
            return None
        return self._match(authorization, self._everyone)

    def authenticate_operator(self, authorization: str | None) -> Client:
        """Without access control, the admin actions' own check: the operator's token
        (Unauthenticated without it; Forbidden when no token is configured)."""
        if self.operator is None:
            raise Forbidden(
                "Admin actions need a credential and this server has none: set "
                "ZOSCII_ADMIN_TOKEN_SHA256 (make up makes one) or give a client the "
                "'admin' right (ZOSCII_AUTH_FILE)."
            )
        return self._match(authorization, [self.operator])

    def authorize(
        self,
        client: Client | None,
        action: str,
        queue: str | None = None,
        group: str | None = None,
    ) -> None:
        if client is None:
            return
        if not client.may(action, queue, group):
            target = f" on queue '{queue}'" if queue else ""
            if group is not None and queue is not None and client.may(action, queue):
                target += f" in group '{group}' (not one of this client's groups)"
            raise Forbidden(f"Not allowed to {action}{target}.")

    @staticmethod
    def _match(authorization: str | None, candidates: list[Client]) -> Client:
        username, secret = _credentials(authorization)
        digest = hashlib.sha256(secret.encode()).digest()
        found = None
        for client in candidates:  # no early exit: every comparison runs
            same_secret = hmac.compare_digest(digest, client.token_sha256)
            same_user = username is None or username == client.username
            if same_secret and same_user and found is None:
                found = client
        if found is None:
            raise Unauthenticated("Authentication required.")
        return found


def _credentials(authorization: str | None) -> tuple[str | None, str]:
    if not authorization:
        raise Unauthenticated("Authentication required.")
    scheme, _, value = authorization.partition(" ")
    scheme, value = scheme.lower(), value.strip()
    if scheme == "bearer" and value:
        return None, value
    if scheme == "basic":
        try:
            decoded = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise Unauthenticated("Malformed Basic credentials.") from None
        username, colon, password = decoded.partition(":")
        if colon and username and password:
            return username, password
    raise Unauthenticated("Authentication required.")


def load_access_control(env: Mapping[str, str]) -> AccessControl:
    """Clients from ZOSCII_AUTH_FILE or ZOSCII_AUTH_CLIENTS (neither: access is open),
    and the operator's token from ZOSCII_ADMIN_TOKEN_SHA256."""
    path, inline = env.get("ZOSCII_AUTH_FILE", "").strip(), env.get("ZOSCII_AUTH_CLIENTS", "")
    if path and inline.strip():
        raise SettingsError("set ZOSCII_AUTH_FILE or ZOSCII_AUTH_CLIENTS, not both")
    if path:
        source = f"ZOSCII_AUTH_FILE={path}"
        try:
            text = Path(path).read_text("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "not UTF-8"
            raise SettingsError(f"{source}: {why}") from None
        clients = parse_clients(text, source)
    elif inline.strip():
        clients = parse_clients(inline, "ZOSCII_AUTH_CLIENTS")
    else:
        clients = []
    return AccessControl(clients, operator_client(env.get("ZOSCII_ADMIN_TOKEN_SHA256", "")))


def operator_client(token_sha256: str) -> Client | None:
    """The operator's client for the sha256 hex of their token; None for an empty value."""
    text = token_sha256.strip().lower()
    if not text:
        return None
    try:
        digest = bytes.fromhex(text)
    except ValueError:
        digest = b""
    if len(digest) != 32:
        raise SettingsError(
            "ZOSCII_ADMIN_TOKEN_SHA256: the sha256 of the token, 64 hex digits "
            '(printf %s "$TOKEN" | sha256sum)'
        )
    return Client(
        name=OPERATOR, token_sha256=digest, username=OPERATOR_USER, actions=OPERATOR_RIGHTS
    )


def parse_clients(text: str, source: str = "access control file") -> list[Client]:
    """The ``[[clients]]`` of ``text``; SettingsError naming ``source``, the client and
    the key, an unknown one too."""
    document = load_toml(text, source)
    check_keys(document, ("clients",), source)
    entries = document.get("clients", [])
    if not isinstance(entries, list):
        raise SettingsError(f"{source}: clients must be a list of tables: [[clients]]")
    clients = []
    for number, entry in enumerate(entries, start=1):
        where = f"{source}: [[clients]] #{number}"
        values = read_table(Client, table_at(entry, where), where)
        values.setdefault("name", f"client-{number}")
        if values.get("groups") is not None:
            values["groups"] = tuple(g.lower() for g in values["groups"])
        clients.append(Client(**values))
    if not clients:
        raise SettingsError(f"{source}: declares no [[clients]]")
    return clients
