"""The live service's configuration: one declaration per setting, read once at start.

Besides its own ``ZOSCII_LIVE_*`` variables it reads those it shares with the api, with
the api's meaning, because it answers the same requests (``fetch`` and ``consume`` with
``wait=``) and must answer them the same way: the data directory, access control, the
rate limit and trusted proxies, the long-poll cap, batch limits, lease and delivery
limits, the read-only switch, switched-off actions and CORS.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from zosciimq.access import AccessControl
from zosciimq.addresses import trusted_proxies_setting
from zosciimq.core.policy import PolicySource
from zosciimq.cors import parse_origins
from zosciimq.service.config import read_service_env
from zosciimq.service.logs import log_settings
from zosciimq.settings import CoreSettings, SettingsError, env_field

WATCH_MODES = ("auto", "inotify", "poll")
# The api's actions this service answers; the others are the api's alone.
SERVED_ACTIONS = frozenset({"fetch", "consume", "stream"})


def _watch(raw: str) -> str:
    mode = raw.strip().lower()
    if mode not in WATCH_MODES:
        raise SettingsError(f"ZOSCII_LIVE_WATCH={raw!r}: use auto, inotify or poll")
    return mode


def _actions(raw: str) -> frozenset[str]:
    """``ZOSCII_ACTIONS`` as the api reads it (the api checks the names); a stream is a
    fetch that goes on, so it is on exactly when fetch is."""
    actions = frozenset(a.strip().lower() for a in raw.split(",") if a.strip())
    return actions | ({"stream"} if "fetch" in actions else frozenset())


@dataclass(frozen=True)
class LiveSettings:
    """Every setting of the live service, with its one default (``.env.example``)."""

    core: CoreSettings = field(default_factory=CoreSettings)
    host: str = env_field("ZOSCII_LIVE_HOST", "0.0.0.0")
    # One port: the protocol endpoint's waiting reads and streams, /healthz and /metrics.
    port: int = env_field("ZOSCII_LIVE_PORT", 8081, minimum=0, maximum=65535)
    # Open connections at most; one more is answered 503 and closed.
    max_connections: int = env_field("ZOSCII_LIVE_MAX_CONNECTIONS", 16_384, minimum=1)
    # How index changes are noticed: inotify, a stat of each followed queue's index every
    # poll interval, or auto (inotify unless the volume is a network file system).
    watch: str = env_field("ZOSCII_LIVE_WATCH", "auto", parse=_watch)
    poll_ms: int = env_field("ZOSCII_LIVE_POLL_MS", 50, minimum=5, maximum=10_000)
    # Streams send a message up to this size in the stream itself; a larger one as a
    # notice with its name and size, which the client fetches (client.stream does).
    max_inline_bytes: int = env_field(
        "ZOSCII_LIVE_MAX_INLINE_BYTES", 1 << 20, minimum=1024, maximum=64 << 20
    )
    # What a stream or an answer may have waiting in this service for a slow reader; past
    # it the stream is closed with the reason (the reader resumes after its last name).
    max_pending_bytes: int = env_field(
        "ZOSCII_LIVE_MAX_PENDING_BYTES", 4 << 20, minimum=64 << 10, maximum=1 << 30
    )
    # A comment (SSE) or a ping (WebSocket) on an idle stream, for proxies and NATs.
    heartbeat_seconds: int = env_field("ZOSCII_LIVE_HEARTBEAT_SECONDS", 20, minimum=1)
    # Threads for the blocking core calls (reads of the queue, consumer-group leases).
    threads: int = env_field("ZOSCII_LIVE_THREADS", 8, minimum=1, maximum=256)
    # A request head must arrive within this; an idle keep-alive connection closes after
    # the second.
    header_timeout_seconds: int = env_field("ZOSCII_HEADER_TIMEOUT_SECONDS", 20, minimum=1)
    idle_timeout_seconds: int = env_field("ZOSCII_LIVE_IDLE_TIMEOUT_SECONDS", 75, minimum=1)
    # Shared with the api, same meaning.
    max_wait_seconds: int = env_field("ZOSCII_MAX_WAIT_SECONDS", 30, minimum=0, maximum=3600)
    max_batch_count: int = env_field("ZOSCII_MAX_BATCH_COUNT", 1000, minimum=1)
    max_batch_bytes: int = env_field("ZOSCII_MAX_BATCH_BYTES", 64 << 20, minimum=1)
    lease_seconds: int = env_field("ZOSCII_LEASE_SECONDS", 30, minimum=1, maximum=86_400)
    max_lease_seconds: int = env_field("ZOSCII_MAX_LEASE_SECONDS", 3600, minimum=1)
    max_deliveries: int = env_field("ZOSCII_MAX_DELIVERIES", 5, minimum=1, maximum=1000)
    read_only: bool = env_field("ZOSCII_READ_ONLY", False)
    enabled_actions: frozenset[str] = env_field("ZOSCII_ACTIONS", SERVED_ACTIONS, parse=_actions)
    rate_limit: float = env_field("ZOSCII_RATE_LIMIT", 0.0, minimum=0.0)
    rate_burst: int = env_field("ZOSCII_RATE_BURST", 0, minimum=0)
    trusted_proxies: tuple[str, ...] = env_field(
        "ZOSCII_TRUSTED_PROXIES", (), parse=trusted_proxies_setting
    )
    # Web pages of these origins may read streams and answers (CORS); empty: none.
    cors_origins: tuple[str, ...] = env_field("ZOSCII_CORS_ORIGINS", (), parse=parse_origins)
    access: AccessControl = field(default_factory=lambda: AccessControl([]))
    policy: PolicySource = field(default_factory=PolicySource)
    log: tuple[str, str] = field(default_factory=lambda: log_settings({}))

    @property
    def data_dir(self) -> Path:
        return self.core.data_dir

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> LiveSettings:
        return read_service_env(cls, env)

    def with_overrides(
        self, *, data_dir: Path | None = None, port: int | None = None
    ) -> LiveSettings:
        changed = self
        if data_dir is not None:
            changed = replace(changed, core=replace(changed.core, data_dir=Path(data_dir)))
        if port is not None:
            changed = replace(changed, port=port)
        return changed
