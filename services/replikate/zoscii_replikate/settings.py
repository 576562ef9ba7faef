"""The replicator's configuration: a TOML file of jobs plus environment overrides.

File (``ZOSCII_REPLIKATE_CONFIG``, default /etc/zoscii/replikate.toml)::

    [defaults]                     # optional; every job inherits these
    interval_seconds = 30
    [jobs.dr-orders]
    source_url = "https://hq.example.com/index.php"
    source_queue = "orders"
    target_queue = "orders"        # omit for the store (as the original without tq)
    bearer_token_env = "HQ_TOKEN"  # secrets only ever by the name of an env var

The environment overrides the file's ``[defaults]`` (``ZOSCII_REPLIKATE_<KEY>``) and can
define one whole job for the simple case (``ZOSCII_REPLIKATE_SOURCE_URL`` ...). A bad
value fails at start, naming the job and the key.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zosciimq.core.errors import InvalidInput
from zosciimq.core.names import clean_queue
from zosciimq.settings import CoreSettings, SettingsError, env_int, env_str

DEFAULT_CONFIG = Path("/etc/zoscii/replikate.toml")
ENV_PREFIX = "ZOSCII_REPLIKATE_"
ENV_JOB_NAME = "env"
_JOB_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
_POINTER_FILE_RE = re.compile(r"replikate_state_[A-Za-z0-9_-]+\.txt")
_SECRET_HEADERS = {"authorization", "proxy-authorization", "cookie", "x-api-key"}
MODES = ("default", "original")

# [defaults] keys: name -> (type, default). Each is also ZOSCII_REPLIKATE_<NAME>.
DEFAULTS: dict[str, tuple[type, Any]] = {
    "interval_seconds": (float, 30.0),
    "max_messages_per_run": (int, 1000),
    "max_message_bytes": (int, 1 << 30),
    "connect_timeout": (float, 5.0),
    "read_timeout": (float, 30.0),
    "deadline_seconds": (float, 600.0),
    "retries": (int, 2),
    "verify_tls": (bool, True),
    "ca_bundle": (str, ""),
    "mode": (str, "default"),
    "backoff_initial_seconds": (float, 5.0),
    "backoff_max_seconds": (float, 600.0),
    "batch_count": (int, 100),
    "batch_bytes": (int, 16 << 20),
    "wait_seconds": (float, 0.0),
}
MAX_BATCH_COUNT = 1000  # the api's default ZOSCII_MAX_BATCH_COUNT
JOB_KEYS = set(DEFAULTS) | {
    "source_url",
    "source_queue",
    "target_queue",
    "cron",
    "headers",
    "header_env",
    "bearer_token_env",
    "basic_auth_user",
    "basic_auth_password_env",
    "pointer_file",
    "enabled",
}


@dataclass(frozen=True)
class JobConfig:
    name: str
    source_url: str
    source_queue: str
    target_queue: str | None  # None: the local store
    interval_seconds: float = 30.0
    cron: str | None = None  # crontab expression; replaces the interval when set
    max_messages_per_run: int = 1000
    max_message_bytes: int = 1 << 30
    connect_timeout: float = 5.0
    read_timeout: float = 30.0
    deadline_seconds: float = 600.0
    retries: int = 2
    verify: bool | str = True  # False, True, or a CA bundle path
    mode: str = "default"
    backoff_initial_seconds: float = 5.0
    backoff_max_seconds: float = 600.0
    batch_count: int = 100  # messages per fetch where the source has batches; 1: never batch
    batch_bytes: int = 16 << 20  # byte budget of one batch (the first message always comes)
    wait_seconds: float = 0.0  # long-poll after catching up, bounded by the interval; 0: off
    pointer_file: str | None = None  # default: replikate_state_<sq>_<tq or store>.txt
    # Resolved from the environment at start; never printed.
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    basic_auth: tuple[str, str] | None = field(default=None, repr=False)

    @property
    def target_label(self) -> str:
        return f"queue {self.target_queue}" if self.target_queue else "the store"


@dataclass(frozen=True)
class Settings:
    core: CoreSettings = field(default_factory=CoreSettings)
    config_path: Path | None = None
    jobs: tuple[JobConfig, ...] = ()
    metrics_host: str = "0.0.0.0"
    metrics_port: int = 9101
    log_level: str = "INFO"

    @property
    def data_dir(self) -> Path:
        return self.core.data_dir

    def job(self, name: str) -> JobConfig:
        for job in self.jobs:
            if job.name == name:
                return job
        known = ", ".join(j.name for j in self.jobs) or "none"
        raise SettingsError(f"no job named {name!r} (configured: {known})")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        explicit = env.get(ENV_PREFIX + "CONFIG", "").strip()
        config_path = Path(explicit) if explicit else DEFAULT_CONFIG
        document: dict[str, Any] = {}
        if config_path.exists():
            try:
                document = tomllib.loads(config_path.read_text(encoding="utf-8"))
            except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
                raise SettingsError(f"{config_path}: {exc}") from None
        elif explicit:
            raise SettingsError(f"{ENV_PREFIX}CONFIG={explicit}: no such file")
        else:
            config_path = None
        jobs = load_jobs(document, env)
        return cls(
            core=CoreSettings.from_env(env),
            config_path=config_path,
            jobs=jobs,
            metrics_host=env_str(env, ENV_PREFIX + "METRICS_HOST", "0.0.0.0"),
            metrics_port=env_int(env, ENV_PREFIX + "METRICS_PORT", 9101, minimum=0, maximum=65535),
            log_level=env_str(env, ENV_PREFIX + "LOG_LEVEL", "INFO").upper(),
        )


def load_jobs(document: Mapping[str, Any], env: Mapping[str, str]) -> tuple[JobConfig, ...]:
    unknown = set(document) - {"defaults", "jobs"}
    if unknown:
        raise SettingsError(
            f"unknown top-level key(s) {sorted(unknown)}: use [defaults], [jobs.NAME]"
        )
    defaults = _defaults(_table(document.get("defaults", {}), "[defaults]"), env)
    tables = dict(_table(document.get("jobs", {}), "[jobs]"))
    env_job = _env_job(env)
    if env_job is not None:
        tables[env.get(ENV_PREFIX + "JOB_NAME", "").strip() or ENV_JOB_NAME] = env_job
    jobs = []
    for name, table in sorted(tables.items()):
        table = _table(table, f"[jobs.{name}]")
        if table.get("enabled", True) is False:
            continue
        jobs.append(_job(name, table, defaults, env))
    _check_pointer_files(jobs)
    return tuple(jobs)


def _defaults(table: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    unknown = set(table) - set(DEFAULTS)
    if unknown:
        raise SettingsError(f"[defaults]: unknown key(s) {sorted(unknown)}")
    values = {
        key: _typed(f"[defaults] {key}", table.get(key, d), t) for key, (t, d) in DEFAULTS.items()
    }
    for key, (kind, _default) in DEFAULTS.items():
        raw = env.get(ENV_PREFIX + key.upper(), "").strip()
        if raw:
            values[key] = _from_text(ENV_PREFIX + key.upper(), raw, kind)
    return values


def _env_job(env: Mapping[str, str]) -> dict[str, Any] | None:
    """The single job of ZOSCII_REPLIKATE_SOURCE_URL/_SOURCE_QUEUE/_TARGET_QUEUE/..."""
    url = env.get(ENV_PREFIX + "SOURCE_URL", "").strip()
    if not url:
        return None
    queue = env.get(ENV_PREFIX + "SOURCE_QUEUE", "").strip()
    if not queue:
        raise SettingsError(f"{ENV_PREFIX}SOURCE_URL is set but {ENV_PREFIX}SOURCE_QUEUE is not")
    job: dict[str, Any] = {"source_url": url, "source_queue": queue}
    target = env.get(ENV_PREFIX + "TARGET_QUEUE", "").strip()
    if target:
        job["target_queue"] = target
    cron = env.get(ENV_PREFIX + "CRON", "").strip()
    if cron:
        job["cron"] = cron
    if env.get(ENV_PREFIX + "SOURCE_TOKEN", "").strip():
        job["bearer_token_env"] = ENV_PREFIX + "SOURCE_TOKEN"
    return job


def _job(
    name: str, table: Mapping[str, Any], defaults: Mapping[str, Any], env: Mapping[str, str]
) -> JobConfig:
    where = f"[jobs.{name}]"
    if not _JOB_NAME_RE.fullmatch(name):
        raise SettingsError(f"{where}: job names use 1 to 64 of a-z A-Z 0-9 _ -")
    unknown = set(table) - JOB_KEYS
    if unknown:
        hint = (
            " (secrets go in env vars: use *_env keys)" if unknown & {"token", "password"} else ""
        )
        raise SettingsError(f"{where}: unknown key(s) {sorted(unknown)}{hint}")
    values = dict(defaults)
    for key, (kind, _default) in DEFAULTS.items():
        if key in table:
            values[key] = _typed(f"{where} {key}", table[key], kind)

    url = _required_str(table, "source_url", where)
    if not url.startswith(("http://", "https://")):
        raise SettingsError(f"{where} source_url: expected an http:// or https:// URL")
    source_queue = _queue(_required_str(table, "source_queue", where), f"{where} source_queue")
    target = table.get("target_queue")
    target_queue = _queue(target, f"{where} target_queue") if target else None
    cron = table.get("cron")
    if cron is not None:
        cron = _cron(cron, f"{where} cron")
    if values["mode"] == "compat":
        values["mode"] = "original"
    if values["mode"] not in MODES:
        raise SettingsError(f"{where} mode: {values['mode']!r}, expected one of {MODES}")
    for key in ("interval_seconds", "connect_timeout", "read_timeout", "deadline_seconds"):
        if values[key] <= 0:
            raise SettingsError(f"{where} {key}: must be more than 0")
    if values["max_messages_per_run"] < 1 or values["max_message_bytes"] < 1:
        raise SettingsError(f"{where}: max_messages_per_run and max_message_bytes must be >= 1")
    if not 1 <= values["batch_count"] <= MAX_BATCH_COUNT:
        raise SettingsError(f"{where} batch_count: must be 1 to {MAX_BATCH_COUNT} (1: no batches)")
    if values["batch_bytes"] < 1:
        raise SettingsError(f"{where} batch_bytes: must be >= 1")
    if not 0 <= values["wait_seconds"] <= 3600:
        raise SettingsError(f"{where} wait_seconds: must be 0 (off) to 3600")
    verify: bool | str = values["verify_tls"]
    if values["ca_bundle"]:
        if not verify:
            raise SettingsError(f"{where}: ca_bundle given but verify_tls is false")
        if not Path(values["ca_bundle"]).is_file():
            raise SettingsError(f"{where} ca_bundle: {values['ca_bundle']} is not a file")
        verify = values["ca_bundle"]
    pointer_file = table.get("pointer_file")
    if pointer_file is not None and (
        not isinstance(pointer_file, str) or not _POINTER_FILE_RE.fullmatch(pointer_file)
    ):
        raise SettingsError(f"{where} pointer_file: expected replikate_state_<a-zA-Z0-9_->.txt")
    return JobConfig(
        name=name,
        source_url=url,
        source_queue=source_queue,
        target_queue=target_queue,
        interval_seconds=values["interval_seconds"],
        cron=cron,
        max_messages_per_run=values["max_messages_per_run"],
        max_message_bytes=values["max_message_bytes"],
        connect_timeout=values["connect_timeout"],
        read_timeout=values["read_timeout"],
        deadline_seconds=values["deadline_seconds"],
        retries=values["retries"],
        verify=verify,
        mode=values["mode"],
        backoff_initial_seconds=values["backoff_initial_seconds"],
        backoff_max_seconds=values["backoff_max_seconds"],
        batch_count=values["batch_count"],
        batch_bytes=values["batch_bytes"],
        wait_seconds=values["wait_seconds"],
        pointer_file=pointer_file,
        headers=_headers(table, where, env),
        basic_auth=_basic_auth(table, where, env),
    )


def _headers(table: Mapping[str, Any], where: str, env: Mapping[str, str]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for header, value in _table(table.get("headers", {}), f"{where} headers").items():
        if header.lower() in _SECRET_HEADERS:
            raise SettingsError(
                f"{where} headers: {header} looks like a secret; name an env var in header_env"
            )
        headers[header] = _plain_str(value, f"{where} headers.{header}")
    for header, var in _table(table.get("header_env", {}), f"{where} header_env").items():
        headers[header] = _secret(env, _plain_str(var, f"{where} header_env.{header}"), where)
    token_var = table.get("bearer_token_env")
    if token_var:
        token = _secret(env, _plain_str(token_var, f"{where} bearer_token_env"), where)
        headers["Authorization"] = f"Bearer {token}"
    return headers


def _basic_auth(
    table: Mapping[str, Any], where: str, env: Mapping[str, str]
) -> tuple[str, str] | None:
    user = table.get("basic_auth_user")
    var = table.get("basic_auth_password_env")
    if user is None and var is None:
        return None
    if user is None or var is None:
        raise SettingsError(f"{where}: basic_auth_user and basic_auth_password_env go together")
    return _plain_str(user, f"{where} basic_auth_user"), _secret(env, _plain_str(var, where), where)


def _secret(env: Mapping[str, str], var: str, where: str) -> str:
    value = env.get(var, "")
    if not value:
        raise SettingsError(f"{where}: environment variable {var} (a secret) is not set")
    return value


def _check_pointer_files(jobs: list[JobConfig]) -> None:
    """Two jobs sharing one pointer file would skip each other's messages: refuse."""
    from zoscii_replikate.pointer import state_file_name

    seen: dict[str, str] = {}
    for job in jobs:
        key = state_file_name(job)
        if key in seen:
            raise SettingsError(
                f"jobs {seen[key]!r} and {job.name!r} would share the pointer file {key}; "
                "give one of them its own pointer_file"
            )
        seen[key] = job.name


def _queue(raw: Any, where: str) -> str:
    if not isinstance(raw, str):
        raise SettingsError(f"{where}: expected a queue name")
    try:
        queue = clean_queue(raw)
    except InvalidInput as exc:
        raise SettingsError(f"{where}: {exc}") from None
    if queue != raw:
        raise SettingsError(f"{where}: write queue names in lower case ({queue!r})")
    return queue


def _cron(raw: Any, where: str) -> str:
    from apscheduler.triggers.cron import CronTrigger

    if not isinstance(raw, str):
        raise SettingsError(f"{where}: expected a crontab expression")
    try:
        CronTrigger.from_crontab(raw, timezone="UTC")
    except ValueError as exc:
        raise SettingsError(f"{where}: {exc}") from None
    return raw


def _table(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SettingsError(f"{where}: expected a table")
    return value


def _required_str(table: Mapping[str, Any], key: str, where: str) -> str:
    value = table.get(key)
    if not isinstance(value, str) or not value.strip():
        raise SettingsError(f"{where}: {key} is required")
    return value.strip()


def _plain_str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise SettingsError(f"{where}: expected a string")
    return value


def _typed(where: str, value: Any, kind: type) -> Any:
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise SettingsError(f"{where}: expected {kind.__name__}, got {value!r}")
    return value


def _from_text(name: str, raw: str, kind: type) -> Any:
    if kind is bool:
        lowered = raw.lower()
        if lowered in {"1", "true", "yes", "on"}:
            return True
        if lowered in {"0", "false", "no", "off"}:
            return False
        raise SettingsError(f"{name}={raw!r}: expected true or false")
    if kind is str:
        return raw
    try:
        return kind(raw.replace("_", ""))
    except ValueError:
        raise SettingsError(f"{name}={raw!r}: expected {kind.__name__}") from None
