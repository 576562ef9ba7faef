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
value, or a key no job has, fails at start, naming the file, the job and the key.

Each key is written once, on its ``JobConfig`` field: its type, default and bounds
(the ``inherited`` ones are the ``[defaults]`` keys and their ``ZOSCII_REPLIKATE_<KEY>``
variables), read by the reader every operator file shares (``zosciimq.settings_file``);
the service's own settings are ``env_field``s.
"""

from __future__ import annotations

import os
import re
import typing
from collections.abc import Mapping, Sequence
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
    Setting,
    SettingsError,
    env_field,
    parse_env,
    setting,
    settings_of,
)
from zosciimq.settings_file import load_toml, read_table, table_at

DEFAULT_CONFIG = Path("/etc/zoscii/replikate.toml")
ENV_PREFIX = "ZOSCII_REPLIKATE_"
CONFIG_VAR = ENV_PREFIX + "CONFIG"
ENV_JOB_NAME = "env"
_JOB_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
_POINTER_FILE_RE = re.compile(r"replikate_state_[A-Za-z0-9_-]+\.txt")
_SECRET_HEADERS = {"authorization", "proxy-authorization", "cookie", "x-api-key"}
MODES = ("default", "original")
MAX_BATCH_COUNT = 1000  # the api's default ZOSCII_MAX_BATCH_COUNT


def inherited(default: Any, **checks: Any) -> Any:
    """A job key with a default for every job: ``[defaults]`` and ``ZOSCII_REPLIKATE_<KEY>``
    may change it for all jobs, a job's own table for itself. ``checks``: its bounds or
    choices (``zosciimq.settings.Setting``), the same in the file and the environment."""
    return field(default=default, metadata={"setting": Setting(**checks), "inherited": True})


def _url(value: object) -> str:
    if not isinstance(value, str) or not value.strip().startswith(("http://", "https://")):
        raise ValueError("expected an http:// or https:// URL")
    return value.strip()


def _queue(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError("expected a queue name")
    try:
        queue = clean_queue(value)
    except InvalidInput as exc:
        raise ValueError(str(exc)) from None
    if queue != value:
        raise ValueError(f"write queue names in lower case ({queue!r})")
    return queue


def _source_queue(value: object) -> str:
    return _queue(value.strip() if isinstance(value, str) else value)


def _target_queue(value: object) -> str | None:
    return _queue(value) if value else None  # "": the store


def _cron(value: object) -> str:
    from apscheduler.triggers.cron import CronTrigger

    if not isinstance(value, str):
        raise ValueError("expected a crontab expression")
    CronTrigger.from_crontab(value, timezone="UTC")  # ValueError says what is wrong
    return value


def _pointer_file(value: object) -> str:
    if not isinstance(value, str) or not _POINTER_FILE_RE.fullmatch(value):
        raise ValueError("expected replikate_state_<a-zA-Z0-9_->.txt")
    return value


def _mode(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected one of {MODES}")
    return "original" if value == "compat" else value  # compat: the older name


@dataclass(frozen=True)
class JobConfig:
    """One replication job: where from, where to, when, and how patiently. Its settings
    are the keys of a job's table (``zosciimq.settings_file``), checked the same way in
    ``[defaults]``, a job's table and the ``ZOSCII_REPLIKATE_<KEY>`` variables."""

    name: str
    source_url: str = setting(parse=_url, required=True)
    source_queue: str = setting(parse=_source_queue, required=True)
    target_queue: str | None = setting(parse=_target_queue)  # None: the local store
    cron: str | None = setting(None, parse=_cron)  # crontab; replaces the interval when set
    pointer_file: str | None = setting(None, parse=_pointer_file)
    # default pointer file: replikate_state_<sq>_<tq or store>.txt
    interval_seconds: float = inherited(30.0, above=0)
    # 0: none, a run goes on until it has caught up (the link is the bound); a cap keeps
    # one job from holding a thread the others need (more jobs than threads).
    max_messages_per_run: int = inherited(0)
    max_message_bytes: int = inherited(1 << 30, minimum=1)
    connect_timeout: float = inherited(5.0, above=0)
    read_timeout: float = inherited(30.0, above=0)
    deadline_seconds: float = inherited(600.0, above=0)
    retries: int = inherited(2)
    # A fetch without a byte from the source for this long (beyond its long-poll) is a
    # stall: logged and counted in errors_total{reason="stalled"} at once, while the
    # transport goes on waiting for its read timeout and retries.
    stall_seconds: float = inherited(10.0, above=0)
    verify_tls: bool = inherited(True)
    ca_bundle: str = inherited("")  # a CA file for the source (implies verify_tls)
    # or "original": only what replikate.php sends
    mode: str = inherited("default", parse=_mode, choices=MODES)
    backoff_initial_seconds: float = inherited(5.0)
    backoff_max_seconds: float = inherited(600.0)
    # messages per fetch where the source has batches (1: no batches)
    batch_count: int = inherited(100, minimum=1, maximum=MAX_BATCH_COUNT)
    batch_bytes: int = inherited(16 << 20, minimum=1)  # a batch's budget (the first always comes)
    # long-poll after catching up (within the interval); 0: off
    wait_seconds: float = inherited(0.0, maximum=3600)
    # A source name dated further ahead than this is refused: a hostile source could
    # otherwise push the pointer to 9999 and hide every later message.
    max_future_seconds: float = inherited(3600.0, minimum=60)
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
# A job's keys that are no field of JobConfig: read by _headers, _basic_auth, load_jobs.
EXTRA_JOB_KEYS = (
    "headers",
    "header_env",
    "bearer_token_env",
    "basic_auth_user",
    "basic_auth_password_env",
    "enabled",
)


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
            jobs=load_jobs(document, env, DataDir(core.data_dir), str(config_path or CONFIG_VAR)),
            log=_logs(env),
        )


def _read_config(env: Mapping[str, str]) -> tuple[Path | None, dict[str, Any]]:
    """The jobs file and its document; an explicitly named file must exist."""
    explicit = env.get(CONFIG_VAR, "").strip()
    config_path = Path(explicit) if explicit else DEFAULT_CONFIG
    if config_path.exists():
        try:
            text = config_path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SettingsError(f"{config_path}: {exc}") from None
        return config_path, load_toml(text, str(config_path))
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
    document: Mapping[str, Any],
    env: Mapping[str, str],
    data_dir: DataDir,
    source: str = CONFIG_VAR,
) -> tuple[JobConfig, ...]:
    """The enabled jobs of ``document`` (the file ``source``) and the environment's."""
    unknown = set(document) - {"defaults", "jobs"}
    if unknown:
        raise SettingsError(
            f"{source}: unknown top-level key(s) {sorted(unknown)}: use [defaults], [jobs.NAME]"
        )
    at = f"{source}: [defaults]"
    defaults = _defaults(table_at(document.get("defaults", {}), at), env, at)
    where = f"{source}: [jobs.{{}}]"
    tables = {
        name: (table, where.format(name))
        for name, table in table_at(document.get("jobs", {}), f"{source}: [jobs]").items()
    }
    env_job = _env_job(env)
    if env_job is not None:
        name = env.get(ENV_PREFIX + "JOB_NAME", "").strip() or ENV_JOB_NAME
        tables[name] = (env_job, f"{ENV_PREFIX}SOURCE_URL (job {name})")
    jobs = []
    for name, (table, at) in sorted(tables.items()):
        table = table_at(table, at)
        if table.get("enabled", True) is False:
            continue
        jobs.append(_job(name, table, defaults, env, at))
    _check_pointer_files(jobs, data_dir)
    return tuple(jobs)


def _defaults(table: Mapping[str, Any], env: Mapping[str, str], where: str) -> dict[str, Any]:
    """Every inherited key: the field's default, else [defaults], else ZOSCII_REPLIKATE_<KEY>."""
    values = {key: default for key, (_kind, default) in DEFAULTS.items()}
    values.update(read_table(JobConfig, table, where, only=DEFAULTS))
    specs = settings_of(JobConfig)
    for key, (kind, _default) in DEFAULTS.items():
        variable = ENV_PREFIX + key.upper()
        raw = env.get(variable, "").strip()
        if raw:
            values[key] = parse_env(replace(specs[key], env=variable), kind, raw)
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
    name: str,
    table: Mapping[str, Any],
    defaults: Mapping[str, Any],
    env: Mapping[str, str],
    where: str,
) -> JobConfig:
    if not _JOB_NAME_RE.fullmatch(name):
        raise SettingsError(f"{where}: job names use 1 to 64 of a-z A-Z 0-9 _ -")
    secrets = sorted(set(table) & {"token", "password"})
    if secrets:
        raise SettingsError(f"{where}: {secrets}: secrets go in env vars: use the *_env keys")
    values = {**defaults, "target_queue": None}
    values.update(read_table(JobConfig, table, where, extra=EXTRA_JOB_KEYS))
    job = JobConfig(
        name=name,
        headers=_headers(table, where, env),
        basic_auth=_basic_auth(table, where, env),
        **values,
    )
    _check_ca_bundle(job, where)
    return job


def _check_ca_bundle(job: JobConfig, where: str) -> None:
    """What the keys' own checks cannot see: a CA file with verification off, or none."""
    if job.ca_bundle:
        if not job.verify_tls:
            raise SettingsError(f"{where}: ca_bundle given but verify_tls is false")
        if not Path(job.ca_bundle).is_file():
            raise SettingsError(f"{where}: ca_bundle: {job.ca_bundle} is not a file")


def _headers(table: Mapping[str, Any], where: str, env: Mapping[str, str]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for header, value in table_at(table.get("headers", {}), f"{where}: headers").items():
        if header.lower() in _SECRET_HEADERS:
            raise SettingsError(
                f"{where} headers: {header} looks like a secret; name an env var in header_env"
            )
        headers[header] = _plain_str(value, f"{where} headers.{header}")
    for header, var in table_at(table.get("header_env", {}), f"{where}: header_env").items():
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


def _plain_str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise SettingsError(f"{where}: expected a string")
    return value
