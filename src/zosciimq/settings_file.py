"""Reading the operator's TOML files into typed fields: the clients (``zosciimq.access``),
the queue policy (``zosciimq.core.policy``) and replikate's jobs.

A table's keys are the fields of a dataclass declared with ``setting`` or ``env_field``
(``zosciimq.settings``), checked by the same metadata as the environment's variables:
the field's type, bounds and choices, or its own ``parse``. A key that is no field is an
error naming the file, the table and the key: a misspelt ``max_mesages`` that is quietly
ignored is a limit that quietly does not apply.
"""

from __future__ import annotations

import tomllib
import typing
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from zosciimq.settings import Setting, SettingsError, check_choices, settings_of, unless_none

__all__ = ["check_keys", "load_toml", "read_table", "table_at"]


def load_toml(text: str, source: str) -> dict[str, Any]:
    """The document in ``text``; SettingsError naming ``source`` (the file) when it is
    no TOML."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"{source}: {exc}") from None


def check_keys(table: Mapping[str, Any], known: Collection[str], where: str) -> None:
    """Refuse a key of ``table`` that is not ``known``, naming ``where`` (file and table)."""
    unknown = set(table) - set(known)
    if unknown:
        raise SettingsError(
            f"{where}: unknown key(s) {sorted(unknown)}; known: {', '.join(sorted(known))}"
        )


def table_at(value: Any, where: str) -> dict[str, Any]:
    """``value`` when it is a TOML table, else SettingsError naming ``where``."""
    if not isinstance(value, dict):
        raise SettingsError(f"{where}: expected a table")
    return value


def read_table(
    cls: type,
    table: Mapping[str, Any],
    where: str,
    *,
    extra: Collection[str] = (),
    only: Collection[str] | None = None,
) -> dict[str, Any]:
    """The values ``table`` gives for ``cls``'s settings, checked, by field name.

    Its keys may be those settings (``only``: these of them) and the ``extra`` keys its
    caller reads itself; anything else is an error. A ``required`` setting must be
    there; one that is not keeps its default (the caller's to apply).
    """
    specs = settings_of(cls)
    if only is not None:
        specs = {name: spec for name, spec in specs.items() if name in only}
    check_keys(table, [*specs, *extra], where)
    hints = typing.get_type_hints(cls)
    values = {}
    for name, spec in specs.items():
        if name in table:
            values[name] = parse_value(spec, hints[name], table[name], f"{where}: {name}")
        elif spec.required:
            raise SettingsError(f"{where}: {name} is required")
    return values


def parse_value(spec: Setting, kind: Any, value: Any, where: str) -> Any:
    """A TOML ``value`` as the field's type ``kind``, checked against ``spec``;
    ``where`` names the file, the table and the key."""
    if spec.parse is not None:
        try:
            value = spec.parse(value)
        except ValueError as exc:  # SettingsError too: its text is what was expected
            raise SettingsError(f"{where}: {exc}") from None
    else:
        value = _typed(kind, value, where)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            _check_bounds(spec, value, where)
    return check_choices(spec, value, where)


def _typed(kind: Any, value: Any, where: str) -> Any:
    """``value`` when TOML wrote it as ``kind`` (an integer is a float where a float is
    expected; a list of strings is a tuple or frozenset), else SettingsError."""
    kind = unless_none(kind)  # TOML has no null: an X | None is given as an X
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is bool and isinstance(value, bool):
        return value
    if kind is int and number and isinstance(value, int):
        return value
    if kind is float and number:
        return float(value)
    if kind is str and isinstance(value, str):
        return value
    if kind is Path and isinstance(value, str):
        return Path(value)
    origin = typing.get_origin(kind)
    if origin in (tuple, frozenset):
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return origin(value)
        raise SettingsError(f"{where} must be a list of strings, not {value!r}")
    what = {
        bool: "true or false",
        int: "a whole number",
        float: "a number",
        str: "a string",
        Path: "a path (a string)",
    }.get(kind, f"a {getattr(kind, '__name__', kind)}")
    raise SettingsError(f"{where} must be {what}, not {value!r}")


def _check_bounds(spec: Setting, value: float, where: str) -> None:
    low = 0 if spec.minimum is None else spec.minimum  # settings are counts and sizes
    high = spec.maximum
    if value < low or (high is not None and value > high):
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise SettingsError(f"{where} = {value}: must be {bounds}")
    if spec.above is not None and value <= spec.above:
        raise SettingsError(f"{where} = {value}: must be more than {spec.above}")
