"""zoscii queues, purge, delete, replay: the operator's token, confirmation, --yes, and the
pointer they print."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.api_server import OPERATOR_TOKEN
from tests.support.cli_run import Run
from zosciimq.cli import exit_codes, queue_admin
from zosciimq.client import ZosciiClient


@pytest.fixture(autouse=True)
def token(cli: Callable[..., Run], monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator's token, as make up says to give it (after ``cli`` cleared it)."""
    monkeypatch.setenv("ZOSCII_TOKEN", OPERATOR_TOKEN)


def test_without_the_token_it_says_how_to_give_one(
    cli: Callable[..., Run], url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ZOSCII_TOKEN")
    run = cli("--url", url, "queues")
    assert run.code == exit_codes.AUTH
    assert "--token or $ZOSCII_TOKEN" in run.err
    assert cli("--url", url, "--token", OPERATOR_TOKEN, "queues").code == exit_codes.OK


@pytest.fixture
def filled(url: str) -> Callable[[str, int], list[str]]:
    def fill(queue: str, count: int) -> list[str]:
        with ZosciiClient(url) as client:
            for number in range(count):
                client.publish(queue, f"m{number}".encode())
            return [m.name for m in client.fetch_batch(queue, "", count=100)]

    return fill


def test_queues_lists_them(cli: Callable[..., Run], url: str, filled) -> None:
    filled("cli-list", 2)
    run = cli("--url", url, "--json", "queues", "cli-list")
    assert run.code == exit_codes.OK
    (queue,) = json.loads(run.out)["queues"]
    assert queue["queue"] == "cli-list" and queue["messages"] == 2
    text = cli("--url", url, "queues")
    assert b"cli-list" in text.out


def test_purge_and_delete_refuse_without_a_terminal_or_yes(
    cli: Callable[..., Run], url: str, filled
) -> None:
    filled("cli-keep", 2)
    for verb in ("purge", "delete"):
        run = cli("--url", url, verb, "cli-keep")
        assert run.code == exit_codes.USAGE
        assert "--yes" in run.err
    assert (
        json.loads(cli("--url", url, "--json", "queues", "cli-keep").out)["queues"][0]["messages"]
        == 2
    )


def test_a_terminal_is_asked(
    cli: Callable[..., Run], url: str, filled, monkeypatch: pytest.MonkeyPatch
) -> None:
    filled("cli-ask", 2)
    monkeypatch.setattr(queue_admin, "is_terminal", lambda stream: True)
    declined = cli("--url", url, "purge", "cli-ask", stdin=b"n\n")
    assert declined.code == exit_codes.ERROR and "[y/N]" in declined.err
    assert "not confirmed" in declined.err
    accepted = cli("--url", url, "purge", "cli-ask", stdin=b"y\n")
    assert accepted.code == exit_codes.OK and "2 message(s) purged" in accepted.err
    gone = cli("--url", url, "delete", "cli-ask", stdin=b"yes\n")
    assert gone.code == exit_codes.OK
    assert cli("--url", url, "queues", "cli-ask").code == exit_codes.NOT_FOUND


def test_yes_for_scripts(cli: Callable[..., Run], url: str, filled) -> None:
    filled("cli-yes", 3)
    purged = cli(
        "--url", url, "--json", "purge", "cli-yes", "--before", "2000-01-01T00:00:00Z", "-y"
    )
    assert json.loads(purged.out)["purged"] == 0
    deleted = cli("--url", url, "--json", "delete", "cli-yes", "--yes")
    assert deleted.code == exit_codes.OK and json.loads(deleted.out)["messages"] == 3
    assert cli("--url", url, "delete", "cli-yes", "--yes").code == exit_codes.NOT_FOUND


def test_replay_prints_and_saves_the_pointer(
    cli: Callable[..., Run], url: str, filled, tmp_path: Path
) -> None:
    names = filled("cli-replay", 2)
    run = cli("--url", url, "replay", "cli-replay", "--since", "2000-01-01T00:00:00Z")
    assert run.code == exit_codes.OK and run.out == b"\n"  # from the beginning
    pointer_file = tmp_path / "ptr"
    run = cli(
        "--url",
        url,
        "replay",
        "cli-replay",
        "--since",
        "2999-01-01T00:00:00Z",
        "--pointer-file",
        str(pointer_file),
    )
    assert run.out.decode().strip() == names[-1]
    assert pointer_file.read_text().strip() == names[-1]
    bad = cli("--url", url, "replay", "cli-replay", "--since", "tomorrow")
    assert bad.code == exit_codes.INVALID
