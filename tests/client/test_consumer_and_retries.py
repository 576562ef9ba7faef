"""The pointer-persisting consumer, retried publishes, and resumable downloads."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.client.proxy import TcpProxy
from tests.support.queues import queue_name
from zosciimq.client import (
    FilePointerStore,
    TransportError,
    TransportOptions,
    ZosciiClient,
)


def test_consumer_resumes_after_restart_exactly_where_it_stopped(
    api: tuple[str, Path], tmp_path: Path
) -> None:
    queue = queue_name()
    pointer_file = tmp_path / "state" / "consumer.pointer"
    with ZosciiClient(api[0]) as client:
        for i in range(10):
            client.publish(queue, f"m{i}".encode())
        seen = []
        with client.consume(queue, FilePointerStore(pointer_file)) as consumer:
            for message in consumer:
                seen.append(message.data)
                if len(seen) == 4:
                    break  # a clean stop: the 4th is done
        # the file holds only the pointer: the name of the 4th message
        assert pointer_file.read_text() == consumer.pointer
        assert len(consumer.pointer) == 64

    with ZosciiClient(api[0]) as restarted:  # a new process would do just this
        with restarted.consume(queue, FilePointerStore(pointer_file)) as consumer:
            seen += [message.data for message in consumer]
    assert seen == [f"m{i}".encode() for i in range(10)]


def test_a_message_whose_handling_failed_is_delivered_again(
    api: tuple[str, Path], tmp_path: Path
) -> None:
    queue = queue_name()
    store = FilePointerStore(tmp_path / "p")
    with ZosciiClient(api[0]) as client:
        for i in range(3):
            client.publish(queue, f"m{i}".encode())
        handled = []
        with pytest.raises(RuntimeError):
            with client.consume(queue, store) as consumer:
                for message in consumer:
                    if message.data == b"m1":
                        raise RuntimeError("handler crashed")
                    handled.append(message.data)
        with client.consume(queue, store) as consumer:
            handled += [message.data for message in consumer]
    assert handled == [b"m0", b"m1", b"m2"]


def test_following_consumer_sees_new_messages_until_stopped(api: tuple[str, Path]) -> None:
    queue = queue_name()
    stop = threading.Event()
    with ZosciiClient(api[0]) as client:
        client.publish(queue, b"first")
        got: list[bytes] = []
        consumer = client.consume(queue, follow=True, poll_interval=0.05, stop=stop)

        def publish_later() -> None:
            with ZosciiClient(api[0]) as other:
                other.publish(queue, b"second")

        for message in consumer:
            got.append(message.data)
            if len(got) == 1:
                threading.Thread(target=publish_later).start()
            if len(got) == 2:
                stop.set()
    assert got == [b"first", b"second"]


def test_retried_publish_is_stored_once(api: tuple[str, Path]) -> None:
    """The server stores the message, the reply is lost, the client retries: one message."""
    url = urlsplit(api[0])
    proxy = TcpProxy(url.hostname, url.port).start()
    try:
        queue = queue_name()
        proxy.drop_replies = 1
        options = TransportOptions(retries=3, backoff_factor=0)
        with ZosciiClient(proxy.url, options=options) as client:
            client.publish(queue, b"\x00exactly once\xff")
        assert proxy.connections == 2  # the lost reply, then the retry
        with ZosciiClient(api[0]) as direct:
            first = direct.fetch(queue)
            assert first.data == b"\x00exactly once\xff"
            assert direct.fetch(queue, first.name) is None
    finally:
        proxy.stop()


def test_without_retries_a_lost_reply_is_a_transport_error(api: tuple[str, Path]) -> None:
    url = urlsplit(api[0])
    proxy = TcpProxy(url.hostname, url.port).start()
    try:
        proxy.drop_replies = 1
        with ZosciiClient(proxy.url, options=TransportOptions(retries=0)) as client:
            with pytest.raises(TransportError):
                client.publish(queue_name(), b"x")
    finally:
        proxy.stop()


def test_unreachable_server_is_a_transport_error() -> None:
    proxy = TcpProxy("127.0.0.1", 9).start()
    port = proxy.port
    proxy.stop()
    options = TransportOptions(retries=1, backoff_factor=0, connect_timeout=1)
    with ZosciiClient(f"http://127.0.0.1:{port}/", options=options) as client:
        with pytest.raises(TransportError) as error:
            client.fetch("q")
    assert error.value.reason == "unreachable"


class Interrupt(Exception):
    pass


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


@pytest.fixture(scope="module")
def big_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("big") / "source.bin"
    with open(path, "wb") as file:
        for _ in range(200):
            file.write(os.urandom(1 << 20))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["default", "original"])
def test_200_mb_download_interrupted_and_resumed_byte_exact(
    api: tuple[str, Path], big_file: Path, tmp_path: Path, mode: str
) -> None:
    queue = queue_name()
    with ZosciiClient(api[0]) as client, open(big_file, "rb") as file:
        client.publish(queue, file)  # streamed from disk as a raw body
    dest = tmp_path / "download.bin"

    def stop_after_70_mb(done: int, total: int | None) -> None:
        assert total == 200 << 20
        if done >= 70 << 20:
            raise Interrupt  # the connection is dropped mid-body

    with ZosciiClient(api[0], mode=mode) as client:
        with pytest.raises(Interrupt):
            client.download(queue, dest, on_progress=stop_after_70_mb)
        part = dest.with_name(dest.name + ".part")
        assert not dest.exists()
        assert (70 << 20) <= part.stat().st_size < (200 << 20)
        resumed = client.download(queue, dest)
    assert resumed.resumed_from >= 70 << 20
    assert resumed.size == 200 << 20
    assert not part.exists()
    assert _sha256(dest) == _sha256(big_file)


@pytest.mark.parametrize("mode", ["default", "original"])
def test_stored_download_resumes(api: tuple[str, Path], tmp_path: Path, mode: str) -> None:
    payload = os.urandom(5 << 20)
    dest = tmp_path / "stored.bin"
    with ZosciiClient(api[0], mode=mode) as client:
        name = client.store(payload).name

        def interrupt(done: int, total: int | None) -> None:
            if done >= 1 << 20:
                raise Interrupt

        with pytest.raises(Interrupt):
            client.download_stored(name, dest, on_progress=interrupt)
        result = client.download_stored(name, dest)
    assert result.resumed_from >= 1 << 20
    assert dest.read_bytes() == payload


def test_download_restarts_when_the_message_is_gone(api: tuple[str, Path], tmp_path: Path) -> None:
    """A partial download whose message was deleted meanwhile starts over with the next."""
    queue = queue_name()
    first, second = os.urandom(3 << 20), os.urandom(1 << 20)
    dest = tmp_path / "d.bin"
    with ZosciiClient(api[0]) as client:
        client.publish(queue, first)
        client.publish(queue, second)

        def interrupt(done: int, total: int | None) -> None:
            if done >= 1 << 20:
                raise Interrupt

        with pytest.raises(Interrupt):
            client.download(queue, dest, on_progress=interrupt)
        name = client.fetch(queue, length=1).name
        (api[1] / "queues" / queue / name).unlink()
        result = client.download(queue, dest)
    assert result.resumed_from == 0
    assert dest.read_bytes() == second


def test_download_of_an_empty_queue_is_none(client: ZosciiClient, tmp_path: Path) -> None:
    queue = queue_name()
    client.publish(queue, b"x")
    name = client.fetch(queue).name
    assert client.download(queue, tmp_path / "none.bin", after=name) is None


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown mode"):
        ZosciiClient("http://127.0.0.1:1/", mode="weird")  # type: ignore[arg-type]
