"""read_env: one default per setting, parsed by type, checked against its bounds."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from zosciimq.settings import SettingsError, env_field, read_env


@dataclass(frozen=True)
class Example:
    count: int = env_field("X_COUNT", 5, minimum=1, maximum=10)
    ratio: float = env_field("X_RATIO", 0.5)
    flag: bool = env_field("X_FLAG", False)
    path: Path = env_field("X_PATH", Path("/data"))
    names: tuple[str, ...] = env_field("X_NAMES", ())
    upper: str = env_field("X_UPPER", "A", parse=str.upper)
    plain: str = "not from the environment"


def test_unset_and_blank_keep_the_one_default() -> None:
    assert read_env(Example, {}) == Example()
    assert read_env(Example, {"X_COUNT": "  ", "X_FLAG": ""}) == Example()


def test_values_are_parsed_by_their_type() -> None:
    got = read_env(
        Example,
        {
            "X_COUNT": "7",
            "X_RATIO": "2.5",
            "X_FLAG": "yes",
            "X_PATH": "/srv/mq",
            "X_NAMES": "a, b ,,c",
            "X_UPPER": "low",
        },
    )
    assert got == Example(7, 2.5, True, Path("/srv/mq"), ("a", "b", "c"), "LOW")


@pytest.mark.parametrize(
    ("variable", "value"),
    [("X_COUNT", "0"), ("X_COUNT", "11"), ("X_COUNT", "many"), ("X_RATIO", "-1"), ("X_FLAG", "2")],
)
def test_a_bad_value_names_its_variable(variable: str, value: str) -> None:
    with pytest.raises(SettingsError, match=variable):
        read_env(Example, {variable: value})


def test_given_fields_win() -> None:
    assert read_env(Example, {"X_COUNT": "7"}, count=3).count == 3


def test_durability_is_read_and_checked() -> None:
    from zosciimq.core.checkpoint import Durability, Mode
    from zosciimq.settings import CoreSettings

    assert CoreSettings.from_env({}).durability() == Durability()
    relaxed = CoreSettings.from_env(
        {"ZOSCII_DURABILITY": "Interval", "ZOSCII_FLUSH_INTERVAL_MS": "25"}
    ).durability()
    assert relaxed.mode is Mode.INTERVAL and relaxed.flush_interval == 0.025
    with pytest.raises(SettingsError, match="ZOSCII_DURABILITY='fast'"):
        CoreSettings.from_env({"ZOSCII_DURABILITY": "fast"})
    with pytest.raises(SettingsError, match="ZOSCII_FLUSH_INTERVAL_MS"):
        CoreSettings.from_env({"ZOSCII_FLUSH_INTERVAL_MS": "0"})


def test_interval_durability_is_refused_on_a_network_file_system(monkeypatch) -> None:
    """Another host's unflushed log could not be judged after this one restarts."""
    from zosciimq.core import checkpoint
    from zosciimq.settings import CoreSettings

    monkeypatch.setattr(checkpoint, "file_system_of", lambda path: "nfs4")
    settings = CoreSettings.from_env({"ZOSCII_DURABILITY": "interval"})
    with pytest.raises(SettingsError, match="nfs4, a network file system"):
        settings.durability()
    shared = CoreSettings.from_env({}).durability()
    assert shared.shared, "on a shared volume each commit flushes the index for other hosts"


def test_the_file_system_of_a_path_is_read_from_mountinfo(tmp_path: Path) -> None:
    from zosciimq.core.checkpoint import file_system_of

    assert file_system_of("/proc/self") == "proc"
    assert file_system_of(tmp_path) != ""
