"""statissa's configuration: one declaration per setting, read once from the environment."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from zoscii_statissa.hosts import origin_netloc
from zosciimq.access import AccessControl
from zosciimq.service.config import read_service_env
from zosciimq.service.logs import log_settings
from zosciimq.settings import CoreSettings, SettingsError, env_field, env_list


def _spark_conf(raw: str) -> tuple[tuple[str, str], ...]:
    """``key=value`` pairs passed to Spark as they are (cluster images, executor sizes...)."""
    pairs = []
    for item in env_list({"ZOSCII_SPARK_CONF": raw}, "ZOSCII_SPARK_CONF", ()):
        key, sep, value = item.partition("=")
        if not sep or not key.strip().startswith("spark."):
            raise SettingsError(f"ZOSCII_SPARK_CONF: {item!r} is not spark.<key>=<value>")
        pairs.append((key.strip(), value.strip()))
    return tuple(pairs)


def _api_url(raw: str) -> str:
    """The api the console relays admin actions to: an http(s) URL, or "none" (off)."""
    if raw.lower() == "none":
        return ""
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query:
        raise SettingsError(f"ZOSCII_STATISSA_API_URL: {raw!r} is not http(s)://host[:port]/")
    return raw


def _live_url(raw: str) -> str:
    """The stream endpoint browsers reach (the proxy's public URL): http(s), or "none"."""
    if raw.lower() == "none":
        return ""
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query:
        raise SettingsError(f"ZOSCII_STATISSA_LIVE_URL: {raw!r} is not http(s)://host[:port]/")
    return raw


def _origins(raw: str) -> tuple[str, ...]:
    """The console's public addresses: ``scheme://host[:port]`` each."""
    origins = tuple(item.strip() for item in raw.split(",") if item.strip())
    for origin in origins:
        try:
            origin_netloc(origin)
        except ValueError:
            raise SettingsError(
                f"ZOSCII_STATISSA_PUBLIC_ORIGINS: {origin!r} is not http(s)://host[:port]"
            ) from None
    return origins


def _metrics_urls(raw: str) -> tuple[str, ...]:
    """The api /metrics pages to read fetch counts from; "none": none."""
    if raw.strip().lower() == "none":
        return ()
    urls = env_list(
        {"ZOSCII_STATISSA_API_METRICS_URLS": raw}, "ZOSCII_STATISSA_API_METRICS_URLS", ()
    )
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise SettingsError(
                f"ZOSCII_STATISSA_API_METRICS_URLS: {url!r} is not http(s)://host[:port]/metrics"
            )
    return urls


@dataclass(frozen=True)
class Settings:
    core: CoreSettings = field(default_factory=CoreSettings)
    host: str = env_field("ZOSCII_STATISSA_HOST", "0.0.0.0")
    port: int = env_field("ZOSCII_STATISSA_PORT", 9103, minimum=1, maximum=65535)
    interval_seconds: int = env_field("ZOSCII_STATISSA_INTERVAL_SECONDS", 300, minimum=1)
    # gunicorn, one gthread worker (Spark and the figures live in it): its request threads,
    # the heartbeat timeout after which the master replaces a stuck worker, and how long
    # a stopping worker lets requests finish
    threads: int = env_field("ZOSCII_STATISSA_THREADS", 4, minimum=2, maximum=64)
    timeout_seconds: int = env_field("ZOSCII_STATISSA_TIMEOUT_SECONDS", 60, minimum=5)
    graceful_timeout_seconds: int = env_field(
        "ZOSCII_STATISSA_GRACEFUL_TIMEOUT_SECONDS", 20, minimum=1
    )
    spark_master: str = env_field("ZOSCII_SPARK_MASTER", "local[*]")
    spark_driver_memory: str = env_field("ZOSCII_SPARK_DRIVER_MEMORY", "1g")
    # Spark's scratch space; the image's root file system is read-only, /tmp is not
    spark_local_dir: Path = env_field("ZOSCII_SPARK_LOCAL_DIR", Path("/tmp/zoscii-statissa"))
    spark_conf: tuple[tuple[str, str], ...] = env_field("ZOSCII_SPARK_CONF", (), parse=_spark_conf)
    # A class-data archive of the driver JVM's classes (``zoscii_statissa.class_archive``,
    # made by the image build): Spark starts about 1.4 s sooner. Used when the file exists.
    spark_class_archive: Path = env_field(
        "ZOSCII_SPARK_CLASS_ARCHIVE", Path("/opt/zoscii/spark-classes.jsa")
    )
    # (level, format) from ZOSCII_LOG_LEVEL and ZOSCII_LOG_FORMAT, as every service
    log: tuple[str, str] = field(default_factory=lambda: log_settings({}))
    # the api the console's admin buttons relay to, with the operator's own credentials
    # (empty or "none": no admin actions in the console), and how long such a request may take
    api_url: str = env_field("ZOSCII_STATISSA_API_URL", "", parse=_api_url)
    # the names the console answers to besides its IP addresses and localhost (DNS
    # rebinding: hosts.py), e.g. https://console.example.com behind a TLS proxy
    public_origins: tuple[str, ...] = env_field(
        "ZOSCII_STATISSA_PUBLIC_ORIGINS", (), parse=_origins
    )
    api_timeout_seconds: int = env_field(
        "ZOSCII_STATISSA_API_TIMEOUT_SECONDS", 120, minimum=1, maximum=3600
    )
    # the api /metrics pages whose fetched-messages counters the history keeps, for the
    # console's fetch rates (one per api container; "none": no fetch rates); unset: the
    # api_url's /metrics. Under access control, a token with the api's "metrics" right.
    api_metrics_urls: tuple[str, ...] | None = env_field(
        "ZOSCII_STATISSA_API_METRICS_URLS", None, parse=_metrics_urls
    )
    api_metrics_token: str = env_field("ZOSCII_STATISSA_API_METRICS_TOKEN", "", secret=True)
    # the stream endpoint as the operator's browser reaches it (the proxy's public URL):
    # the queue page's live view follows the queue there; its origin must then be in
    # the live service's ZOSCII_CORS_ORIGINS. Empty or "none": no live view.
    live_url: str = env_field("ZOSCII_STATISSA_LIVE_URL", "", parse=_live_url)
    # clients from ZOSCII_AUTH_FILE / ZOSCII_AUTH_CLIENTS, as the api: none, access is open
    access: AccessControl = field(default_factory=lambda: AccessControl([]))

    @property
    def data_dir(self) -> Path:
        return self.core.data_dir

    @property
    def fetch_count_urls(self) -> tuple[str, ...]:
        """Where the fetch counts come from: the listed pages, else the api's /metrics."""
        if self.api_metrics_urls is not None:
            return self.api_metrics_urls
        return (self.api_url.rstrip("/") + "/metrics",) if self.api_url else ()

    @property
    def spark_is_local(self) -> bool:
        return self.spark_master.startswith("local")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        return read_service_env(cls, env)
