"""``ZosciiClient.stream``: every message once, in order, across reconnects; large ones
fetched; a server without streams followed by long-poll."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from tests.support.api_server import ApiServer
from tests.support.live_process import LiveProcess
from tests.support.queues import queue_name
from zosciimq.client import ZosciiClient
from zosciimq.core import DataDir


def take(client: ZosciiClient, queue: str, after: str, count: int) -> list[tuple[str, bytes]]:
    stop = threading.Event()
    got = []
    for message in client.stream(queue, after, stop=stop):
        got.append((message.name, message.data))
        if len(got) == count:
            stop.set()
            break
    return got


def test_stream_yields_every_message_across_a_restart(tmp_path: Path) -> None:
    DataDir(tmp_path).ensure()
    live = LiveProcess(tmp_path, ZOSCII_LIVE_MAX_INLINE_BYTES="1024").start()
    try:
        queue = queue_name()
        big = os.urandom(4096)
        names = live.publish(queue, b"a", b"\xff\xfe", big)
        client = ZosciiClient(live.url)
        got: list[tuple[str, bytes]] = []
        stop = threading.Event()

        def follow() -> None:
            for message in client.stream(queue, stop=stop):
                got.append((message.name, message.data))
                if len(got) == 6:
                    return

        reader = threading.Thread(target=follow)
        reader.start()
        live.wait_health("followed_queues", 1)
        names += live.publish(queue, b"d")
        live.kill()  # the reader reconnects after the last name it yielded
        names += live.publish(queue, b"e")
        live.restart()
        names += live.publish(queue, b"f")
        reader.join(60)
        assert not reader.is_alive()
        assert got == list(zip(names, [b"a", b"\xff\xfe", big, b"d", b"e", b"f"], strict=True))
    finally:
        live.kill()


def test_an_api_without_streams_is_followed_by_long_poll(tmp_path: Path) -> None:
    DataDir(tmp_path).ensure()
    api = ApiServer(tmp_path, workers=1, threads=8).start()
    try:
        client = ZosciiClient(api.url)
        queue = queue_name()
        client.publish(queue, b"one")
        later = threading.Timer(0.5, lambda: client.publish(queue, b"two"))
        later.start()
        got = take(client, queue, "", 2)
        later.join(10)  # its reply read before the api stops (else a warning: cut short)
        assert [data for _, data in got] == [b"one", b"two"]
        assert got[0][0] < got[1][0]
    finally:
        api.stop()


def test_a_missing_queue_is_an_error_not_a_wait(live: LiveProcess) -> None:
    import pytest

    from zosciimq.client import QueueNotFound

    with pytest.raises(QueueNotFound):
        take(ZosciiClient(live.url), queue_name("missing"), "", 1)


def test_zoscii_tail_follows_the_stream_and_keeps_its_pointer(tmp_path: Path) -> None:
    """``zoscii tail -f --out-dir`` over the live service: files byte for byte, the pointer
    file at the last one, a large message fetched; SIGTERM stops it at once."""
    import signal
    import subprocess
    import sys

    from tests.support.cli_run import cli_env
    from zosciimq.core.states import read_pointer

    data_dir = tmp_path / "data"
    DataDir(data_dir).ensure()
    live = LiveProcess(data_dir, ZOSCII_LIVE_MAX_INLINE_BYTES="1024").start()
    try:
        queue = queue_name()
        big = os.urandom(3000)
        names = live.publish(queue, b"\x00\xffone")
        out, pointer = tmp_path / "inbox", tmp_path / "p.ptr"
        tail = subprocess.Popen(
            [sys.executable, "-m", "zosciimq.cli", "--url", live.url, "tail", queue, "-f",
             "--out-dir", str(out), "--pointer-file", str(pointer)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env(),
        )  # fmt: skip
        try:
            assert tail.stdout is not None
            assert tail.stdout.readline().decode().strip() == str(out / names[0])
            names += live.publish(queue, big, b"three")
            assert tail.stdout.readline().decode().strip() == str(out / names[1])
            assert tail.stdout.readline().decode().strip() == str(out / names[2])
            tail.send_signal(signal.SIGTERM)
            assert tail.wait(timeout=10) == 0
        finally:
            tail.kill()
            tail.wait()
        assert [(out / n).read_bytes() for n in names] == [b"\x00\xffone", big, b"three"]
        assert read_pointer(pointer) == names[-1]
    finally:
        live.kill()
