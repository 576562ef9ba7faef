"""The api's configuration: one typed object, read from the environment at start."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from zosciimq.access import AccessControl
from zosciimq.addresses import network_setting, trusted_proxies_setting
from zosciimq.core.policy import PolicySource
from zosciimq.cors import parse_origins
from zosciimq.service.config import read_service_env
from zosciimq.service.logs import log_settings
from zosciimq.settings import CoreSettings, SettingsError, env_field

ACTIONS = (
    "publish",
    "fetch",
    "store",
    "retrieve",
    "scan",
    "identify",
    "consume",
    "ack",
    "requeue",
    "deadletter",
    "extend",
    "queues",
    "purge",
    "delete",
    "replay",
)
# The actions on one queue, checked against the client's patterns: publish against its
# write patterns, the others (reading, and working through a consumer group) its read.
QUEUE_ACTIONS = frozenset({"publish", "fetch", "consume", "ack", "requeue", "deadletter", "extend"})
# Operators' actions on whole queues (zoscii_api.admin, ADMIN_ACTIONS from
# zosciimq.access): a credential always (the "admin" right, or the operator's token
# ZOSCII_ADMIN_TOKEN_SHA256), and an address of ZOSCII_ADMIN_ALLOW when that is set.
# Who may use the protocol without the proxy (ZOSCII_DIRECT_ACCESS): "local" peers only
# (loopback, the networks the api is attached to, trusted proxies), or "public": anyone.
DIRECT_ACCESS = ("local", "public")
SERVERS = ("threads", "loop")


def _actions(raw: str) -> frozenset[str]:
    actions = frozenset(a.strip().lower() for a in raw.split(",") if a.strip())
    unknown = actions - set(ACTIONS)
    if unknown:
        raise SettingsError(f"ZOSCII_ACTIONS: unknown action(s) {sorted(unknown)}")
    return actions


def _queues(raw: str) -> frozenset[str]:
    return frozenset(q.strip().lower() for q in raw.split(",") if q.strip())


def _admin_allow(raw: str) -> tuple[str, ...]:
    """CIDR list the admin actions are further restricted to; ``none``: nobody."""
    if raw.strip().lower() == "none":
        return ()
    return network_setting(raw, "ZOSCII_ADMIN_ALLOW")


def _server(raw: str) -> str:
    value = raw.strip().lower()
    if value not in SERVERS:
        raise SettingsError(f"ZOSCII_API_SERVER={raw!r}: use threads or loop")
    return value


def _direct_access(raw: str) -> str:
    value = raw.strip().lower()
    if value not in DIRECT_ACCESS:
        raise SettingsError(f"ZOSCII_DIRECT_ACCESS={raw!r}: use local or public")
    return value


@dataclass(frozen=True)
class ApiSettings:
    """Every ``ZOSCII_*`` setting of the api, with its one default (``.env.example``)."""

    core: CoreSettings = field(default_factory=CoreSettings)
    max_message_bytes: int = env_field("ZOSCII_MAX_MESSAGE_BYTES", 1 << 30, minimum=1)
    max_field_bytes: int = env_field("ZOSCII_MAX_FIELD_BYTES", 1 << 20, minimum=1024)
    enabled_actions: frozenset[str] = env_field(
        "ZOSCII_ACTIONS", frozenset(ACTIONS), parse=_actions
    )
    blocked_queues: frozenset[str] = env_field("ZOSCII_BLOCKED_QUEUES", frozenset(), parse=_queues)
    bind: str = env_field("ZOSCII_BIND", "0.0.0.0:8080")
    workers: int = env_field("ZOSCII_WORKERS", 2, minimum=1, maximum=256)
    # "threads": gunicorn's gthread worker, a thread per request (zoscii_api.gunicorn_worker);
    # "loop": its asgi worker, publishes on the event loop and the rest in threads
    # (zoscii_api.asgi). ZOSCII_THREADS is the threads of either.
    server: str = env_field("ZOSCII_API_SERVER", "threads", parse=_server)
    threads: int = env_field("ZOSCII_THREADS", 32, minimum=1, maximum=1024)
    timeout_seconds: int = env_field("ZOSCII_TIMEOUT_SECONDS", 120, minimum=1)
    max_wait_seconds: int = env_field("ZOSCII_MAX_WAIT_SECONDS", 30, minimum=0, maximum=3600)
    wait_poll_ms: int = env_field("ZOSCII_WAIT_POLL_MS", 10, minimum=1, maximum=10_000)
    max_batch_count: int = env_field("ZOSCII_MAX_BATCH_COUNT", 1000, minimum=1)
    max_batch_bytes: int = env_field("ZOSCII_MAX_BATCH_BYTES", 64 << 20, minimum=1)
    tls_cert: str = env_field("ZOSCII_TLS_CERT", "")
    tls_key: str = env_field("ZOSCII_TLS_KEY", "")
    rate_limit: float = env_field("ZOSCII_RATE_LIMIT", 0.0, minimum=0.0)  # per client, 0: off
    rate_burst: int = env_field("ZOSCII_RATE_BURST", 0, minimum=0)  # 0: one second's worth
    trusted_proxies: tuple[str, ...] = env_field(
        "ZOSCII_TRUSTED_PROXIES", (), parse=trusted_proxies_setting
    )  # peers whose X-Forwarded-For is believed
    # Admin actions, besides their credential, only from these addresses (CIDR list,
    # "none" for nobody; unset: from anywhere); the address is REMOTE_ADDR, or through
    # ZOSCII_TRUSTED_PROXIES.
    admin_allow: tuple[str, ...] | None = env_field("ZOSCII_ADMIN_ALLOW", None, parse=_admin_allow)
    # "local": the protocol answers only loopback, the api's own networks and trusted
    # proxies, so its own port cannot become the public one by a port mapping alone;
    # "public": anyone (the api is the public endpoint, without the proxy in front).
    direct_access: str = env_field("ZOSCII_DIRECT_ACCESS", "local", parse=_direct_access)
    header_timeout_seconds: int = env_field("ZOSCII_HEADER_TIMEOUT_SECONDS", 20, minimum=1)
    # A keep-alive client that came back this quickly last time is waited for on its
    # thread instead of the poller (zoscii_api.gunicorn_worker); 0 turns that off.
    keepalive_linger_ms: int = env_field("ZOSCII_KEEPALIVE_LINGER_MS", 5, minimum=0, maximum=1000)
    # The body gets this long, plus 1 s per body_min_rate bytes received.
    body_timeout_seconds: int = env_field("ZOSCII_BODY_TIMEOUT_SECONDS", 60, minimum=1)
    body_min_rate: int = env_field("ZOSCII_BODY_MIN_RATE", 500, minimum=1)
    lease_seconds: int = env_field("ZOSCII_LEASE_SECONDS", 30, minimum=1, maximum=86_400)
    max_lease_seconds: int = env_field("ZOSCII_MAX_LEASE_SECONDS", 3600, minimum=1)
    max_deliveries: int = env_field("ZOSCII_MAX_DELIVERIES", 5, minimum=1, maximum=1000)
    # A read-only copy (disaster recovery): fetch, retrieve and scan only; healthy when
    # the data is readable; every write answers 503 without reading its body.
    read_only: bool = env_field("ZOSCII_READ_ONLY", False)
    # Web pages of these origins may read the answers (CORS, zosciimq.cors); empty: none.
    cors_origins: tuple[str, ...] = env_field("ZOSCII_CORS_ORIGINS", (), parse=parse_origins)
    access: AccessControl = field(default_factory=lambda: AccessControl([]))
    # Per-queue default retention and limits (ZOSCII_POLICY_FILE, zosciimq.core.policy),
    # read again when the file changes.
    policy: PolicySource = field(default_factory=PolicySource)
    log: tuple[str, str] = field(default_factory=lambda: log_settings({}))  # level, format

    @property
    def data_dir(self) -> Path:
        return self.core.data_dir

    @property
    def max_waiters(self) -> int:
        """Waiting fetches per worker: a few threads always stay free for publishers."""
        return max(0, self.threads - 4)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ApiSettings:
        """Its own variables, and core, log, access and policy read as every service reads
        them."""
        return read_service_env(cls, env)
