"""The operator's TOML files (clients, queue policy, replikate's jobs) are read by one
reader on the fields' metadata: an unknown key is an error naming the file and the key,
and a value is checked as its environment variable would be."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from zoscii_replikate.settings import Settings as ReplikateSettings
from zosciimq.access import load_access_control
from zosciimq.core.policy import PolicySource
from zosciimq.settings import SettingsError, env_field, read_env, setting
from zosciimq.settings_file import read_table

TOKEN = "ab" * 32
CLIENT = f'[[clients]]\nname = "partner"\ntoken_sha256 = "{TOKEN}"\nread = ["outbox"]\n'
JOB = '[jobs.a]\nsource_url = "http://hq/"\nsource_queue = "orders"\n'


def _clients(path: Path) -> object:
    return load_access_control({"ZOSCII_AUTH_FILE": str(path)})


def _policy(path: Path) -> object:
    return PolicySource(path)


def _jobs(path: Path) -> object:
    return ReplikateSettings.from_env(
        {"ZOSCII_REPLIKATE_CONFIG": str(path), "ZOSCII_DATA_DIR": str(path.parent)}
    )


# (how the file is loaded, a valid file, the same file with a misspelt key, that key)
FILES = {
    "clients": (_clients, CLIENT, CLIENT + 'wirte = ["inbox"]\n', "wirte"),
    "policy": (
        _policy,
        '[queues."q"]\nmax_messages = 3\n',
        '[queues."q"]\nmax_mesages = 3\n',
        "max_mesages",
    ),
    "jobs": (_jobs, JOB, JOB + "intervall_seconds = 5\n", "intervall_seconds"),
}


@pytest.mark.parametrize("kind", sorted(FILES))
def test_a_misspelt_key_fails_at_start_naming_the_file_and_the_key(
    tmp_path: Path, kind: str
) -> None:
    load, good, bad, misspelt = FILES[kind]
    path = tmp_path / f"{kind}-file.toml"
    path.write_text(good)
    load(path)
    path.write_text(bad)
    with pytest.raises(SettingsError) as caught:
        load(path)
    message = str(caught.value)
    assert str(path) in message
    assert misspelt in message


def test_the_clients_file_refuses_an_unknown_table_and_a_string_for_a_list(tmp_path) -> None:
    path = tmp_path / "clients.toml"
    path.write_text(CLIENT + "[limits]\nrate = 5\n")
    with pytest.raises(SettingsError, match=r"clients\.toml: unknown key\(s\) \['limits'\]"):
        _clients(path)
    # read = "outbox" once became the patterns o, u, t, b, o, x: one-letter queues
    path.write_text(CLIENT.replace('read = ["outbox"]', 'read = "outbox"'))
    with pytest.raises(SettingsError, match=r"#1: read must be a list of strings"):
        _clients(path)
    inline = {"ZOSCII_AUTH_CLIENTS": CLIENT + 'group = ["billing"]\n'}
    with pytest.raises(SettingsError, match=r"ZOSCII_AUTH_CLIENTS: \[\[clients\]\] #1.*'group'"):
        load_access_control(inline)


def test_the_clients_file_still_reads_what_it_always_did(tmp_path) -> None:
    path = tmp_path / "clients.toml"
    path.write_text(
        CLIENT + 'write = ["inbox"]\ngroups = ["Billing"]\nactions = ["store", "admin"]\n'
        f'[[clients]]\ntoken_sha256 = "{"cd" * 32}"\nusername = "old"\n'
    )
    partner, second = load_access_control({"ZOSCII_AUTH_FILE": str(path)}).clients
    assert (partner.name, partner.read, partner.write) == ("partner", ("outbox",), ("inbox",))
    assert partner.groups == ("billing",) and partner.actions == {"store", "admin"}
    assert partner.token_sha256 == bytes.fromhex(TOKEN)
    assert (second.name, second.username, second.groups) == ("client-2", "old", None)


def test_a_bad_replikate_default_fails_even_before_a_job_uses_it(tmp_path) -> None:
    path = tmp_path / "replikate.toml"
    path.write_text("[defaults]\nbatch_count = 0\n")
    with pytest.raises(SettingsError, match=r"replikate\.toml: \[defaults\]: batch_count = 0"):
        _jobs(path)


@dataclass(frozen=True)
class Example:
    count: int = env_field("X_COUNT", 5, minimum=1, maximum=10)
    ratio: float = env_field("X_RATIO", 0.5, above=0)
    mode: str = env_field("X_MODE", "fast", choices=("fast", "safe"))
    names: tuple[str, ...] = setting(())
    url: str = setting("", parse=lambda v: v if str(v).startswith("http") else int("x"))
    token: str = setting("", required=True)


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("count", 11, "count = 11: must be between 1 and 10"),
        ("count", 2.5, "count must be a whole number"),
        ("count", True, "count must be a whole number"),
        ("ratio", 0, "ratio = 0.0: must be more than 0"),
        ("mode", "slow", "mode: 'slow' is not one of 'fast', 'safe'"),
        ("names", ["a", 1], "names must be a list of strings"),
        ("url", "ftp://x", "url: invalid literal"),
    ],
)
def test_a_table_is_checked_by_the_fields_metadata(key: str, value: object, says: str) -> None:
    with pytest.raises(SettingsError) as caught:
        read_table(Example, {"token": "t", key: value}, "x.toml: [example]")
    assert str(caught.value).startswith("x.toml: [example]: ")
    assert says in str(caught.value)


def test_file_and_environment_share_the_bounds_and_a_required_key_is_required() -> None:
    assert read_table(Example, {"token": "t", "count": 7, "ratio": 1}, "f") == {
        "token": "t",
        "count": 7,
        "ratio": 1.0,
    }
    assert read_env(Example, {"X_COUNT": "7"}, token="t").count == 7
    for env in ({"X_COUNT": "11"}, {"X_RATIO": "0"}, {"X_MODE": "slow"}):
        with pytest.raises(SettingsError, match=next(iter(env))):
            read_env(Example, env, token="t")
    with pytest.raises(SettingsError, match="f: token is required"):
        read_table(Example, {}, "f")
