"""Reading typed settings from the environment, shared by every service.

Each service declares one frozen dataclass of its settings. A field read from the
environment says so with ``env_field``: the variable, its bounds and the default, which
is written there once (``read_env`` uses it when the variable is unset). A bad value
fails at start with the variable's name instead of somewhere deep in a request.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from zosciimq.core.checkpoint import Durability

T = TypeVar("T")


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
    if maximum is not None and not minimum <= value <= maximum:
        raise SettingsError(f"{name}={value}: must be between {minimum} and {maximum}")
    if value < minimum:
        raise SettingsError(f"{name}={value}: must be at least {minimum}")
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
class Setting:
    """How a field is read and checked, from the environment (``env``: its variable) and
    from an operator's TOML file (``zosciimq.settings_file``: the field's name is the
    key), so a value means the same wherever it is written.

    Numbers are at least ``minimum`` (0 unless said: settings are counts and sizes), at
    most ``maximum`` and, with ``above``, more than it; a string (or each item of a list)
    is one of ``choices`` when they are given. ``parse`` reads what the field's type
    cannot say, from the variable's text or the file's TOML value; it replaces the check
    by type and raises ValueError (or SettingsError) saying what it expected. A file
    must give a ``required`` key.
    """

    env: str | None = None
    minimum: float | None = None
    maximum: float | None = None
    above: float | None = None
    choices: tuple[str, ...] = ()
    parse: Callable[[Any], Any] | None = None
    required: bool = False


def setting(
    default: Any = dataclasses.MISSING,
    *,
    default_factory: Callable[[], Any] | Any = dataclasses.MISSING,
    env: str | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
    above: float | None = None,
    choices: tuple[str, ...] = (),
    parse: Callable[[Any], Any] | None = None,
    required: bool = False,
    secret: bool = False,
) -> Any:
    """A dataclass field read by ``read_env`` (when it has an ``env`` variable) or from a
    file's table (``zosciimq.settings_file.read_table``); its default lives only here. A
    ``secret`` (a token) is left out of the repr, so no log line shows it."""
    return dataclasses.field(
        default=default,
        default_factory=default_factory,
        repr=not secret,
        metadata={
            "setting": Setting(env, minimum, maximum, above, choices, parse, required),
        },
    )


def env_field(name: str, default: Any = dataclasses.MISSING, **checks: Any) -> Any:
    """A ``setting`` read from the environment variable ``name``."""
    return setting(default, env=name, **checks)


def settings_of(cls: type) -> dict[str, Setting]:
    """``cls``'s fields that are settings (``setting``, ``env_field``), by field name."""
    return {
        item.name: item.metadata["setting"]
        for item in dataclasses.fields(cls)
        if "setting" in item.metadata
    }


def read_env(cls: type[T], env: Mapping[str, str] | None = None, **given: Any) -> T:
    """An instance of the settings dataclass ``cls`` from ``env``.

    Every ``env_field`` whose variable is set (and not blank) is parsed by its type
    (``int``, ``float``, ``bool``, ``str``, ``Path``, ``tuple[str, ...]``,
    ``frozenset[str]``) or its own ``parse``, and checked against its bounds; an unset
    one keeps the field's default. ``given`` fields are taken as they are.
    """
    return cls(**{**env_values(cls, env, skip=given), **given})


def env_values(
    cls: type, env: Mapping[str, str] | None = None, *, skip: Collection[str] = ()
) -> dict[str, Any]:
    """The values of ``cls``'s fields whose variables are set in ``env`` (not blank),
    parsed and checked, by field name; fields named in ``skip`` are not read."""
    env = os.environ if env is None else env
    hints = typing.get_type_hints(cls)
    values = {}
    for name, spec in settings_of(cls).items():
        if spec.env is None or name in skip:
            continue
        raw = env.get(spec.env, "").strip()
        if raw:
            values[name] = parse_env(spec, hints[name], raw)
    return values


def parse_env(spec: Setting, kind: Any, raw: str) -> Any:
    """The text ``raw`` of ``spec``'s variable as a value of type ``kind``, checked."""
    name = spec.env or "?"
    if spec.parse is not None:
        try:
            value = spec.parse(raw)
        except SettingsError:
            raise
        except ValueError as exc:
            raise SettingsError(f"{name}={raw!r}: {exc}") from None
        return check_choices(spec, value, name)
    kind = unless_none(kind)
    if kind is bool:
        return env_bool({name: raw}, name, False)
    minimum = 0 if spec.minimum is None else spec.minimum  # settings are counts and sizes
    if kind is int:
        maximum = None if spec.maximum is None else int(spec.maximum)
        value = env_int({name: raw}, name, 0, minimum=int(minimum), maximum=maximum)
    elif kind is float:
        value = env_float({name: raw}, name, 0.0, minimum=minimum)
        if spec.maximum is not None and value > spec.maximum:
            raise SettingsError(f"{name}={value}: must be at most {spec.maximum}")
    elif kind is Path:
        return Path(raw)
    elif typing.get_origin(kind) in (tuple, frozenset):
        items = typing.get_origin(kind)(env_list({name: raw}, name, ()))
        return check_choices(spec, items, name)
    else:
        return check_choices(spec, raw, name)
    if spec.above is not None and value <= spec.above:
        raise SettingsError(f"{name}={value}: must be more than {spec.above}")
    return value


def check_choices(spec: Setting, value: Any, where: str) -> Any:
    """``value`` (a string, or each item of a collection) when it is one of the spec's
    ``choices`` (or there are none), else SettingsError naming ``where``."""
    if not spec.choices:
        return value
    items = {value} if isinstance(value, str) else set(value)
    unknown = items - set(spec.choices)
    if unknown:
        raise SettingsError(
            f"{where}: {', '.join(sorted(map(repr, unknown)))} is not one of "
            f"{', '.join(map(repr, spec.choices))}"
        )
    return value


def unless_none(kind: Any) -> Any:
    """``X`` for ``X | None``; other types as they are."""
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    if typing.get_origin(kind) in (typing.Union, types.UnionType) and len(args) == 1:
        return args[0]
    return kind


DURABILITY_MODES = ("sync", "interval")  # zosciimq.core.checkpoint.Mode


def _durability_mode(raw: str) -> str:
    mode = raw.strip().lower()
    if mode not in DURABILITY_MODES:
        raise SettingsError(
            f"ZOSCII_DURABILITY={raw!r}: expected sync (answer after the log is flushed) "
            "or interval (flush it every ZOSCII_FLUSH_INTERVAL_MS)"
        )
    return mode


@dataclass(frozen=True)
class CoreSettings:
    """What every service needs to find and interpret the data directory."""

    data_dir: Path = env_field("ZOSCII_DATA_DIR", Path("/data"))
    default_retention_days: int = env_field(
        "ZOSCII_DEFAULT_RETENTION_DAYS", 30, minimum=0, maximum=9999
    )
    nonce_window_seconds: int = env_field("ZOSCII_NONCE_WINDOW_SECONDS", 86_400, minimum=1)
    # docs/durability.md: when a commit is answered, and how often the write-ahead logs
    # are flushed (interval) and checkpointed.
    durability_mode: str = env_field("ZOSCII_DURABILITY", "sync", parse=_durability_mode)
    flush_interval_ms: int = env_field("ZOSCII_FLUSH_INTERVAL_MS", 10, minimum=1, maximum=1000)
    checkpoint_seconds: float = env_field(
        "ZOSCII_CHECKPOINT_SECONDS", 1.0, minimum=0.05, maximum=300
    )

    def durability(self) -> Durability:
        """The durability the core commits with. ``interval`` is refused on a network
        file system: another host's writes would be judged after a restart of this one
        by a log this host never saw flushed (docs/durability.md, "File systems")."""
        # Imported here: the core's policy reads SettingsError from this module, so this
        # module is imported before the core package and must not import it itself.
        from zosciimq.core.checkpoint import (
            NETWORK_FILE_SYSTEMS,
            Durability,
            Mode,
            file_system_of,
        )

        shared = file_system_of(self.data_dir) in NETWORK_FILE_SYSTEMS
        if shared and self.durability_mode == Mode.INTERVAL:
            raise SettingsError(
                f"ZOSCII_DURABILITY=interval: {self.data_dir} is on "
                f"{file_system_of(self.data_dir)}, a network file system; use sync there"
            )
        return Durability(
            mode=Mode(self.durability_mode),
            flush_interval=self.flush_interval_ms / 1000,
            checkpoint_seconds=self.checkpoint_seconds,
            shared=shared,
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> CoreSettings:
        return read_env(cls, env)
