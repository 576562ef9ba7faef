"""tail: every message in order from a pointer, into stdout, a directory or a command; -f."""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.cli_run import Run, cli_env
from tests.support.queues import queue_name
from zosciimq.client import ZosciiClient
from zosciimq.core.states import read_pointer

MESSAGES = [b"first", b"\x00\xff binary", b"third\n"]


def fill(url: str, queue: str, messages: list[bytes] = MESSAGES) -> list[str]:
    """Publish and return the names in order."""
    with ZosciiClient(url) as client:
        for message in messages:
            client.publish(queue, message)
        names, pointer = [], ""
        while (got := client.fetch(queue, pointer, length=1)) is not None:
            names.append(got.name)
            pointer = got.name
    return names


def test_tail_prints_every_message_then_exit_4_when_caught_up(
    cli: Callable[..., Run], url: str, tmp_path: Path
) -> None:
    queue = queue_name()
    names = fill(url, queue)
    pointer = tmp_path / "p.ptr"
    result = cli("--url", url, "tail", queue, "--pointer-file", str(pointer))
    assert result.code == 0
    assert result.out == b"".join(m + b"\n" for m in MESSAGES)
    assert result.err.split() == names
    assert read_pointer(pointer) == names[-1]
    again = cli("--url", url, "tail", queue, "--pointer-file", str(pointer))
    assert (again.code, again.out) == (4, b"")


def test_tail_raw_after_and_max_messages(cli: Callable[..., Run], url: str) -> None:
    queue = queue_name()
    names = fill(url, queue)
    raw = cli("--url", url, "-q", "tail", queue, "--raw", "--after", names[0])
    assert (raw.code, raw.out, raw.err) == (0, MESSAGES[1] + MESSAGES[2], "")
    two = cli("--url", url, "--json", "tail", queue, "--max-messages", "2")
    lines = [json.loads(line) for line in two.out.decode().splitlines()]
    assert [line["name"] for line in lines] == names[:2]
    assert [base64.b64decode(line["data_base64"]) for line in lines] == MESSAGES[:2]
    assert all(line["action"] == "tail" and line["queue"] == queue for line in lines)


def test_tail_into_a_directory(cli: Callable[..., Run], url: str, tmp_path: Path) -> None:
    queue = queue_name()
    names = fill(url, queue)
    out_dir = tmp_path / "inbox"
    result = cli("--url", url, "tail", queue, "--out-dir", str(out_dir))
    assert result.code == 0
    assert result.out.decode().split() == [str(out_dir / name) for name in names]
    assert sorted(p.name for p in out_dir.iterdir()) == names  # nothing else left behind
    assert [(out_dir / name).read_bytes() for name in names] == MESSAGES


def test_tail_exec_gets_each_message_on_stdin_with_its_name(
    cli: Callable[..., Run],
    url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    queue = queue_name()
    names = fill(url, queue)
    seen = tmp_path / "seen"
    seen.mkdir()
    monkeypatch.setenv("SEEN", str(seen))
    command = 'cat > "$SEEN/$ZOSCII_NAME" && echo "$ZOSCII_QUEUE $ZOSCII_SIZE" >> "$SEEN/log"'
    pointer = tmp_path / "p.ptr"
    result = cli("--url", url, "tail", queue, "--exec", command, "--pointer-file", str(pointer))
    assert result.code == 0
    assert [(seen / name).read_bytes() for name in names] == MESSAGES
    assert (seen / "log").read_text().splitlines() == [f"{queue} {len(m)}" for m in MESSAGES]
    assert read_pointer(pointer) == names[-1]


def test_tail_exec_with_out_dir_gets_the_path(
    cli: Callable[..., Run], url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = queue_name()
    names = fill(url, queue, [b"one"])
    log = tmp_path / "log"
    monkeypatch.setenv("LOG", str(log))
    result = cli(
        "--url", url, "tail", queue, "--out-dir", str(tmp_path / "d"),
        "--exec", 'echo "$ZOSCII_PATH $(cat)" > "$LOG"',
    )  # fmt: skip
    assert result.code == 0 and result.out == b""
    assert log.read_text() == f"{tmp_path / 'd' / names[0]} one\n"


def test_a_failing_command_stops_before_that_message(
    cli: Callable[..., Run], url: str, tmp_path: Path
) -> None:
    queue = queue_name()
    names = fill(url, queue)
    pointer = tmp_path / "p.ptr"
    command = f'test "$ZOSCII_NAME" != "{names[1]}"'  # fails on the second message
    failed = cli("--url", url, "tail", queue, "--exec", command, "--pointer-file", str(pointer))
    assert failed.code == 1
    assert "exited with 1" in failed.err and names[1] in failed.err
    assert read_pointer(pointer) == names[0]  # the second one is read again next time
    rest = cli("--url", url, "-q", "tail", queue, "--pointer-file", str(pointer))
    assert (rest.code, rest.out) == (0, MESSAGES[1] + b"\n" + MESSAGES[2] + b"\n")


def test_tail_of_a_missing_queue_exits_3_without_follow(cli: Callable[..., Run], url: str) -> None:
    assert cli("--url", url, "tail", queue_name()).code == 3


def start_tail(*argv: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "zosciimq.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(),
    )


def test_tail_follow_picks_up_a_message_published_after_it_started(url: str) -> None:
    queue = queue_name()
    fill(url, queue, [b"before"])
    tail = start_tail(
        "--url", url, "--json", "tail", queue, "-f", "--interval", "0.1", "--max-messages", "2"
    )
    try:
        assert tail.stdout is not None
        first = json.loads(tail.stdout.readline())  # it has started and read the backlog
        assert base64.b64decode(first["data_base64"]) == b"before"
        with ZosciiClient(url) as client:
            client.publish(queue, b"after")
        code = tail.wait(timeout=60)
        second = json.loads(tail.stdout.readline())
    finally:
        tail.kill()
        tail.wait()
    assert code == 0
    assert base64.b64decode(second["data_base64"]) == b"after"
    assert second["name"] > first["name"]


def test_tail_follow_waits_for_a_queue_and_stops_cleanly_on_ctrl_c(
    url: str, tmp_path: Path
) -> None:
    queue = queue_name()
    pointer = tmp_path / "p.ptr"
    tail = start_tail(
        "--url", url, "tail", queue, "-f", "--interval", "0.1", "--pointer-file", str(pointer)
    )
    try:
        assert tail.stderr is not None and tail.stdout is not None
        assert "does not exist (yet); waiting" in tail.stderr.readline().decode()
        names = fill(url, queue, [b"created later"])
        assert tail.stdout.readline() == b"created later\n"
        tail.send_signal(signal.SIGINT)
        code = tail.wait(timeout=60)
    finally:
        tail.kill()
        tail.wait()
    assert code == 0
    assert read_pointer(pointer) == names[0]
