"""Fixtures of the end-to-end tests: the Docker engine, the images, the run's names.

No Docker engine answering: every e2e test is SKIPPED with the reason. An engine but a
missing image: every test fails at setup with "run make images" (never a pull: there is
no registry). testcontainers' reaper (Ryuk) is an image from a registry too, so it is
disabled; the fixtures remove what they create themselves, and a session finalizer
removes anything left with this run's label.
"""

from __future__ import annotations

import os

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

import logging
import uuid
from collections.abc import Iterator

import docker
import docker.errors
import pytest

from tests.e2e.compose_spec import load_services
from tests.e2e.stack import image_missing, remove_everything_labelled
from tests.support.e2e_run import E2E, image_tag_env

log = logging.getLogger(__name__)


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except Exception as exc:  # any failure to reach it means the same: no engine
        pytest.skip(f"no Docker engine answers ({type(exc).__name__}: {exc})")
    yield client
    client.close()


@pytest.fixture(scope="session")
def e2e(docker_client: docker.DockerClient) -> Iterator[E2E]:
    services = load_services(env=image_tag_env())
    missing = [s.image for s in services.values() if image_missing(docker_client, s.image)]
    if missing:
        pytest.fail(f"images missing: {', '.join(missing)}: run make images", pytrace=False)
    run_id = uuid.uuid4().hex[:10]
    yield E2E(docker_client, run_id, services)
    left = remove_everything_labelled(docker_client, run_id)
    if left:
        log.warning("removed objects a fixture left behind: %s", left)


@pytest.fixture(autouse=True)
def _require_engine(e2e: E2E) -> None:
    """Every test here needs the engine and the images, also one that uses neither
    fixture directly, so that it is skipped or fails for the right reason."""
