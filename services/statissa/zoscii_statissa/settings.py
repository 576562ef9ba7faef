"""statissa's configuration, read once from the environment at start."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from zosciimq.settings import (
    CoreSettings,
    SettingsError,
    env_int,
    env_list,
    env_str,
)


@dataclass(frozen=True)
class Settings:
    core: CoreSettings = field(default_factory=CoreSettings)
    host: str = "0.0.0.0"
    port: int = 9103
    interval_seconds: int = 300
    spark_master: str = "local[*]"
    spark_driver_memory: str = "1g"
    spark_local_dir: Path = Path("/tmp/zoscii-statissa")
    spark_conf: tuple[tuple[str, str], ...] = ()

    @property
    def data_dir(self) -> Path:
        return self.core.data_dir

    @property
    def spark_is_local(self) -> bool:
        return self.spark_master.startswith("local")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        return cls(
            core=CoreSettings.from_env(env),
            host=env_str(env, "ZOSCII_STATISSA_HOST", "0.0.0.0"),
            port=env_int(env, "ZOSCII_STATISSA_PORT", 9103, minimum=1, maximum=65535),
            interval_seconds=env_int(env, "ZOSCII_STATISSA_INTERVAL_SECONDS", 300, minimum=1),
            spark_master=env_str(env, "ZOSCII_SPARK_MASTER", "local[*]"),
            spark_driver_memory=env_str(env, "ZOSCII_SPARK_DRIVER_MEMORY", "1g"),
            spark_local_dir=Path(env_str(env, "ZOSCII_SPARK_LOCAL_DIR", "/tmp/zoscii-statissa")),
            spark_conf=_parse_spark_conf(env_list(env, "ZOSCII_SPARK_CONF", ())),
        )


def _parse_spark_conf(items: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """``key=value`` pairs passed to Spark as they are (cluster images, executor sizes...)."""
    pairs = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip().startswith("spark."):
            raise SettingsError(f"ZOSCII_SPARK_CONF: {item!r} is not spark.<key>=<value>")
        pairs.append((key.strip(), value.strip()))
    return tuple(pairs)
