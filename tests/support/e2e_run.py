"""What every end-to-end module needs: the engine's client, the run's id, the services."""

from __future__ import annotations

import os
from dataclasses import dataclass

import docker

from tests.e2e.compose_spec import ServiceSpec


def image_tag_env() -> dict[str, str]:
    """The variables the compose file interpolates into image names (``make`` exports
    IMAGE_TAG; the default is dev)."""
    return {"IMAGE_TAG": os.environ.get("IMAGE_TAG", "") or "dev"}


@dataclass(frozen=True)
class E2E:
    """What every e2e module needs: a client, this run's id, the compose services."""

    client: docker.DockerClient
    run_id: str
    services: dict[str, ServiceSpec]
