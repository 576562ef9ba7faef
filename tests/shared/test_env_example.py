""".env.example names every setting: each service's, and each variable a compose file reads.

An operator learns what can be set from that file, so a setting added to a service (an
``env_field``) or to a compose file (``${VAR}``) without a line there is a test failure.
A line is ``NAME=`` or ``#NAME=`` (commented out: the default applies).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from zoscii_live.settings import LiveSettings
from zoscii_phpmq.settings import Settings as PhpmqSettings
from zoscii_zmq.settings import Settings as ZmqSettings

from zoscii_api.settings import ApiSettings
from zoscii_claireup.settings import Settings as ClaireupSettings
from zoscii_replikate.settings import DEFAULTS as REPLIKATE_JOB_DEFAULTS
from zoscii_replikate.settings import ENV_PREFIX as REPLIKATE_PREFIX
from zoscii_replikate.settings import Settings as ReplikateSettings
from zoscii_statissa.settings import Settings as StatissaSettings

REPO = Path(__file__).resolve().parents[2]
ENV_EXAMPLE = REPO / ".env.example"
SOURCES = [REPO / "src", REPO / "services", REPO / "deploy"]
# ZOSCII_* names in the sources that are no setting of an operator's: what the command
# line gives the commands it runs (zoscii work/tail), the api's Flask config key, and the
# image's build argument, build cache and internals (deploy/Dockerfile).
NOT_SETTINGS = {
    *(f"ZOSCII_{n}" for n in ("QUEUE", "GROUP", "NAME", "RECEIPT", "DELIVERIES", "SIZE")),
    *(f"ZOSCII_{n}" for n in ("TTL", "PATH", "LEASE_SECONDS")),
    "ZOSCII_SETTINGS",
    "ZOSCII_UID",
    "ZOSCII_WHEEL_CACHE",
    "ZOSCII_SERVICE",
    "ZOSCII_HEALTHCHECK_URL",
}
COMPOSE_FILES = [REPO / "docker-compose.yml", *sorted((REPO / "deploy").glob("compose.*.yml"))]
SERVICES = {
    "api": ApiSettings,
    "claireup": ClaireupSettings,
    "phpmq": PhpmqSettings,
    "replikate": ReplikateSettings,
    "statissa": StatissaSettings,
    "live": LiveSettings,
    "zmq": ZmqSettings,
}
# Read by zosciimq.service (access control, queue policy, logging) rather than a field.
SHARED = (
    "ZOSCII_AUTH_FILE",
    "ZOSCII_AUTH_CLIENTS",
    "ZOSCII_POLICY_FILE",
    "ZOSCII_LOG_LEVEL",
    "ZOSCII_LOG_FORMAT",
)


def env_fields(cls: type) -> set[str]:
    """The variables of ``cls``'s ``env_field``s, and of its settings-dataclass fields
    (``core``: CoreSettings) whose defaults are instances of one."""
    names = set()
    for item in dataclasses.fields(cls):
        spec = item.metadata.get("setting")
        if spec is not None:
            if spec.env is not None:
                names.add(spec.env)
        elif item.default_factory is not dataclasses.MISSING:
            nested = type(item.default_factory())
            if dataclasses.is_dataclass(nested):
                names |= env_fields(nested)
    return names


def listed() -> set[str]:
    return set(re.findall(r"^#?([A-Z][A-Z0-9_]*)=", ENV_EXAMPLE.read_text(), re.MULTILINE))


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_every_setting_of_each_service_has_a_line(service: str) -> None:
    names = env_fields(SERVICES[service])
    assert "ZOSCII_DATA_DIR" in names  # the core's settings are seen too
    missing = sorted(names - listed())
    assert not missing, f"{service}: not in .env.example: {missing}"


def test_the_shared_settings_and_replikates_job_defaults_have_a_line() -> None:
    names = set(SHARED) | {REPLIKATE_PREFIX + key.upper() for key in REPLIKATE_JOB_DEFAULTS}
    assert not sorted(names - listed())


def test_every_variable_a_compose_file_reads_has_a_line() -> None:
    used = set()
    for path in COMPOSE_FILES:
        used |= set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)", path.read_text()))
    assert "ZOSCII_PHPMQ_ADDRESS" in used  # the files were read
    assert not sorted(used - listed())


def test_every_zoscii_variable_the_sources_name_has_a_line() -> None:
    """Beyond the settings dataclasses: what shared code, the CLI, the proxy's
    entrypoint and the compose files read by name."""
    named = set()
    for root in SOURCES:
        for path in root.rglob("*"):
            if path.is_file() and path.suffix in {".py", ".sh", ".yml", ".template", ".conf", ""}:
                text = path.read_text(errors="replace")
                # not a prefix such as ZOSCII_REPLIKATE_ (its keys are named elsewhere)
                named |= set(re.findall(r"\b(ZOSCII_[A-Z0-9_]*[A-Z0-9])\b(?!_)", text))
    assert {"ZOSCII_PROXY_UPSTREAM", "ZOSCII_ZMQ_HOST", "ZOSCII_URL"} <= named
    assert not sorted(named - NOT_SETTINGS - listed())
