"""publish, fetch, store, retrieve, scan and identify against a real api: output and exit codes."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.cli_run import Run, run_process
from tests.support.queues import queue_name, read_queue
from zosciimq.core import parse_name

ALL_BYTES = bytes(range(256))


def one_json(result: Run) -> dict:
    lines = result.out.decode().splitlines()
    assert len(lines) == 1, result.out
    return json.loads(lines[0])


# --- publish -----------------------------------------------------------------------------
def test_publish_from_argument_file_and_stdin(
    cli: Callable[..., Run], url: str, tmp_path: Path
) -> None:
    queue = queue_name()
    path = tmp_path / "message.bin"
    path.write_bytes(ALL_BYTES * 10)
    assert cli("--url", url, "publish", queue, "grüße & a=b+c", "-r", "7").code == 0
    assert cli("--url", url, "publish", queue, "--file", str(path)).code == 0
    assert cli("--url", url, "publish", queue, "-", stdin=b"\x00\xffstdin\r\n").code == 0
    assert cli("--url", url, "publish", queue, "--file", "-", stdin=b"").code == 0  # empty
    got = read_queue(url, queue)
    assert [data for _, data in got] == [
        "grüße & a=b+c".encode(),
        ALL_BYTES * 10,
        b"\x00\xffstdin\r\n",
        b"",
    ]
    assert parse_name(got[0][0]).retention_days == 7


def test_publish_text_output_goes_to_stderr_json_to_stdout(cli: Callable[..., Run], url: str):
    queue = queue_name()
    plain = cli("--url", url, "publish", queue, "hello")
    assert plain.code == 0 and plain.out == b""
    assert f"{queue}: 5 bytes, Message published." in plain.err
    quiet = cli("--url", url, "-q", "publish", queue, "hello")
    assert (quiet.code, quiet.out, quiet.err) == (0, b"", "")
    result = cli("--url", url, "--json", "publish", queue, "hello", "-n", "order-42")
    assert result.code == 0 and result.err == ""
    assert one_json(result) == {
        "action": "publish",
        "queue": queue,
        "size": 5,
        "nonce": "order-42",
        "message": "Message published.",
    }


def test_publish_with_a_used_nonce_publishes_once(cli: Callable[..., Run], url: str) -> None:
    queue = queue_name()
    for _ in range(2):
        result = cli("--url", url, "--json", "publish", queue, "once", "-n", queue + "-n1")
        assert result.code == 0
    assert one_json(result)["message"] == "Nonce already used."
    assert [data for _, data in read_queue(url, queue)] == [b"once"]


def test_stdin_publish_is_byte_exact_as_a_process(url: str) -> None:
    queue = queue_name()
    payload = ALL_BYTES * 4000 + b"\r\n\x00"  # > 1 MB: goes as a streamed raw body
    result = run_process("--url", url, "publish", queue, "-", stdin=payload)
    assert result.code == 0, result.err
    result = run_process("--url", url, "publish", queue, b"\xff\xfe not utf-8")  # raw argv
    assert result.code == 0, result.err
    assert [data for _, data in read_queue(url, queue)] == [payload, b"\xff\xfe not utf-8"]


def test_publish_in_original_mode(cli: Callable[..., Run], url: str) -> None:
    queue = queue_name()
    assert cli("--url", url, "--original", "publish", queue, "-", stdin=ALL_BYTES).code == 0
    result = cli("--url", url, "--original", "fetch", queue)
    assert (result.code, result.out) == (0, ALL_BYTES)


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["publish", "Bad Queue", "x"], 6),  # cleaning would change it: refused
        (["publish", "temp", "x"], 6),
        (["publish", "q", "x", "-n", "bad nonce!"], 6),
        (["publish", "q", "--file", "/nonexistent/file"], 6),
    ],
)
def test_invalid_input_exits_6(
    cli: Callable[..., Run], url: str, argv: list[str], code: int
) -> None:
    result = cli("--url", url, *argv)
    assert result.code == code
    assert result.err.startswith("zoscii: error: ")
    as_json = cli("--url", url, "--json", *argv)
    assert one_json(as_json)["exit_code"] == code


# --- fetch -------------------------------------------------------------------------------
def test_fetch_to_stdout_name_on_stderr_then_exit_4(cli: Callable[..., Run], url: str) -> None:
    queue = queue_name()
    cli("--url", url, "publish", queue, "-", stdin=ALL_BYTES)
    cli("--url", url, "publish", queue, "second")
    first = cli("--url", url, "fetch", queue)
    assert first.code == 0 and first.out == ALL_BYTES
    name = first.err.strip()
    parse_name(name)
    second = cli("--url", url, "fetch", queue, "--after", name)
    assert second.code == 0 and second.out == b"second"
    last = second.err.strip()
    assert last > name
    nothing = cli("--url", url, "fetch", queue, "--after", last)
    assert (nothing.code, nothing.out) == (4, b"")
    assert "no message in" in nothing.err
    as_json = cli("--url", url, "--json", "fetch", queue, "--after", last)
    assert as_json.code == 4
    assert one_json(as_json) == {"action": "fetch", "queue": queue, "name": None}


def test_fetch_json_carries_name_and_base64(cli: Callable[..., Run], url: str) -> None:
    queue = queue_name()
    cli("--url", url, "publish", queue, "-", stdin=ALL_BYTES)
    result = cli("--url", url, "--json", "fetch", queue)
    assert result.code == 0 and result.err == ""
    body = one_json(result)
    assert base64.b64decode(body["data_base64"]) == ALL_BYTES
    assert body["size"] == 256 and body["queue"] == queue
    parse_name(body["name"])


def test_fetch_to_a_file(cli: Callable[..., Run], url: str, tmp_path: Path) -> None:
    queue = queue_name()
    payload = os.urandom(300_000)
    cli("--url", url, "publish", queue, "-", stdin=payload)
    dest = tmp_path / "sub" / "out.bin"
    result = cli("--url", url, "--json", "fetch", queue, "-o", str(dest))
    assert result.code == 0
    body = one_json(result)
    assert body["path"] == str(dest) and body["size"] == len(payload)
    assert body["resumed_from"] == 0
    assert dest.read_bytes() == payload
    nothing = cli("--url", url, "fetch", queue, "--after", body["name"], "-o", str(dest))
    assert nothing.code == 4
    assert dest.read_bytes() == payload  # untouched
    into_a_directory = cli("--url", url, "fetch", queue, "-o", str(tmp_path))
    assert into_a_directory.code == 2 and "is a directory" in into_a_directory.err


def test_fetch_of_a_missing_queue_exits_3(cli: Callable[..., Run], url: str) -> None:
    result = cli("--url", url, "fetch", queue_name())
    assert result.code == 3
    assert "not found" in result.err


def test_fetch_with_a_malformed_pointer_exits_6(cli: Callable[..., Run], url: str) -> None:
    queue = queue_name()
    cli("--url", url, "publish", queue, "x")
    assert cli("--url", url, "fetch", queue, "--after", "../../etc/passwd").code == 6


# --- the store ---------------------------------------------------------------------------
def test_store_then_retrieve(cli: Callable[..., Run], url: str, tmp_path: Path) -> None:
    stored = cli("--url", url, "store", "-", "-r", "30", stdin=ALL_BYTES)
    assert stored.code == 0
    name = stored.out.decode().strip()
    assert parse_name(name).retention_days == 30
    got = cli("--url", url, "retrieve", name)
    assert (got.code, got.out, got.err.strip()) == (0, ALL_BYTES, name)
    as_json = one_json(cli("--url", url, "--json", "retrieve", name))
    assert base64.b64decode(as_json["data_base64"]) == ALL_BYTES
    dest = tmp_path / "r.bin"
    to_file = one_json(cli("--url", url, "--json", "retrieve", name, "-o", str(dest)))
    assert to_file == {
        "action": "retrieve",
        "name": name,
        "size": 256,
        "path": str(dest),
        "resumed_from": 0,
    }
    assert dest.read_bytes() == ALL_BYTES


def test_store_json_and_nonce(cli: Callable[..., Run], url: str) -> None:
    nonce = queue_name()
    first = one_json(cli("--url", url, "--json", "store", "text", "-n", nonce))
    assert first["size"] == 4 and first["nonce"] == nonce
    parse_name(first["name"])
    again = cli("--url", url, "--json", "store", "text", "-n", nonce)
    assert again.code == 0
    assert one_json(again)["name"] is None  # stored the first time only
    plain = cli("--url", url, "store", "text", "-n", nonce)
    assert (plain.code, plain.out) == (0, b"")
    assert "Nonce already used." in plain.err


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("202001011200000000-0030-5b0c1a6e-0000-4000-8000-000000000000.bin", 3),  # not there
        ("not-a-name.bin", 6),
    ],
)
def test_retrieve_errors(cli: Callable[..., Run], url: str, name: str, code: int) -> None:
    result = cli("--url", url, "retrieve", name)
    assert result.code == code
    assert result.out == b""


def test_scan_and_identify(cli: Callable[..., Run], url: str) -> None:
    """The only test that stores -u messages on this api, so scan's list is ours."""
    names = [cli("--url", url, "store", "-u", f"u{i}").out.decode().strip() for i in range(3)]
    assert all(name.endswith("-u.bin") for name in names)
    scanned = cli("--url", url, "scan")
    assert scanned.code == 0
    assert sorted(scanned.out.decode().split()) == sorted(names)
    as_json = one_json(cli("--url", url, "--json", "scan"))
    assert (as_json["action"], as_json["count"]) == ("scan", 3)
    assert sorted(as_json["names"]) == sorted(names)

    one = cli("--url", url, "identify", names[0])
    assert (one.code, one.out.decode()) == (0, names[0][: -len("-u.bin")] + ".bin\n")
    again = cli("--url", url, "--json", "identify", names[0])
    assert again.code == 3  # already identified: nothing renamed
    assert one_json(again) == {"action": "identify", "names": [], "not_renamed": [names[0]]}

    # scan | identify -: the rest, by a pipe between two processes
    piped = run_process("--url", url, "identify", "-", stdin=scanned.out)
    assert piped.code == 3  # names[0] was in the scanned list and is done already
    assert sorted(piped.out.decode().split()) == sorted(n[:-6] + ".bin" for n in names[1:])
    empty = cli("--url", url, "scan")
    assert (empty.code, empty.out) == (4, b"")
    assert cli("--url", url, "identify", "-", stdin=b"").code == 4
    for name in names:
        assert cli("--url", url, "retrieve", name[:-6] + ".bin").code == 0


def test_options_and_arguments_in_any_order(cli: Callable[..., Run], url: str) -> None:
    queue = queue_name()
    assert cli("--url", url, "publish", queue, "-r", "7", "first").code == 0
    assert cli("publish", "-r", "8", queue, "second", "--url", url, "-q").code == 0
    assert cli("--url", url, "publish", queue, "-r", "9", "--", "-starts-with-a-dash").code == 0
    got = read_queue(url, queue)
    assert [data for _, data in got] == [b"first", b"second", b"-starts-with-a-dash"]
    assert [parse_name(name).retention_days for name, _ in got] == [7, 8, 9]
    stored = cli("--url", url, "store", "-r", "2", "--", "-dash")
    assert stored.code == 0
    assert cli("--url", url, "retrieve", stored.out.decode().strip()).out == b"-dash"
