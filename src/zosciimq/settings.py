"""Reading typed settings from the environment, shared by every service.

Each service declares one frozen dataclass of its settings with a ``from_env``
classmethod built from these helpers, so a bad value fails at start with the variable's
name instead of somewhere deep in a request.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


class SettingsError(ValueError):
    """A variable that is set but cannot be used."""


def env_str(env: Mapping[str, str], name: str, default: str) -> str:
    value = env.get(name, "").strip()
    return value or default


def env_int(
    env: Mapping[str, str], name: str, default: int, *, minimum: int = 0, maximum: int | None = None
) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw.replace("_", ""))
    except ValueError:
        raise SettingsError(f"{name}={raw!r}: expected a whole number") from None
    if value < minimum or (maximum is not None and value > maximum):
        raise SettingsError(f"{name}={value}: must be between {minimum} and {maximum}")
    return value


def env_float(env: Mapping[str, str], name: str, default: float, *, minimum: float = 0.0) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r}: expected a number") from None
    if value < minimum:
        raise SettingsError(f"{name}={value}: must be at least {minimum}")
    return value


def env_bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in {"1", "true", "yes", "on"}:
        return True
    if raw in {"0", "false", "no", "off"}:
        return False
    raise SettingsError(f"{name}={raw!r}: expected true or false")


def env_list(env: Mapping[str, str], name: str, default: tuple[str, ...]) -> tuple[str, ...]:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    return tuple(item.strip() for item in raw.split(",") if item.strip())


@dataclass(frozen=True)
class CoreSettings:
    """What every service needs to find and interpret the data directory."""

    data_dir: Path = Path("/data")
    default_retention_days: int = 0
    nonce_window_seconds: int = 86_400

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> CoreSettings:
        env = os.environ if env is None else env
        return cls(
            data_dir=Path(env_str(env, "ZOSCII_DATA_DIR", "/data")),
            default_retention_days=env_int(
                env, "ZOSCII_DEFAULT_RETENTION_DAYS", 0, minimum=0, maximum=9999
            ),
            nonce_window_seconds=env_int(env, "ZOSCII_NONCE_WINDOW_SECONDS", 86_400, minimum=1),
        )
