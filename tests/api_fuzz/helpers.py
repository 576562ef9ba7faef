"""Helpers of the api fuzz tests: the api's OpenAPI document and a real app on a data dir."""

from __future__ import annotations

from pathlib import Path

import yaml
from flask import Flask

from tests.support import api_app

OPENAPI_PATH = Path(__file__).resolve().parents[2] / "services/api/zoscii_api/openapi.yaml"


def load_document() -> dict:
    with OPENAPI_PATH.open(encoding="utf-8") as file:
        return yaml.safe_load(file)


def make_app(data_dir: Path, **overrides: object) -> Flask:
    """The api as gunicorn would build it, on ``data_dir`` (small limits unless overridden)."""
    fields: dict = {"max_message_bytes": 1 << 16, "max_field_bytes": 4096, "max_wait_seconds": 0}
    fields.update(overrides)
    return api_app.make_app(data_dir, **fields)
