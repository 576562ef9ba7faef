"""--help explains every command with an example and the exit codes; usage errors exit 2."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.support.cli_run import Run, run_process
from zosciimq.cli.exit_codes import TABLE

COMMANDS = ["publish", "fetch", "tail", "store", "retrieve", "scan", "identify", "run"]


def test_top_help_lists_commands_examples_and_exit_codes(cli: Callable[..., Run]) -> None:
    result = cli("--help")
    assert result.code == 0
    text = result.out.decode()
    for command in COMMANDS:
        assert f"\n    {command} " in text
    assert "examples:" in text and "ZOSCII_URL" in text and "ZOSCII_TOKEN" in text
    for code, meaning in TABLE:
        assert f"  {code:<4} {meaning}" in text


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_has_help_with_an_example(cli: Callable[..., Run], command: str) -> None:
    result = cli(command, "--help")
    assert result.code == 0
    text = result.out.decode()
    examples = text.split("examples:\n", 1)[1]
    assert examples.startswith(f"  zoscii {command}") or f"zoscii {command}" in examples
    assert "exit codes:" in text and "--json" in text  # global options shown per command


def test_version(cli: Callable[..., Run]) -> None:
    result = cli("--version")
    assert (result.code, result.out) == (0, b"zoscii 1.0.0\n")


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["frobnicate"],
        ["publish"],
        ["publish", "q", "--bogus"],
        ["publish", "q", "-r", "10000", "x"],
        ["publish", "q", "-r", "seven", "x"],
        ["fetch"],
        ["tail", "q", "--after", "x", "--pointer-file", "p"],
        ["tail", "q", "--interval", "0"],
        ["tail", "q", "--max-messages", "0"],
        ["identify"],
        ["run", "nothing"],
        ["--timeout", "-1", "scan"],
    ],
)
def test_usage_errors_exit_2(cli: Callable[..., Run], argv: list[str]) -> None:
    result = cli(*argv)
    assert result.code == 2
    assert "usage: zoscii" in result.err
    assert result.out == b""


@pytest.mark.parametrize(
    ("argv", "text"),
    [
        (["publish", "q"], "no message"),
        (["store"], "no message"),
        (["publish", "q", "text", "--file", "/etc/hostname"], "not both"),
    ],
)
def test_missing_or_double_message_is_a_usage_error(
    cli: Callable[..., Run], argv: list[str], text: str
) -> None:
    result = cli("--url", "http://127.0.0.1:9/", *argv)  # refused before any request
    assert result.code == 2
    assert text in result.err


def test_global_options_work_before_and_after_the_command(cli: Callable[..., Run]) -> None:
    before = cli("--json", "--url", "http://127.0.0.1:9/", "--retries", "0", "scan")
    after = cli("scan", "--url", "http://127.0.0.1:9/", "--retries", "0", "--json")
    assert before.code == after.code == 7
    assert before.out == after.out
    assert b'"reason": "unreachable"' in after.out


def test_runs_as_a_module(tmp_path: object) -> None:
    result = run_process("--help")
    assert result.code == 0
    assert result.out.startswith(b"usage: zoscii")
    assert run_process("publish").code == 2


def test_the_retention_default_in_help_and_docs_is_the_servers(cli: Callable[..., Run]) -> None:
    """Issue 29: both said 0 (deleted at the next cleanup) while the default is 30."""
    import dataclasses
    import re
    from pathlib import Path

    from zosciimq.settings import CoreSettings

    shipped = {f.name: f.default for f in dataclasses.fields(CoreSettings)}
    days = shipped["default_retention_days"]
    text = " ".join(cli("publish", "--help").out.decode().split())
    assert f"{days} as shipped" in text
    docs = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
    said = re.findall(r"(\d+) as shipped", " ".join(docs.read_text().split()))
    assert said and set(said) == {str(days)}
