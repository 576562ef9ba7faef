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

Each default is written once: on its ``JobConfig`` field (the ``inherited`` ones are the
``[defaults]`` keys, their types and their ``ZOSCII_REPLIKATE_<KEY>`` variables) or, for
the service's own settings, on its ``env_field``.
"""

from __future__ import annotations

import os
import re
import tomllib
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from zoscii_replikate.pointer import pointer_path
from zosciimq.core import DataDir
from zosciimq.core.names import clean_queue
from zosciimq.errors import InvalidInput
from zosciimq.service.config import read_service_env
from zosciimq.service.logs import LEVELS, log_settings
from zosciimq.settings import (
    CoreSettings,
    SettingsError,
    env_bool,
    env_field,
    env_float,
    env_int,
    env_str,
)

DEFAULT_CONFIG = Path("/etc/zoscii/replikate.toml")
ENV_PREFIX = "ZOSCII_REPLIKATE_"
CONFIG_VAR = ENV_PREFIX + "CONFIG"
ENV_JOB_NAME = "env"
_JOB_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
_POINTER_FILE_RE = re.compile(r"replikate_state_[A-Za-z0-9_-]+\.txt")
_SECRET_HEADERS = {"authorization", "proxy-authorization", "cookie", "x-api-key"}
MODES = ("default", "original")
MAX_BATCH_COUNT = 1000  # the api's default ZOSCII_MAX_BATCH_COUNT


def inherited(default: Any) -> Any:
    """A job key with a default for every job: ``[defaults]`` and ``ZOSCII_REPLIKATE_<KEY>``
    may change it for all jobs, a job's own table for itself."""
    return field(default=default, metadata={"inherited": True})


@dataclass(frozen=True)
class JobConfig:
    """One replication job: where from, where to, when, and how patiently."""

    name: str
    source_url: str
    source_queue: str
    target_queue: str | None  # None: the local store
    cron: str | None = None  # crontab expression; replaces the interval when set
    pointer_file: str | None = None  # default: replikate_state_<sq>_<tq or store>.txt
    interval_seconds: float = inherited(30.0)
    # 0: none, a run goes on until it has caught up (the link is the bound); a cap keeps
    # one job from holding a thread the others need (more jobs than threads).
    max_messages_per_run: int = inherited(0)
    max_message_bytes: int = inherited(1 << 30)
    connect_timeout: float = inherited(5.0)
    read_timeout: float = inherited(30.0)
    deadline_seconds: float = inherited(600.0)
    retries: int = inherited(2)
    # A fetch without a byte from the source for this long (beyond its long-poll) is a
    # stall: logged and counted in errors_total{reason="stalled"} at once, while the
    # transport goes on waiting for its read timeout and retries.
    stall_seconds: float = inherited(10.0)
    verify_tls: bool = inherited(True)
    ca_bundle: str = inherited("")  # a CA file for the source (implies verify_tls)
    mode: str = inherited("default")  # or "original": only what replikate.php sends
    backoff_initial_seconds: float = inherited(5.0)
    backoff_max_seconds: float = inherited(600.0)
    batch_count: int = inherited(100)  # messages per fetch where the source has batches
    batch_bytes: int = inherited(16 << 20)  # byte budget of a batch (the first always comes)
    wait_seconds: float = inherited(0.0)  # long-poll after catching up (within the interval)
    # A source name dated further ahead than this is refused: a hostile source could
    # otherwise push the pointer to 9999 and hide every later message.
    max_future_seconds: float = inherited(3600.0)
    # Resolved from the environment at start; never printed.
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    basic_auth: tuple[str, str] | None = field(default=None, repr=False)

    @property
    def verify(self) -> bool | str:
        """TLS verification as the client takes it: False, True or a CA bundle's path."""
        return (self.ca_bundle or True) if self.verify_tls else False

    @property
    def target_label(self) -> str:
        return f"queue {self.target_queue}" if self.target_queue else "the store"


def _inherited_keys() -> dict[str, tuple[type, Any]]:
    hints = typing.get_type_hints(JobConfig)
    return {
        item.name: (hints[item.name], item.default)
        for item in fields(JobConfig)
        if item.metadata.get("inherited")
    }


# [defaults] keys: name -> (type, default), from the fields above.
DEFAULTS = _inherited_keys()
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
# How ZOSCII_REPLIKATE_<KEY> is read, by the key's type: (env, variable, default) -> value.
_FROM_ENV: dict[type, Callable[[Mapping[str, str], str, Any], Any]] = {
    bool: env_bool,
    int: env_int,
    float: env_float,
    str: env_str,
}


@dataclass(frozen=True)
class Settings:
    """Everything the replicator reads at start: where the data is, the jobs, the ops port
    and the logging."""

    core: CoreSettings = field(default_factory=CoreSettings)
    config_path: Path | None = None
    jobs: tuple[JobConfig, ...] = ()
    metrics_host: str = env_field(ENV_PREFIX + "METRICS_HOST", "0.0.0.0")
    metrics_port: int = env_field(ENV_PREFIX + "METRICS_PORT", 9101, maximum=65535)
    # (level, format) as every service reads them (zosciimq.service.logs), see _logs().
    log: tuple[str, str] = field(default_factory=lambda: log_settings({}))

    @property
    def data_dir(self) -> Path:
        return self.core.data_dir

    def job(self, name: str) -> JobConfig:
        for job in self.jobs:
            if job.name == name:
                return job
        known = ", ".join(j.name for j in self.jobs) or "none"
        raise SettingsError(f"no job named {name!r} (configured: {known})")

    def only(self, names: Sequence[str] | None) -> Settings:
        """These settings with only the named jobs (all of them for None or none)."""
        if not names:
            return self
        wanted = {self.job(name).name for name in names}
        return replace(self, jobs=tuple(j for j in self.jobs if j.name in wanted))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        core = CoreSettings.from_env(env)
        config_path, document = _read_config(env)
        return read_service_env(
            cls,
            env,
            core=core,
            config_path=config_path,
            jobs=load_jobs(document, env, DataDir(core.data_dir)),
            log=_logs(env),
        )


def _read_config(env: Mapping[str, str]) -> tuple[Path | None, dict[str, Any]]:
    """The jobs file and its document; an explicitly named file must exist."""
    explicit = env.get(CONFIG_VAR, "").strip()
    config_path = Path(explicit) if explicit else DEFAULT_CONFIG
    if config_path.exists():
        try:
            return config_path, tomllib.loads(config_path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise SettingsError(f"{config_path}: {exc}") from None
    if explicit:
        raise SettingsError(f"{CONFIG_VAR}={explicit}: no such file")
    return None, {}


def _logs(env: Mapping[str, str]) -> tuple[str, str]:
    """``ZOSCII_LOG_LEVEL`` and ``ZOSCII_LOG_FORMAT`` as every service reads them; the
    replicator's older ``ZOSCII_REPLIKATE_LOG_LEVEL`` (still in docker-compose.yml) wins."""
    own = env.get(ENV_PREFIX + "LOG_LEVEL", "").strip().upper()
    if own and own not in LEVELS:
        raise SettingsError(f"{ENV_PREFIX}LOG_LEVEL={own!r}: use one of {', '.join(LEVELS)}")
    return log_settings({**env, "ZOSCII_LOG_LEVEL": own} if own else env)


def load_jobs(
    document: Mapping[str, Any], env: Mapping[str, str], data_dir: DataDir
) -> tuple[JobConfig, ...]:
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
    _check_pointer_files(jobs, data_dir)
    return tuple(jobs)


def _defaults(table: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """Every inherited key: the field's default, else [defaults], else ZOSCII_REPLIKATE_<KEY>."""
    unknown = set(table) - set(DEFAULTS)
    if unknown:
        raise SettingsError(f"[defaults]: unknown key(s) {sorted(unknown)}")
    values = {}
    for key, (kind, default) in DEFAULTS.items():
        value = _typed(f"[defaults] {key}", table.get(key, default), kind)
        values[key] = _FROM_ENV[kind](env, ENV_PREFIX + key.upper(), value)
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
    if values["mode"] == "compat":
        values["mode"] = "original"

    url = _required_str(table, "source_url", where)
    if not url.startswith(("http://", "https://")):
        raise SettingsError(f"{where} source_url: expected an http:// or https:// URL")
    target = table.get("target_queue")
    cron = table.get("cron")
    job = JobConfig(
        name=name,
        source_url=url,
        source_queue=_queue(_required_str(table, "source_queue", where), f"{where} source_queue"),
        target_queue=_queue(target, f"{where} target_queue") if target else None,
        cron=None if cron is None else _cron(cron, f"{where} cron"),
        pointer_file=_pointer_file(table.get("pointer_file"), where),
        headers=_headers(table, where, env),
        basic_auth=_basic_auth(table, where, env),
        **values,
    )
    _check_values(job, where)
    return job


def _check_values(job: JobConfig, where: str) -> None:
    """The inherited keys' values that their types allow but a run could not use."""
    if job.mode not in MODES:
        raise SettingsError(f"{where} mode: {job.mode!r}, expected one of {MODES}")
    for key in (
        "interval_seconds",
        "connect_timeout",
        "read_timeout",
        "deadline_seconds",
        "stall_seconds",
    ):
        if getattr(job, key) <= 0:
            raise SettingsError(f"{where} {key}: must be more than 0")
    if job.max_messages_per_run < 0:
        raise SettingsError(f"{where} max_messages_per_run: must be >= 0 (0: no cap)")
    if job.max_message_bytes < 1:
        raise SettingsError(f"{where} max_message_bytes: must be >= 1")
    if not 1 <= job.batch_count <= MAX_BATCH_COUNT:
        raise SettingsError(f"{where} batch_count: must be 1 to {MAX_BATCH_COUNT} (1: no batches)")
    if job.batch_bytes < 1:
        raise SettingsError(f"{where} batch_bytes: must be >= 1")
    if not 0 <= job.wait_seconds <= 3600:
        raise SettingsError(f"{where} wait_seconds: must be 0 (off) to 3600")
    if job.max_future_seconds < 60:
        raise SettingsError(f"{where} max_future_seconds: must be at least 60")
    if job.ca_bundle:
        if not job.verify_tls:
            raise SettingsError(f"{where}: ca_bundle given but verify_tls is false")
        if not Path(job.ca_bundle).is_file():
            raise SettingsError(f"{where} ca_bundle: {job.ca_bundle} is not a file")


def _pointer_file(value: Any, where: str) -> str | None:
    if value is not None and (not isinstance(value, str) or not _POINTER_FILE_RE.fullmatch(value)):
        raise SettingsError(f"{where} pointer_file: expected replikate_state_<a-zA-Z0-9_->.txt")
    return value


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


def _check_pointer_files(jobs: list[JobConfig], data_dir: DataDir) -> None:
    """Two jobs sharing one pointer file would skip each other's messages: refuse."""
    seen: dict[Path, str] = {}
    for job in jobs:
        path = pointer_path(data_dir, job)
        if path in seen:
            raise SettingsError(
                f"jobs {seen[path]!r} and {job.name!r} would share the pointer file {path.name}; "
                "give one of them its own pointer_file"
            )
        seen[path] = job.name


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
    """A TOML value as the key's type (an integer is a float where a float is expected)."""
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise SettingsError(f"{where}: expected {kind.__name__}, got {value!r}")
    return value
