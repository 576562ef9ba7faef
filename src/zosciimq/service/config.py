"""Reading a service's settings: its own ``env_field`` variables (``zosciimq.settings``)
plus the ones every service shares, read here, once, the same way for all.

A service's settings dataclass declares the shared parts it needs under these names,
and ``read_service_env`` fills them from the environment:

* ``core``: ``CoreSettings`` (``ZOSCII_DATA_DIR``, default retention, nonce window);
* ``log``: (level, format) from ``ZOSCII_LOG_LEVEL`` and ``ZOSCII_LOG_FORMAT``;
* ``access``: the api's clients (``ZOSCII_AUTH_FILE`` / ``ZOSCII_AUTH_CLIENTS``);
* ``policy``: the queue policy (``ZOSCII_POLICY_FILE``, ``zosciimq.core.policy``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from zosciimq.access import load_access_control
from zosciimq.core.policy import PolicySource
from zosciimq.service.logs import log_settings
from zosciimq.settings import CoreSettings, read_env

T = TypeVar("T")


def policy_source(env: Mapping[str, str]) -> PolicySource:
    """The queue policy of ``ZOSCII_POLICY_FILE`` (none when it is unset or blank)."""
    return PolicySource(env.get("ZOSCII_POLICY_FILE", "").strip() or None)


# field name -> how it is read; in this order, so the first bad variable is the one named
SHARED: dict[str, Callable[[Mapping[str, str]], Any]] = {
    "core": CoreSettings.from_env,
    "log": log_settings,
    "access": load_access_control,
    "policy": policy_source,
}


def read_service_env(cls: type[T], env: Mapping[str, str] | None = None, **given: Any) -> T:
    """``read_env(cls, env, **given)`` with each of the ``SHARED`` fields that ``cls``
    declares (and ``given`` does not) read from ``env`` as every service reads it."""
    env = os.environ if env is None else env
    declared = {item.name for item in dataclasses.fields(cls)}  # type: ignore[arg-type]
    for name, read in SHARED.items():
        if name in declared and name not in given:
            given[name] = read(env)
    return read_env(cls, env, **given)
