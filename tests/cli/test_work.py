"""zoscii work (a consumer group's worker running a command) and zoscii dead list/replay,
against a real api: exit codes of the command, dead letters, replay, SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tests.support.cli_run import Run, cli_env
from tests.support.queues import queue_name, read_queue
from zosciimq.cli.work import DEAD_LETTER_EXIT
from zosciimq.client import ZosciiClient, dead_letter_queue


def fill(url: str, queue: str, *messages: bytes) -> None:
    with ZosciiClient(url) as client:
        client.publish_many(queue, list(messages))


def json_lines(run: Run) -> list[dict]:
    return [json.loads(line) for line in run.out.decode().splitlines()]


def test_work_pipes_each_message_to_the_command_and_acks_on_exit_0(
    cli: Callable[..., Run], url: str, tmp_path: Path
) -> None:
    queue = queue_name()
    fill(url, queue, b"one\n", b"\x00\xff\n", b"three\n")
    out, env_log = tmp_path / "out", tmp_path / "env"
    command = (
        f"cat >> {out}; "
        f'echo "$ZOSCII_QUEUE $ZOSCII_GROUP $ZOSCII_NAME $ZOSCII_DELIVERIES $ZOSCII_SIZE '
        f'$ZOSCII_RECEIPT" >> {env_log}'
    )
    run = cli(
        "--url", url, "work", queue, "-g", "g", "--exec", command, "--until-empty", "--wait", "0"
    )
    assert run.code == 0, run.err
    assert out.read_bytes() == b"one\n\x00\xff\nthree\n"
    names = [name for name, _ in read_queue(url, queue)]
    rows = [line.split() for line in env_log.read_text().splitlines()]
    sizes = ["4", "3", "6"]
    assert [row[:5] for row in rows] == [
        [queue, "g", name, "1", size] for name, size in zip(names, sizes, strict=True)
    ]
    assert all(row[5].startswith(row[2] + ":") for row in rows)
    assert "3 acked, 0 requeued, 0 dead-lettered, 0 lost" in run.err
    with ZosciiClient(url) as client:
        assert client.lease(queue, "g") == []
    again = cli(
        "--url", url, "work", queue, "-g", "g", "--exec", "true", "--until-empty", "--wait", "0"
    )
    assert again.code == 4


def test_exit_codes_ack_requeue_and_dead_letter_then_replay(
    cli: Callable[..., Run], url: str, tmp_path: Path
) -> None:
    queue = queue_name()
    fill(url, queue, b"good", b"flaky", b"bad")
    # flaky fails on its first delivery (exit 3: requeued), bad exits 65: dead letter
    command = (
        'msg=$(cat); case "$msg" in '
        f"bad) exit {DEAD_LETTER_EXIT};; "
        'flaky) [ "$ZOSCII_DELIVERIES" -ge 2 ] || exit 3;; esac; exit 0'
    )
    run = cli(
        "--url", url, "--json", "work", queue, "-g", "g", "--exec", command,
        "--until-empty", "--wait", "0", "--retry-delay", "0",
    )  # fmt: skip
    assert run.code == 0, run.err
    *messages, summary = json_lines(run)
    assert summary == {  # issue 29: --json printed no summary
        "action": "work",
        "summary": True,
        "queue": queue,
        "group": "g",
        "acked": 2,
        "requeued": 1,
        "dead_lettered": 1,
        "lost": 0,
    }
    results = [(r["deliveries"], r["exit_code"], r["result"]) for r in messages]
    assert sorted(results) == [
        (1, 0, "acked"),
        (1, 3, "requeued"),
        (1, DEAD_LETTER_EXIT, "dead-lettered"),
        (2, 0, "acked"),
    ]
    dead_queue = dead_letter_queue(queue, "g")
    ((dead_name, dead_data),) = read_queue(url, dead_queue)
    assert dead_data == b"bad"

    listed = cli("--url", url, "dead", "list", queue, "--group", "g")
    assert (listed.code, listed.out) == (0, f"{dead_name}\t3\n".encode())
    as_json = cli("--url", url, "--json", "dead", "list", queue, "--group", "g")
    assert json_lines(as_json) == [
        {
            "action": "dead",
            "queue": queue,
            "group": "g",
            "dead_letter_queue": dead_queue,
            "name": dead_name,
            "size": 3,
            "reason": None,
        }
    ]

    replayed = cli("--url", url, "--json", "dead", "replay", queue, "--group", "g")
    assert replayed.code == 0, replayed.err
    (line,) = json_lines(replayed)
    assert (line["dead_letter"], line["duplicate"]) == (dead_name, False)
    assert read_queue(url, queue)[-1] == (line["name"], b"bad")
    # replayed once only, however often replay runs
    assert cli("--url", url, "dead", "replay", queue, "--group", "g").code == 4
    assert len(read_queue(url, queue)) == 4

    # the replayed message is consumed by the group like any new one
    out = tmp_path / "out"
    again = cli(
        "--url",
        url,
        "work",
        queue,
        "-g",
        "g",
        "--exec",
        f"cat >> {out}",
        "--until-empty",
        "--wait",
        "0",
    )
    assert again.code == 0 and out.read_bytes() == b"bad"


def test_replay_by_name_leaves_the_others_waiting(cli: Callable[..., Run], url: str) -> None:
    queue = queue_name()
    fill(url, queue, b"x", b"y")
    run = cli(
        "--url", url, "work", queue, "-g", "g", "--exec", f"exit {DEAD_LETTER_EXIT}",
        "--until-empty", "--wait", "0",
    )  # fmt: skip
    assert run.code == 0
    names = [name for name, _ in read_queue(url, dead_letter_queue(queue, "g"))]
    assert len(names) == 2
    unknown = cli("--url", url, "dead", "replay", queue, "-g", "g", "--name", "nope.bin")
    assert unknown.code == 3 and "nope.bin" in unknown.err
    one = cli("--url", url, "dead", "replay", queue, "-g", "g", "--name", names[1])
    assert one.code == 0 and one.out.decode().split("\t")[0] == names[1]
    assert [data for _, data in read_queue(url, queue)] == [b"x", b"y", b"y"]
    rest = cli("--url", url, "dead", "replay", queue, "-g", "g")
    assert rest.code == 0 and rest.out.decode().split("\t")[0] == names[0]
    assert [data for _, data in read_queue(url, queue)] == [b"x", b"y", b"y", b"x"]


def test_dead_list_without_dead_letters_is_exit_4(cli: Callable[..., Run], url: str) -> None:
    queue = queue_name()
    fill(url, queue, b"x")
    run = cli("--url", url, "dead", "list", queue, "--group", "g")
    assert (run.code, run.out) == (4, b"")
    assert cli("--url", url, "dead", "replay", queue, "--group", "g").code == 4
    assert cli("--url", url, "dead", "list", queue).code == 2  # --group is required


def test_max_messages_with_concurrency(cli: Callable[..., Run], url: str, tmp_path: Path) -> None:
    queue = queue_name()
    fill(url, queue, *[f"{i}\n".encode() for i in range(6)])
    out = tmp_path / "out"
    run = cli(
        "--url", url, "--json", "work", queue, "-g", "g", "--exec", f"cat >> {out}",
        "--concurrency", "2", "--count", "2", "--max-messages", "4", "--wait", "1",
    )  # fmt: skip
    assert run.code == 0, run.err
    *messages, summary = json_lines(run)
    assert [r["result"] for r in messages] == ["acked"] * 4
    assert summary["summary"] is True and summary["acked"] == 4
    assert len(out.read_bytes().splitlines()) == 4
    with ZosciiClient(url) as client:
        assert len(client.lease(queue, "g", count=10)) == 2


def test_sigterm_stops_after_the_message_in_hand(url: str, tmp_path: Path) -> None:
    queue = queue_name()
    fill(url, queue, b"first", b"second")
    started, go, out = tmp_path / "started", tmp_path / "go", tmp_path / "out"
    command = f"cat >> {out}; touch {started}; while [ ! -e {go} ]; do sleep 0.05; done; exit 0"
    process = subprocess.Popen(
        [sys.executable, "-m", "zosciimq.cli", "--url", url, "work", queue, "-g", "g",
         "--exec", command, "--wait", "1", "--lease", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env(), cwd="/",
    )  # fmt: skip
    try:
        while not started.exists():
            assert process.poll() is None, process.communicate()
            time.sleep(0.02)
        process.send_signal(signal.SIGTERM)  # while the command runs
        go.touch()
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err.decode()
    assert out.read_bytes() == b"first"
    assert "1 acked" in err.decode()
    with ZosciiClient(url) as client:
        (left,) = client.lease(queue, "g", count=5)
    assert (left.data, left.deliveries) == (b"second", 1)  # never leased: stopped before
