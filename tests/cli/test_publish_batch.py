"""publish --batch against a real api: files, stdin records, output, reruns, exit codes."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.cli_run import Run, run_process
from tests.support.queues import queue_name, read_queue
from zosciimq.cli.progress import BatchBar
from zosciimq.core import parse_name


def json_lines(result: Run) -> list[dict]:
    return [json.loads(line) for line in result.out.decode().splitlines()]


def test_each_file_is_a_message_and_its_name_a_line(
    cli: Callable[..., Run], url: str, tmp_path: Path
) -> None:
    queue = queue_name()
    contents = [bytes(range(256)) * 4, b"", os.urandom(2 << 20), b"last\r\n"]
    paths = []
    for number, data in enumerate(contents):
        path = tmp_path / f"m{number}.bin"
        path.write_bytes(data)
        paths.append(str(path))
    result = cli("--url", url, "publish", queue, "--batch", *paths, "-r", "5")
    assert result.code == 0, result.err
    got = read_queue(url, queue)
    assert [data for _, data in got] == contents
    assert result.out.decode().splitlines() == [name for name, _ in got]
    assert all(parse_name(name).retention_days == 5 for name, _ in got)
    assert f"{queue}: 4 message(s) published" in result.err


def test_stdin_is_one_message_per_line_without_the_newline(
    cli: Callable[..., Run], url: str
) -> None:
    queue = queue_name()
    result = cli("--url", url, "publish", queue, "--batch", "-", stdin=b"l1\nl2\r\n\n\xffast")
    assert result.code == 0, result.err
    got = read_queue(url, queue)
    assert [data for _, data in got] == [b"l1", b"l2\r", b"", b"\xffast"]
    assert result.out.decode().splitlines() == [name for name, _ in got]


def test_nul_separated_records_and_split_files(
    cli: Callable[..., Run], url: str, tmp_path: Path
) -> None:
    queue = queue_name()
    path = tmp_path / "records"
    path.write_bytes(b"f1\0\n\0")
    result = cli(
        "--url", url, "publish", queue, "--batch", str(path), "-", "-z", stdin=b"a\0\0b\n\xff\0"
    )
    assert result.code == 0, result.err
    assert [data for _, data in read_queue(url, queue)] == [b"f1", b"\n", b"a", b"", b"b\n\xff"]
    lines = tmp_path / "lines.txt"
    lines.write_bytes(b"x\ny\n")
    queue2 = queue_name()
    assert cli("--url", url, "publish", queue2, "--batch", str(lines), "--lines").code == 0
    assert [data for _, data in read_queue(url, queue2)] == [b"x", b"y"]


def test_json_gives_one_object_per_message(
    cli: Callable[..., Run], url: str, tmp_path: Path
) -> None:
    queue = queue_name()
    path = tmp_path / "doc.bin"
    path.write_bytes(b"\x00doc")
    result = cli(
        "--url", url, "--json", "publish", queue, "--batch", str(path), "-", stdin=b"one\ntwo\n"
    )
    assert result.code == 0 and result.err == ""
    objects = json_lines(result)
    got = read_queue(url, queue)
    assert [o["name"] for o in objects] == [name for name, _ in got]
    assert [(o["source"], o.get("record"), o["size"]) for o in objects] == [
        (str(path), None, 4),
        ("-", 1, 3),
        ("-", 2, 3),
    ]
    assert all(o["action"] == "publish" and o["queue"] == queue for o in objects)
    assert all(o["duplicate"] is False and o["nonce"] for o in objects)


def test_the_same_command_with_the_same_nonce_prefix_stores_nothing_twice(
    cli: Callable[..., Run], url: str
) -> None:
    queue = queue_name()
    prefix = "run-" + queue
    first = cli(
        "--url", url, "--json", "publish", queue, "--batch", "-", "-n", prefix, stdin=b"a\nb\n"
    )
    assert [o["nonce"] for o in json_lines(first)] == [f"{prefix}-1", f"{prefix}-2"]
    again = cli("--url", url, "publish", queue, "--batch", "-", "-n", prefix, stdin=b"a\nb\nc\n")
    assert again.code == 0
    lines = again.out.decode().splitlines()
    assert lines[:2] == ["-", "-"] and lines[2].endswith(".bin")
    assert "2 were there already" in again.err
    assert [data for _, data in read_queue(url, queue)] == [b"a", b"b", b"c"]


def test_an_invalid_message_fails_its_request_with_exit_6(
    cli: Callable[..., Run], url: str
) -> None:
    queue = queue_name()
    result = cli("--url", url, "--json", "publish", queue, "--batch", "-", "-n", "bad nonce",
                 stdin=b"a\nb\n")  # fmt: skip
    assert result.code == 6
    error = json_lines(result)[-1]
    assert error["reason"] == "invalid_input" and error["exit_code"] == 6
    assert read_queue(url, queue) == []


def test_a_failure_in_the_middle_keeps_what_was_acknowledged(
    cli: Callable[..., Run], url: str
) -> None:
    """1002 lines in requests of 1001: the probe goes, then the api refuses over 1000."""
    queue = queue_name()
    lines = b"".join(b"%d\n" % n for n in range(1002))
    result = cli("--url", url, "publish", queue, "--batch", "-", "--batch-size", "1001",
                 stdin=lines)  # fmt: skip
    assert result.code == 6
    got = read_queue(url, queue)
    assert [data for _, data in got] == [b"0"]
    assert result.out.decode().splitlines() == [got[0][0]]
    assert "1 message(s) published before the error" in result.err
    ok = cli("--url", url, "publish", queue, "--batch", "-", "--batch-size", "1000", stdin=lines)
    assert ok.code == 0
    read_back = read_queue(url, queue, count=1000)
    assert [data for _, data in read_back][1:] == lines.split(b"\n")[:-1]


def test_an_unreadable_file_stops_it_before_anything_is_sent(
    cli: Callable[..., Run], url: str, tmp_path: Path
) -> None:
    queue = queue_name()
    good = tmp_path / "good"
    good.write_bytes(b"x")
    result = cli("--url", url, "publish", queue, "--batch", str(good), str(tmp_path / "missing"))
    assert result.code == 6 and "cannot read" in result.err
    directory = cli("--url", url, "publish", queue, "--batch", str(good), str(tmp_path))
    assert directory.code == 6 and "is a directory" in directory.err.lower()
    assert read_queue(url, queue) == []


def test_original_mode_publishes_one_by_one_without_names(
    cli: Callable[..., Run], url: str
) -> None:
    queue = queue_name()
    result = cli("--url", url, "--original", "publish", queue, "--batch", "-", stdin=b"a\nb\n")
    assert result.code == 0
    assert result.out == b"-\n-\n"
    assert "2 without a name" in result.err
    assert [data for _, data in read_queue(url, queue)] == [b"a", b"b"]


def test_unreachable_server_exits_7(cli: Callable[..., Run]) -> None:
    result = cli("--url", "http://127.0.0.1:9/", "--retries", "0", "publish", "q", "--batch",
                 "-", stdin=b"a\n")  # fmt: skip
    assert result.code == 7


def test_empty_input_publishes_nothing(cli: Callable[..., Run], url: str) -> None:
    queue = queue_name()
    result = cli("--url", url, "publish", queue, "--batch", "-", stdin=b"")
    assert (result.code, result.out) == (0, b"")
    assert "no message to publish" in result.err


@pytest.mark.parametrize(
    ("argv", "text"),
    [
        (["publish", "q", "text", "--batch", "-"], "no MESSAGE or --file"),
        (["publish", "q", "--file", "x", "--batch", "-"], "no MESSAGE or --file"),
        (["publish", "q", "text", "--lines"], "only with --batch"),
        (["publish", "q", "text", "--batch-size", "5"], "only with --batch"),
        (["publish", "q", "--batch", "-", "--lines", "-z"], "not both"),
        (["publish", "q", "--batch", "-", "-"], "only once"),
        (["publish", "q", "--batch", "-", "--batch-size", "0"], "usage: zoscii"),
        (["publish", "q", "--batch", "-", "--batch-bytes", "many"], "usage: zoscii"),
        (["publish", "q", "--batch"], "usage: zoscii"),
    ],
)
def test_usage_errors_exit_2(cli: Callable[..., Run], argv: list[str], text: str) -> None:
    result = cli("--url", "http://127.0.0.1:9/", *argv)  # refused before any request
    assert result.code == 2
    assert text in result.err


def test_as_a_process_reading_a_pipe(url: str) -> None:
    queue = queue_name()
    result = run_process("--url", url, "publish", queue, "--batch", "-", "--batch-bytes", "4k",
                         stdin=b"x" * 3000 + b"\n" + b"y" * 3000 + b"\n")  # fmt: skip
    assert result.code == 0, result.err
    assert [data for _, data in read_queue(url, queue)] == [b"x" * 3000, b"y" * 3000]
    assert len(result.out.decode().splitlines()) == 2


# --- the progress bar -------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_batch_bar_draws_only_for_long_batches_and_clears_for_results() -> None:
    stream, clock = io.StringIO(), Clock()
    bar = BatchBar(stream, "publish q", total_messages=1000, total_bytes=4_000_000, clock=clock)
    bar.update(10, 40_000)
    assert stream.getvalue() == ""  # under a second: nothing
    clock.now += 2
    bar.update(400, 1_600_000)
    drawn = stream.getvalue()
    assert "publish q [#########" in drawn and " 40% 400/1000 messages, 1.6 MB / 4.0 MB" in drawn
    bar.clear()
    assert stream.getvalue().endswith("\r\x1b[K")
    bar.update(401, 1_604_000)  # drawn again after a result line
    assert stream.getvalue().count("401/1000") == 1
    bar.close()
    assert stream.getvalue().endswith("\n")


def test_batch_bar_without_totals_shows_counts() -> None:
    stream, clock = io.StringIO(), Clock()
    bar = BatchBar(stream, "publish q", clock=clock)
    clock.now += 5
    bar.update(3, 3000)
    assert stream.getvalue() == "\rpublish q 3 messages, 3.0 KB 600 B/s\x1b[K"


def test_no_bar_when_stderr_is_not_a_terminal(cli: Callable[..., Run], url: str) -> None:
    result = cli("--url", url, "publish", queue_name(), "--batch", "-", stdin=b"a\n" * 300)
    assert result.code == 0 and "\r" not in result.err
