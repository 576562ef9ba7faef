"""claireup's configuration, read once from ``ZOSCII_*`` environment variables.

A bad value (an unparsable cron expression, a negative age) fails at start with the
variable's name, not at midnight when the first run would have happened.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from apscheduler.triggers.cron import CronTrigger

from zosciimq.settings import CoreSettings, SettingsError, env_bool, env_float, env_int, env_str

DEFAULT_SCHEDULE = "0 0 * * *"  # midnight UTC, as the original
DEFAULT_TEMP_MAX_AGE_SECONDS = 86_400
DEFAULT_PORT = 9102
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


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
    schedule: str = DEFAULT_SCHEDULE
    temp_max_age_seconds: int = DEFAULT_TEMP_MAX_AGE_SECONDS
    dry_run: bool = False
    host: str = "0.0.0.0"
    port: int = DEFAULT_PORT
    progress_every_files: int = 100_000
    progress_every_seconds: float = 30.0
    report_limit: int = 100  # unparsable files named one by one in the log per area and run
    log_level: str = "INFO"

    @property
    def data_dir(self) -> Path:
        return self.core.data_dir

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        settings = cls(
            core=CoreSettings.from_env(env),
            schedule=env_str(env, "ZOSCII_CLAIREUP_SCHEDULE", DEFAULT_SCHEDULE),
            temp_max_age_seconds=env_int(
                env,
                "ZOSCII_CLAIREUP_TEMP_MAX_AGE_SECONDS",
                DEFAULT_TEMP_MAX_AGE_SECONDS,
                minimum=60,
            ),
            dry_run=env_bool(env, "ZOSCII_CLAIREUP_DRY_RUN", False),
            host=env_str(env, "ZOSCII_CLAIREUP_HOST", "0.0.0.0"),
            port=env_int(env, "ZOSCII_CLAIREUP_PORT", DEFAULT_PORT, minimum=0, maximum=65535),
            progress_every_files=env_int(
                env, "ZOSCII_CLAIREUP_PROGRESS_EVERY_FILES", 100_000, minimum=1
            ),
            progress_every_seconds=env_float(
                env, "ZOSCII_CLAIREUP_PROGRESS_EVERY_SECONDS", 30.0, minimum=0.1
            ),
            report_limit=env_int(env, "ZOSCII_CLAIREUP_REPORT_LIMIT", 100, minimum=0),
            log_level=env_str(env, "ZOSCII_LOG_LEVEL", "INFO").upper(),
        )
        settings.validate()
        return settings

    def validate(self) -> None:
        cron_trigger(self.schedule)
        if self.log_level not in LOG_LEVELS:
            raise SettingsError(f"ZOSCII_LOG_LEVEL={self.log_level!r}: use one of {LOG_LEVELS}")

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
