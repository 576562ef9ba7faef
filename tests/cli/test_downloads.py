"""Big transfers: resumable retrieve/fetch to a file, progress bars only on a terminal."""

from __future__ import annotations

import io
import json
import os
import pty
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.cli.cutting_proxy import CuttingProxy
from tests.support.cli_run import cli_env, run_process
from tests.support.queues import queue_name
from zosciimq.cli.progress import ProgressBar
from zosciimq.client import ZosciiClient

SIZE = 6 << 20


def upstream(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port


def test_retrieve_to_a_file_resumes_after_a_cut_connection(url: str, tmp_path: Path) -> None:
    payload = os.urandom(SIZE)
    with ZosciiClient(url) as client:
        name = client.store(payload).name
    assert name is not None
    dest = tmp_path / "big.bin"
    with CuttingProxy(upstream(url), reply_limit=2 << 20) as proxy:
        cut = run_process("--url", proxy.url, "--json", "retrieve", name, "-o", str(dest))
    assert cut.code == 7, cut.err  # the reply was cut short: a network error
    assert json.loads(cut.out)["reason"] == "truncated"
    part = dest.with_name(dest.name + ".part")
    on_disk = part.stat().st_size
    assert not dest.exists() and 0 < on_disk < SIZE
    resumed = run_process("--url", url, "--json", "retrieve", name, "-o", str(dest))
    assert resumed.code == 0, resumed.err
    body = json.loads(resumed.out)
    assert body["resumed_from"] == on_disk
    assert body["size"] == SIZE and body["name"] == name
    assert dest.read_bytes() == payload
    assert not part.exists()


def test_fetch_to_a_file_resumes_too(url: str, tmp_path: Path) -> None:
    queue = queue_name()
    payload = os.urandom(SIZE)
    with ZosciiClient(url) as client:
        client.publish(queue, payload)
    dest = tmp_path / "m.bin"
    with CuttingProxy(upstream(url), reply_limit=1 << 20) as proxy:
        assert run_process("--url", proxy.url, "fetch", queue, "-o", str(dest)).code == 7
    resumed = run_process("--url", url, "fetch", queue, "-o", str(dest))
    assert resumed.code == 0
    assert "resumed at byte" in resumed.err
    assert dest.read_bytes() == payload


@pytest.mark.slow  # four processes moving 6 MB; the drawing is test_progress_bar_rendering
def test_progress_bar_on_a_terminal_only(url: str, tmp_path: Path) -> None:
    queue = queue_name()
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(SIZE))
    argv = [sys.executable, "-m", "zosciimq.cli", "--url", url]

    not_tty = subprocess.run(
        [*argv, "publish", queue, "--file", str(big)], capture_output=True, env=cli_env()
    )
    assert not_tty.returncode == 0
    assert b"[" not in not_tty.stderr and b"%" not in not_tty.stderr

    for command in (["publish", queue, "--file", str(big)], ["fetch", queue, "-o", "-"]):
        code, out, err = run_with_tty_stderr([*argv, *command])
        assert code == 0, err
        assert f"{command[0]} " in err and "100%" in err and "6.3 MB / 6.3 MB" in err
        assert err.endswith("\n")
    assert out == big.read_bytes()  # the bar never mixes into stdout

    quiet = run_with_tty_stderr([*argv, "-q", "fetch", queue, "-o", "-"])
    assert quiet[0] == 0 and quiet[2] == ""


def run_with_tty_stderr(argv: list[str]) -> tuple[int, bytes, str]:
    """Run with stderr on a pseudo-terminal, stdout on a pipe."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=terminal, env=cli_env())
    os.close(terminal)
    err = bytearray()
    out = b""
    try:
        assert process.stdout is not None
        out = process.stdout.read()
        while True:
            try:
                chunk = os.read(controller, 1 << 16)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            err += chunk
    finally:
        os.close(controller)
        code = process.wait(timeout=60)
    return code, out, err.decode(errors="replace").replace("\r\n", "\n")


def test_progress_bar_rendering() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    now = [100.0]
    stream = Terminal()
    bar = ProgressBar(stream, "fetch q", threshold=1000, clock=lambda: now[0])
    bar.update(500, 2000)  # the total is over the threshold: drawn from the start
    first = stream.getvalue()
    assert "fetch q [" in first and " 25% " in first
    now[0] += 0.01
    bar.update(600, 2000)  # too soon after the last draw: skipped
    assert stream.getvalue() == first
    now[0] += 1.0
    bar.update(2000, 2000)
    bar.close()
    last = stream.getvalue().rsplit("\r", 1)[1]
    assert "[########################] 100% 2.0 KB / 2.0 KB" in last and last.endswith("\n")

    small = Terminal()
    tiny = ProgressBar(small, "x", threshold=1000, clock=lambda: now[0])
    tiny.update(999, 999)
    tiny.close()
    assert small.getvalue() == ""  # small transfers draw nothing at all
