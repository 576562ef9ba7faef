"""The api's configuration: one typed object, read from the environment at start."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from zoscii_api.auth import AccessControl, load_access_control
from zosciimq.settings import (
    CoreSettings,
    SettingsError,
    env_float,
    env_int,
    env_list,
    env_str,
)

ACTIONS = ("publish", "fetch", "store", "retrieve", "scan", "identify")


@dataclass(frozen=True)
class ApiSettings:
    core: CoreSettings = field(default_factory=CoreSettings)
    max_message_bytes: int = 1 << 30  # 1 GiB
    max_field_bytes: int = 1 << 20  # any parameter other than msg
    enabled_actions: frozenset[str] = frozenset(ACTIONS)
    blocked_queues: frozenset[str] = frozenset()
    bind: str = "0.0.0.0:8080"
    workers: int = 2
    threads: int = 32
    timeout_seconds: int = 120
    max_wait_seconds: int = 30  # long-poll cap; 0 switches long-poll off
    wait_poll_ms: int = 10  # how often other processes' publishes are looked for
    max_batch_count: int = 1000
    max_batch_bytes: int = 64 << 20
    tls_cert: str = ""
    tls_key: str = ""
    rate_limit: float = 0.0  # requests per second per client and worker; 0 = off
    rate_burst: int = 0  # 0 = one second's worth
    trusted_proxies: tuple[str, ...] = ()  # peers whose X-Forwarded-For is believed
    header_timeout_seconds: int = 20  # the whole request head
    body_timeout_seconds: int = 60  # the body: this long, plus 1 s per body_min_rate bytes
    body_min_rate: int = 500
    access: AccessControl = field(default_factory=lambda: AccessControl([]))

    @property
    def data_dir(self) -> Path:
        return self.core.data_dir

    @property
    def max_waiters(self) -> int:
        """Waiting fetches per worker: a few threads always stay free for publishers."""
        return max(0, self.threads - 4)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ApiSettings:
        env = os.environ if env is None else env
        actions = frozenset(a.lower() for a in env_list(env, "ZOSCII_ACTIONS", ACTIONS))
        unknown = actions - set(ACTIONS)
        if unknown:
            raise SettingsError(f"ZOSCII_ACTIONS: unknown action(s) {sorted(unknown)}")
        return cls(
            core=CoreSettings.from_env(env),
            max_message_bytes=env_int(env, "ZOSCII_MAX_MESSAGE_BYTES", 1 << 30, minimum=1),
            max_field_bytes=env_int(env, "ZOSCII_MAX_FIELD_BYTES", 1 << 20, minimum=1024),
            enabled_actions=actions,
            blocked_queues=frozenset(q.lower() for q in env_list(env, "ZOSCII_BLOCKED_QUEUES", ())),
            bind=env_str(env, "ZOSCII_BIND", "0.0.0.0:8080"),
            workers=env_int(env, "ZOSCII_WORKERS", 2, minimum=1, maximum=256),
            threads=env_int(env, "ZOSCII_THREADS", 32, minimum=1, maximum=1024),
            timeout_seconds=env_int(env, "ZOSCII_TIMEOUT_SECONDS", 120, minimum=1),
            max_wait_seconds=env_int(env, "ZOSCII_MAX_WAIT_SECONDS", 30, maximum=3600),
            wait_poll_ms=env_int(env, "ZOSCII_WAIT_POLL_MS", 10, minimum=1, maximum=10_000),
            max_batch_count=env_int(env, "ZOSCII_MAX_BATCH_COUNT", 1000, minimum=1),
            max_batch_bytes=env_int(env, "ZOSCII_MAX_BATCH_BYTES", 64 << 20, minimum=1),
            tls_cert=env_str(env, "ZOSCII_TLS_CERT", ""),
            tls_key=env_str(env, "ZOSCII_TLS_KEY", ""),
            rate_limit=env_float(env, "ZOSCII_RATE_LIMIT", 0.0),
            rate_burst=env_int(env, "ZOSCII_RATE_BURST", 0),
            trusted_proxies=_networks(env_list(env, "ZOSCII_TRUSTED_PROXIES", ())),
            header_timeout_seconds=env_int(env, "ZOSCII_HEADER_TIMEOUT_SECONDS", 20, minimum=1),
            body_timeout_seconds=env_int(env, "ZOSCII_BODY_TIMEOUT_SECONDS", 60, minimum=1),
            body_min_rate=env_int(env, "ZOSCII_BODY_MIN_RATE", 500, minimum=1),
            access=load_access_control(env),
        )


def _networks(items: tuple[str, ...]) -> tuple[str, ...]:
    for item in items:
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise SettingsError(f"ZOSCII_TRUSTED_PROXIES: {item!r} is not an address") from None
    return items
