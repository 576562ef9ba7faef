"""The environment of a service started as a child process by a test."""

from __future__ import annotations

import os
from collections.abc import Mapping


def clean_env(extra: Mapping[str, str]) -> dict[str, str]:
    """This process's environment without the machine's ZOSCII_ and PROMETHEUS settings
    (a developer's shell must not change what a test starts), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ZOSCII_", "PROMETHEUS"))}
    return {**env, **extra}
