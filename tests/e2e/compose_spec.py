"""The shipped docker-compose.yml, read as data, so that the test stacks run the images
with the same environment, ports, hardening and health checks as a real deployment.

Only what a stack built with testcontainers needs is extracted. The compose file's
variable interpolation (``${VAR:-default}``) is done here for the fields that use it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
DATA_VOLUME = "zoscii_data"

_VARIABLE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}")
_DURATION = re.compile(r"^(?:(?P<m>\d+)m)?(?:(?P<s>\d+(?:\.\d+)?)s)?$")


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """Compose's ``${VAR}`` / ``${VAR:-default}`` (unset or empty: the default)."""

    def value(match: re.Match[str]) -> str:
        found = env.get(match["name"], "")
        if found:
            return found
        if match["default"] is None:
            raise ValueError(f"{text!r}: {match['name']} is not set and has no default")
        return match["default"]

    return _VARIABLE.sub(value, text)


def duration_seconds(text: str) -> float:
    """A compose duration such as ``15s``, ``1m30s`` or ``90s``."""
    match = _DURATION.match(str(text).strip())
    if not match or not (match["m"] or match["s"]):
        raise ValueError(f"unsupported compose duration {text!r}")
    return int(match["m"] or 0) * 60 + float(match["s"] or 0)


@dataclass(frozen=True)
class PortSpec:
    """One ``ports:`` entry: the container port and the host address it is bound to."""

    container_port: int
    host_ip: str  # "" = all interfaces


def parse_port(entry: str, env: Mapping[str, str]) -> PortSpec:
    parts = interpolate(str(entry), env).split(":")
    container = int(parts[-1].split("/")[0])
    host_ip = parts[0] if len(parts) == 3 else ""
    return PortSpec(container, host_ip)


@dataclass(frozen=True)
class ServiceSpec:
    """A compose service as the test stacks run it."""

    name: str
    image: str
    fixed_env: dict[str, str]  # entries with a value in the compose file
    passthrough_env: frozenset[str]  # entries without one: passed only when set
    ports: tuple[PortSpec, ...]
    read_only: bool
    tmpfs: tuple[str, ...]
    cap_drop: tuple[str, ...]
    security_opt: tuple[str, ...]
    data_mount: str  # where the zoscii_data volume is mounted ("" for the proxy: no data)
    healthcheck_test: tuple[str, ...]
    healthcheck_timeout: float
    healthcheck_retries: int
    healthcheck_start_period: float
    stop_grace_seconds: float

    def environment(self, overrides: Mapping[str, str]) -> dict[str, str]:
        """The container's environment: the compose file's fixed values plus ``overrides``,
        which may only name variables the compose file passes to this service (a variable
        it does not list could not be set by a deployment either)."""
        unknown = set(overrides) - self.passthrough_env - set(self.fixed_env)
        if unknown:
            raise AssertionError(
                f"docker-compose.yml does not pass {sorted(unknown)} to {self.name}"
            )
        return {**self.fixed_env, **overrides}

    def healthcheck(self, interval_seconds: float) -> dict[str, Any]:
        """The compose health check for docker-py, with the probe interval shortened:
        Docker 20.10 has no start_interval, so the shipped 15 s interval would make every
        wait for "healthy" (also after each restart) last at least 15 s."""

        def ns(seconds: float) -> int:
            return int(seconds * 1e9)

        return {
            "test": list(self.healthcheck_test),
            "interval": ns(interval_seconds),
            "timeout": ns(self.healthcheck_timeout),
            "retries": self.healthcheck_retries,
            "start_period": ns(self.healthcheck_start_period),
        }


def load_services(
    path: Path = COMPOSE_FILE, env: Mapping[str, str] | None = None
) -> dict[str, ServiceSpec]:
    """Every service of the compose file (YAML anchors and ``<<`` merges resolved)."""
    env = {} if env is None else env
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    services = {}
    for name, raw in document["services"].items():
        environment = raw.get("environment") or {}
        if not isinstance(environment, dict):
            raise ValueError(f"{name}: environment must be a mapping in {path.name}")
        mounts = [str(v) for v in raw.get("volumes", []) if str(v).startswith(DATA_VOLUME + ":")]
        if len(mounts) > 1:
            raise ValueError(f"{name}: expected one {DATA_VOLUME} mount, found {mounts}")
        check = raw["healthcheck"]
        test = check["test"]
        if not isinstance(test, list) or test[0] not in ("CMD", "CMD-SHELL"):
            raise ValueError(f"{name}: unsupported healthcheck test {test!r}")
        services[name] = ServiceSpec(
            name=name,
            image=interpolate(raw["image"], env),
            fixed_env={
                k: interpolate(str(v), env) for k, v in environment.items() if v is not None
            },
            passthrough_env=frozenset(k for k, v in environment.items() if v is None),
            ports=tuple(parse_port(p, env) for p in raw.get("ports", [])),
            read_only=bool(raw.get("read_only", False)),
            tmpfs=tuple(raw.get("tmpfs", [])),
            cap_drop=tuple(raw.get("cap_drop", [])),
            security_opt=tuple(raw.get("security_opt", [])),
            data_mount=mounts[0].split(":")[1] if mounts else "",
            healthcheck_test=tuple(test),
            healthcheck_timeout=duration_seconds(check.get("timeout", "30s")),
            healthcheck_retries=int(check.get("retries", 3)),
            healthcheck_start_period=duration_seconds(check.get("start_period", "0s")),
            stop_grace_seconds=duration_seconds(raw.get("stop_grace_period", "10s")),
        )
    return services
