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

from zoscii_api.settings import ApiSettings
from zoscii_claireup.settings import Settings as ClaireupSettings
from zoscii_replikate.settings import DEFAULTS as REPLIKATE_JOB_DEFAULTS
from zoscii_replikate.settings import ENV_PREFIX as REPLIKATE_PREFIX
from zoscii_replikate.settings import Settings as ReplikateSettings
from zoscii_statissa.settings import Settings as StatissaSettings

REPO = Path(__file__).resolve().parents[2]
ENV_EXAMPLE = REPO / ".env.example"
COMPOSE_FILES = [REPO / "docker-compose.yml", *sorted((REPO / "deploy").glob("compose.*.yml"))]
SERVICES = {
    "api": ApiSettings,
    "claireup": ClaireupSettings,
    "phpmq": PhpmqSettings,
    "replikate": ReplikateSettings,
    "statissa": StatissaSettings,
    "live": LiveSettings,
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
