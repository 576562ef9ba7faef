"""The gateway's configuration: one declaration per setting, read once from the environment.

Besides its own ``ZOSCII_PHPMQ_*`` variables it reads those it shares with the api, with
the api's meaning: the data directory and default retention (``CoreSettings``), the
access control clients (``ZOSCII_AUTH_FILE`` / ``ZOSCII_AUTH_CLIENTS``), the maximum of
deliveries of a consumer group (``ZOSCII_MAX_DELIVERIES``; both must agree, as they
serve the same groups) and the queues nobody may publish to (``ZOSCII_BLOCKED_QUEUES``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from zosciimq.access import AccessControl
from zosciimq.core.groups import DEFAULT_MAX_DELIVERIES, clean_group
from zosciimq.core.names import clean_queue
from zosciimq.core.policy import PolicySource
from zosciimq.errors import InvalidInput
from zosciimq.service.config import read_service_env
from zosciimq.service.logs import log_settings
from zosciimq.settings import CoreSettings, SettingsError, env_field, env_int

DEFAULT_GROUP = "phpmq"


def _queue_groups(raw: str) -> tuple[tuple[str, str], ...]:
    """``queue=group,queue=group``: the consumer group of those queues' PHPMQ clients."""
    pairs = []
    for item in raw.split(","):
        if not item.strip():
            continue
        queue, sep, group = item.partition("=")
        try:
            if not sep:
                raise InvalidInput(f"'{item.strip()}' is not queue=group")
            pairs.append((clean_queue(queue.strip()), clean_group(group.strip())))
        except InvalidInput as exc:
            raise SettingsError(f"ZOSCII_PHPMQ_QUEUE_GROUPS: {exc}") from None
    return tuple(pairs)


def _group(raw: str) -> str:
    try:
        return clean_group(raw)
    except InvalidInput as exc:
        raise SettingsError(f"ZOSCII_PHPMQ_GROUP: {exc}") from None


def _retention(raw: str) -> int:
    return env_int(
        {"ZOSCII_PHPMQ_RETENTION_DAYS": raw},
        "ZOSCII_PHPMQ_RETENTION_DAYS",
        0,
        minimum=0,
        maximum=9999,
    )


def _queues(raw: str) -> frozenset[str]:
    return frozenset(q.strip().lower() for q in raw.split(",") if q.strip())


@dataclass(frozen=True)
class Settings:
    core: CoreSettings = field(default_factory=CoreSettings)
    host: str = env_field("ZOSCII_PHPMQ_HOST", "0.0.0.0")  # the PHPMQ and ops ports' address
    port: int = env_field("ZOSCII_PHPMQ_PORT", 9100, minimum=0, maximum=65535)
    metrics_port: int = env_field("ZOSCII_PHPMQ_METRICS_PORT", 9104, minimum=0, maximum=65535)
    # The consumer group of a queue's PHPMQ consumers, and exceptions per queue.
    group: str = env_field("ZOSCII_PHPMQ_GROUP", DEFAULT_GROUP, parse=_group)
    queue_groups: tuple[tuple[str, str], ...] = env_field(
        "ZOSCII_PHPMQ_QUEUE_GROUPS", (), parse=_queue_groups
    )
    # A dispatched message's lease; renewed while its connection is open.
    lease_seconds: int = env_field("ZOSCII_PHPMQ_LEASE_SECONDS", 60, minimum=3, maximum=86_400)
    window_limit: int = env_field("ZOSCII_PHPMQ_WINDOW_LIMIT", 1000, minimum=1, maximum=100_000)
    max_message_bytes: int = env_field(
        "ZOSCII_PHPMQ_MAX_MESSAGE_BYTES", 16 << 20, minimum=1, maximum=1 << 31
    )
    max_connections: int = env_field("ZOSCII_PHPMQ_MAX_CONNECTIONS", 256, minimum=1)
    # Connections from one address (0: no limit). Behind NAT or Docker's userland proxy
    # many clients share one address: raise it there.
    max_connections_per_address: int = env_field(
        "ZOSCII_PHPMQ_MAX_CONNECTIONS_PER_ADDRESS", 128, minimum=0
    )
    # Time from accepting a connection to its first message, read whole but for any
    # content (with access control on: the 000 with the token). Until then a connection
    # is pending: a newer one takes its slot when the gateway or its address is full.
    first_message_seconds: float = env_field(
        "ZOSCII_PHPMQ_FIRST_MESSAGE_SECONDS", 10.0, minimum=0.1
    )
    # Pending connections one address may hold; a newer one from there closes its oldest.
    max_pending_per_address: int = env_field(
        "ZOSCII_PHPMQ_MAX_PENDING_PER_ADDRESS", 32, minimum=1
    )
    # Retention (days) of what PHPMQ clients send; unset: ZOSCII_DEFAULT_RETENTION_DAYS.
    retention_days: int | None = env_field("ZOSCII_PHPMQ_RETENTION_DAYS", None, parse=_retention)
    # How often a waiting consumer looks for new messages (a stat of the queue's index and
    # the group's log); a full look (leases that ran out) at least every second.
    poll_ms: int = env_field("ZOSCII_PHPMQ_POLL_MS", 50, minimum=5, maximum=10_000)
    # Time a message that has begun may take between two reads (slow or stuck senders).
    frame_timeout_seconds: float = env_field(
        "ZOSCII_PHPMQ_FRAME_TIMEOUT_SECONDS", 30.0, minimum=0.1
    )
    # A content packet's deadline: the frame timeout plus 1 s per this many bytes.
    min_rate: int = env_field("ZOSCII_PHPMQ_MIN_RATE", 10_000, minimum=1)
    threads: int = env_field("ZOSCII_PHPMQ_THREADS", 16, minimum=1, maximum=256)
    # A connection's messages read back to back are committed together before it reads
    # on; a group holds at most this many messages (001s; 004s apart) and content bytes.
    commit_messages: int = env_field(
        "ZOSCII_PHPMQ_COMMIT_MESSAGES", 1000, minimum=1, maximum=4096
    )
    commit_bytes: int = env_field(
        "ZOSCII_PHPMQ_COMMIT_BYTES", 1 << 20, minimum=1, maximum=256 << 20
    )
    # Message ids remembered after their connection closed (an ack after a reconnect).
    max_ids: int = env_field("ZOSCII_PHPMQ_MAX_IDS", 100_000, minimum=0)
    # On SIGTERM: how long messages being handled may take before the connections close.
    stop_grace_seconds: float = env_field("ZOSCII_PHPMQ_STOP_GRACE_SECONDS", 10.0, minimum=0.0)
    max_deliveries: int = env_field(
        "ZOSCII_MAX_DELIVERIES", DEFAULT_MAX_DELIVERIES, minimum=1, maximum=1000
    )
    blocked_queues: frozenset[str] = env_field("ZOSCII_BLOCKED_QUEUES", frozenset(), parse=_queues)
    access: AccessControl = field(default_factory=lambda: AccessControl([]))
    # The api's queue policy (ZOSCII_POLICY_FILE): per-queue retention and limits.
    policy: PolicySource = field(default_factory=PolicySource)
    log: tuple[str, str] = field(default_factory=lambda: log_settings({}))

    @property
    def data_dir(self) -> Path:
        return self.core.data_dir

    def group_of(self, queue: str) -> str:
        """The consumer group PHPMQ clients of ``queue`` (clean) consume through."""
        for name, group in self.queue_groups:
            if name == queue:
                return group
        return self.group

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        return read_service_env(cls, env)

    def with_overrides(self, *, data_dir: Path | None = None, port: int | None = None) -> Settings:
        changed = self
        if data_dir is not None:
            changed = replace(changed, core=replace(changed.core, data_dir=Path(data_dir)))
        if port is not None:
            changed = replace(changed, port=port)
        return changed
