"""claireup's configuration: one declaration per setting, read once from the environment.

A bad value (an unparsable cron expression, a negative age) fails at start with the
variable's name, not at midnight when the first run would have happened.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from apscheduler.triggers.cron import CronTrigger

from zosciimq.service.config import read_service_env
from zosciimq.service.logs import log_settings
from zosciimq.settings import CoreSettings, SettingsError, env_field


def cron_trigger(expression: str) -> CronTrigger:
    """The schedule as an APScheduler trigger, always in UTC (the container's TZ is ignored)."""
    try:
        return CronTrigger.from_crontab(expression, timezone="UTC")
    except ValueError as exc:
        raise SettingsError(
            f"schedule {expression!r} (ZOSCII_CLAIREUP_SCHEDULE or --schedule): "
            f"not a valid 5-field cron expression ({exc})"
        ) from None


@dataclass(frozen=True)
class Settings:
    core: CoreSettings = field(default_factory=CoreSettings)
    # midnight UTC, as the original
    schedule: str = env_field("ZOSCII_CLAIREUP_SCHEDULE", "0 0 * * *")
    # at least a minute: an upload in progress must never look abandoned
    temp_max_age_seconds: int = env_field(
        "ZOSCII_CLAIREUP_TEMP_MAX_AGE_SECONDS", 86_400, minimum=60
    )
    dry_run: bool = env_field("ZOSCII_CLAIREUP_DRY_RUN", False)
    # consumer-group state: remove that of vanished queues, compact logs of live groups
    groups: bool = env_field("ZOSCII_CLAIREUP_GROUPS", True)
    host: str = env_field("ZOSCII_CLAIREUP_HOST", "0.0.0.0")  # the ops port's address
    port: int = env_field("ZOSCII_CLAIREUP_PORT", 9102, minimum=0, maximum=65535)
    progress_every_files: int = env_field(
        "ZOSCII_CLAIREUP_PROGRESS_EVERY_FILES", 100_000, minimum=1
    )
    progress_every_seconds: float = env_field(
        "ZOSCII_CLAIREUP_PROGRESS_EVERY_SECONDS", 30.0, minimum=0.1
    )
    # unparsable files named one by one in the log per run; beyond it only counted
    report_limit: int = env_field("ZOSCII_CLAIREUP_REPORT_LIMIT", 100, minimum=0)
    # (level, format) from ZOSCII_LOG_LEVEL and ZOSCII_LOG_FORMAT, as every service
    log: tuple[str, str] = field(default_factory=lambda: log_settings({}))

    @property
    def data_dir(self) -> Path:
        return self.core.data_dir

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        settings = read_service_env(cls, env)
        settings.validate()
        return settings

    def validate(self) -> None:
        cron_trigger(self.schedule)

    def with_overrides(
        self,
        *,
        schedule: str | None = None,
        data_dir: Path | None = None,
        dry_run: bool | None = None,
    ) -> Settings:
        """The settings with command-line flags applied on top of the environment."""
        changed = self
        if schedule is not None:
            changed = replace(changed, schedule=schedule)
        if data_dir is not None:
            changed = replace(changed, core=replace(changed.core, data_dir=Path(data_dir)))
        if dry_run:
            changed = replace(changed, dry_run=True)
        changed.validate()
        return changed
