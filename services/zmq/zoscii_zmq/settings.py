"""The gateway's configuration: one declaration per setting, read once from the environment.

Besides its own ``ZOSCII_ZPIPES_*`` and ``ZOSCII_ZMQ_*`` variables it reads those it
shares with the api, with the api's meaning: the data directory and default retention
(``CoreSettings``), the access control clients, the queue policy, the maximum of
deliveries of a consumer group, the api's largest message and the blocked queues.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from zosciimq.access import AccessControl
from zosciimq.core.groups import DEFAULT_MAX_DELIVERIES, clean_group
from zosciimq.core.policy import PolicySource
from zosciimq.errors import InvalidInput
from zosciimq.service.config import read_service_env
from zosciimq.service.logs import log_settings
from zosciimq.settings import CoreSettings, SettingsError, env_field, env_int

DEFAULT_GROUP = "zmq"
_BROKER = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_ENDPOINT = re.compile(r"(tcp|ipc)://\S+")


def _endpoint(name: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        if raw.lower() in ("off", "none"):
            return ""
        if not _ENDPOINT.fullmatch(raw):
            raise SettingsError(f"{name}={raw!r}: expected tcp://host:port, ipc://path or off")
        return raw

    return parse


def _broker(raw: str) -> str:
    if raw.lower() in ("off", "none"):
        return ""
    if not _BROKER.fullmatch(raw):
        raise SettingsError(f"ZOSCII_ZPIPES_BROKER={raw!r}: use 1 to 64 of A-Z a-z 0-9 _ . -")
    return raw


def _group(raw: str) -> str:
    try:
        return clean_group(raw)
    except InvalidInput as exc:
        raise SettingsError(f"ZOSCII_ZMQ_GROUP: {exc}") from None


def _retention(raw: str) -> int:
    return env_int({"V": raw}, "V", 0, minimum=0, maximum=9999)


def _queues(raw: str) -> frozenset[str]:
    return frozenset(q.strip().lower() for q in raw.split(",") if q.strip())


@dataclass(frozen=True)
class Settings:
    core: CoreSettings = field(default_factory=CoreSettings)
    # --- zpipes ---
    # ipc://@/zpipes/<broker>, where zbroker's clients connect ("off": none)
    broker: str = env_field("ZOSCII_ZPIPES_BROKER", "local", parse=_broker)
    zpipes_tcp: str = env_field(
        "ZOSCII_ZPIPES_ENDPOINT", "tcp://0.0.0.0:5560", parse=_endpoint("ZOSCII_ZPIPES_ENDPOINT")
    )
    # A client silent this long is dropped without a reply, as zbroker's server/timeout.
    idle_seconds: float = env_field("ZOSCII_ZPIPES_IDLE_SECONDS", 10.0, minimum=0.1)
    max_sessions: int = env_field("ZOSCII_ZPIPES_MAX_SESSIONS", 10_000, minimum=1)
    max_pipes: int = env_field("ZOSCII_ZPIPES_MAX_PIPES", 10_000, minimum=1)
    # Requests a session may have waiting behind the one in progress (pipelining).
    max_pending: int = env_field("ZOSCII_ZPIPES_MAX_PENDING", 1000, minimum=1)
    # With access control on: the client whose rights zpipes connections have (the
    # zbroker clients send no credentials). Unset: zpipes is refused.
    zpipes_client: str = env_field("ZOSCII_ZPIPES_CLIENT", "")
    # --- the ØMQ patterns ("off": not served) ---
    request_endpoint: str = env_field(
        "ZOSCII_ZMQ_REQUEST_ENDPOINT",
        "tcp://0.0.0.0:5561",
        parse=_endpoint("ZOSCII_ZMQ_REQUEST_ENDPOINT"),
    )
    push_endpoint: str = env_field(
        "ZOSCII_ZMQ_PUSH_ENDPOINT",
        "tcp://0.0.0.0:5562",
        parse=_endpoint("ZOSCII_ZMQ_PUSH_ENDPOINT"),
    )
    work_endpoint: str = env_field(
        "ZOSCII_ZMQ_WORK_ENDPOINT",
        "tcp://0.0.0.0:5563",
        parse=_endpoint("ZOSCII_ZMQ_WORK_ENDPOINT"),
    )
    pub_endpoint: str = env_field(
        "ZOSCII_ZMQ_PUB_ENDPOINT", "tcp://0.0.0.0:5564", parse=_endpoint("ZOSCII_ZMQ_PUB_ENDPOINT")
    )
    # ZAP/PLAIN on the request, push and work sockets (the PUB socket uses it whenever
    # access control is on: a subscription cannot carry a token).
    plain: bool = env_field("ZOSCII_ZMQ_PLAIN", False)
    group: str = env_field("ZOSCII_ZMQ_GROUP", DEFAULT_GROUP, parse=_group)
    lease_seconds: int = env_field("ZOSCII_ZMQ_LEASE_SECONDS", 60, minimum=1, maximum=86_400)
    pub_hwm: int = env_field("ZOSCII_ZMQ_PUB_HWM", 100_000, minimum=0)
    # --- shared ---
    host: str = env_field("ZOSCII_ZMQ_HOST", "0.0.0.0")  # the ops port's address
    metrics_port: int = env_field("ZOSCII_ZMQ_METRICS_PORT", 9105, minimum=0, maximum=65535)
    # The largest chunk or message taken or sent (a frame is held in memory whole); never
    # more than the api's ZOSCII_MAX_MESSAGE_BYTES.
    max_chunk_bytes: int = env_field(
        "ZOSCII_ZMQ_MAX_CHUNK_BYTES", 16 << 20, minimum=1, maximum=1 << 30
    )
    api_max_message_bytes: int = env_field("ZOSCII_MAX_MESSAGE_BYTES", 1 << 30, minimum=1)
    retention_days: int | None = env_field("ZOSCII_ZMQ_RETENTION_DAYS", None, parse=_retention)
    # How often a waiting call looks at the volume for another gateway's doing (a stat).
    poll_ms: int = env_field("ZOSCII_ZMQ_POLL_MS", 20, minimum=1, maximum=10_000)
    threads: int = env_field("ZOSCII_ZMQ_THREADS", 16, minimum=1, maximum=256)
    stop_grace_seconds: float = env_field("ZOSCII_ZMQ_STOP_GRACE_SECONDS", 5.0, minimum=0.0)
    max_deliveries: int = env_field(
        "ZOSCII_MAX_DELIVERIES", DEFAULT_MAX_DELIVERIES, minimum=1, maximum=1000
    )
    blocked_queues: frozenset[str] = env_field("ZOSCII_BLOCKED_QUEUES", frozenset(), parse=_queues)
    access: AccessControl = field(default_factory=lambda: AccessControl([]))
    policy: PolicySource = field(default_factory=PolicySource)
    log: tuple[str, str] = field(default_factory=lambda: log_settings({}))

    def __post_init__(self) -> None:
        if self.zpipes_client and self.access.enabled:
            names = {c.name for c in self.access.clients}
            if self.zpipes_client not in names:
                raise SettingsError(
                    f"ZOSCII_ZPIPES_CLIENT={self.zpipes_client!r}: no such access control client"
                )

    @property
    def data_dir(self) -> Path:
        return self.core.data_dir

    @property
    def chunk_limit(self) -> int:
        """The largest chunk or message: ours, never over the api's."""
        return min(self.max_chunk_bytes, self.api_max_message_bytes)

    @property
    def ipc_endpoint(self) -> str:
        return f"ipc://@/zpipes/{self.broker}" if self.broker else ""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        return read_service_env(cls, env)

    def with_overrides(self, *, data_dir: Path | None = None) -> Settings:
        if data_dir is None:
            return self
        return replace(self, core=replace(self.core, data_dir=Path(data_dir)))
