"""The compose command line, as a user runs it: ``docker compose`` (v2) when the Docker
CLI has it, else docker-compose (v1.29). Shared by the tests that run it."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
from collections.abc import Sequence

import pytest

from tests.e2e.compose_spec import REPO_ROOT

log = logging.getLogger(__name__)


def compose_command() -> list[str]:
    """``docker compose`` (v2) if the CLI has it, else docker-compose (v1); neither: the
    calling test is SKIPPED, saying so."""
    docker_cli = shutil.which("docker")
    if docker_cli:
        probe = subprocess.run(
            [docker_cli, "compose", "version"], capture_output=True, timeout=30, check=False
        )
        if probe.returncode == 0:
            return [docker_cli, "compose"]
    legacy = shutil.which("docker-compose")
    if legacy:
        return [legacy]
    pytest.skip("neither `docker compose` nor `docker-compose` is installed")


def clean_environment() -> dict[str, str]:
    """The shell environment without anything that would change the stack: the tests
    pass their own settings (an env file, or variables they set) instead of the
    project's .env."""
    dropped = ("ZOSCII_", "COMPOSE_", "IMAGE_TAG", "BASE_IMAGE", "JAVA_BASE_IMAGE", "TZ")
    return {k: v for k, v in os.environ.items() if not k.startswith(dropped)}


def run_compose(base: Sequence[str], *args: str, timeout: float) -> None:
    """``base`` (the compose command with its project, env file and files) and ``args``,
    from the repository root in ``clean_environment()``; a failure fails the test with
    compose's output."""
    started = time.monotonic()
    done = subprocess.run(
        [*base, *args],
        cwd=REPO_ROOT,
        env=clean_environment(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    log.info("compose %s: %.1f s", " ".join(args), time.monotonic() - started)
