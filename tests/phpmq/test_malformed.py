"""Malformed frames and limits: the connection is closed with a logged reason (counted in
/metrics), nothing is published, and the process keeps serving everyone else."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from tests.phpmq import wire
from tests.support.phpmq_gateway import GatewayProcess, publish
from tests.support.queues import queue_name

LIMIT = 1024  # ZOSCII_PHPMQ_MAX_MESSAGE_BYTES of this module's gateway


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    process = GatewayProcess(
        tmp_path_factory.mktemp("phpmq-strict"),
        ZOSCII_PHPMQ_MAX_MESSAGE_BYTES=str(LIMIT),
        ZOSCII_PHPMQ_FRAME_TIMEOUT_SECONDS="0.5",
        ZOSCII_PHPMQ_MAX_CONNECTIONS="4",
        ZOSCII_PHPMQ_FIRST_MESSAGE_SECONDS="1",
    ).start()
    try:
        yield process
    finally:
        assert process.terminate() == 0
        process.kill()


def header(kind: str, count: str = "02") -> bytes:
    return f"H01{kind}{count}".encode()


def packet(kind: str, content: bytes, length: str | None = None) -> bytes:
    return b"P" + kind.encode() + (length or f"{len(content):029d}").encode() + content


QUEUE = packet("01", b"badframes")
CASES = {
    "bad_flag": b"X0100202" + QUEUE + packet("04", b"1"),
    "bad_flag_packet": header("002") + b"Q01" + b"0" * 28 + b"9badframes" + packet("04", b"1"),
    "bad_version": b"H0200202" + QUEUE + packet("04", b"1"),
    "bad_type": header("009") + QUEUE + packet("04", b"1"),
    "bad_type_letters": header("0a2") + QUEUE + packet("04", b"1"),
    "bad_type_dispatch": header("003", "04") + QUEUE,  # 003 goes server to client only
    "bad_count": header("002", "05") + QUEUE + packet("04", b"1"),
    "bad_count_letters": header("002", "x2") + QUEUE + packet("04", b"1"),
    "bad_count_zero": header("001", "00"),
    "bad_packet_type": header("002") + QUEUE + packet("09", b"1"),
    "packet_not_allowed": header("002") + QUEUE + packet("02", b"content"),
    "bad_length": header("002") + QUEUE + packet("04", b"1", length="0" * 28 + "x"),
    "bad_length_spaces": header("002") + QUEUE + packet("04", b"1", length=" " * 28 + "1"),
    "too_large_content": header("001") + QUEUE + packet("02", b"x" * (LIMIT + 1)),
    "too_large_field": header("002") + packet("01", b"q" * 2000) + packet("04", b"1"),
    "duplicate_packet": header("002") + QUEUE + QUEUE,
    "missing_packet": header("001") + QUEUE + packet("05", b"0"),
    "bad_queue": header("002") + packet("01", b"no/slashes") + packet("04", b"1"),
    "bad_queue_reserved": header("002") + packet("01", b"temp") + packet("04", b"1"),
    "bad_number": header("002") + QUEUE + packet("04", b"five"),
    "bad_number_zero": header("002") + QUEUE + packet("04", b"0"),
    "bad_number_ttl": header("001", "03") + QUEUE + packet("02", b"x") + packet("05", b"-1"),
    "unexpected": wire.consume("badframes", 1) + wire.authenticate("late"),
}
REASON = {
    "bad_flag_packet": "bad_flag",
    "bad_type_letters": "bad_type",
    "bad_type_dispatch": "bad_type",
    "bad_count_letters": "bad_count",
    "bad_count_zero": "bad_count",
    "bad_length_spaces": "bad_length",
    "too_large_content": "too_large",
    "too_large_field": "too_large",
    "bad_queue_reserved": "bad_queue",
    "bad_number_zero": "bad_number",
    "bad_number_ttl": "bad_number",
}


def still_serving(strict: GatewayProcess) -> None:
    queue = queue_name()
    publish(strict, queue, b"ok")
    with strict.connect() as client:
        client.send(wire.consume(queue, 1))
        assert client.read().content == b"ok"


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_malformed_frame_closes_the_connection(strict: GatewayProcess, case: str) -> None:
    reason = REASON.get(case, case)
    before = strict.metric("zoscii_phpmq_protocol_errors_total", reason=reason)
    with strict.connect() as client:
        client.send(CASES[case])
        client.wait_closed()
    strict.wait_for_log(rf"closed: {reason} \(")
    assert strict.metric("zoscii_phpmq_protocol_errors_total", reason=reason) == before + 1
    assert strict.messages("badframes") == []
    still_serving(strict)


def test_the_end_of_the_connection_inside_a_message(strict: GatewayProcess) -> None:
    before = strict.metric("zoscii_phpmq_protocol_errors_total", reason="truncated")
    for cut in (3, 8, 20, 40, 45):  # in the header, a packet header, a content
        with strict.connect() as client:
            client.send(wire.send("badframes", b"hello")[:cut])
            client.sock.shutdown(socket.SHUT_WR)
            client.wait_closed()
    assert strict.metric("zoscii_phpmq_protocol_errors_total", reason="truncated") == before + 5
    assert strict.messages("badframes") == []
    still_serving(strict)


def test_a_message_that_stalls_midway_is_cut_off(strict: GatewayProcess) -> None:
    with strict.connect() as client:
        client.send(wire.send("badframes", b"hello")[:30])
        started = time.monotonic()
        client.wait_closed()
        assert time.monotonic() - started < 3  # ZOSCII_PHPMQ_FRAME_TIMEOUT_SECONDS=0.5
    strict.wait_for_log(r"closed: timeout \(")
    still_serving(strict)


def test_an_idle_connection_between_messages_stays_open(strict: GatewayProcess) -> None:
    with strict.connect() as client:
        queue = queue_name()
        client.send(wire.consume(queue_name(), 1))  # its first message: established
        client.expect_nothing(1.5)  # 3 frame timeouts, past the first message's deadline
        client.send(wire.send(queue, b"later"))
        client.send(wire.consume(queue, 1))
        assert client.read().content == b"later"


def test_content_at_the_limit_is_accepted(strict: GatewayProcess) -> None:
    queue = queue_name()
    with strict.connect() as client:
        client.send(wire.send(queue, b"y" * LIMIT))
        client.send(wire.consume(queue, 1))
        assert client.read().content == b"y" * LIMIT


def test_connections_over_the_maximum_are_refused(strict: GatewayProcess) -> None:
    """When every slot is held by an established connection (one that sent its first
    message), a new one is refused; pending ones give theirs up (test_admission)."""
    strict.wait_idle()
    open_ = [strict.connect() for _ in range(4)]
    try:
        for client in open_:
            client.send(wire.consume(queue_name(), 1))
        strict.wait_connections(4)
        strict.wait_pending(0)  # their first messages handled: established
        with strict.connect() as extra:
            extra.wait_closed()
        strict.wait_for_log(r"refused: 4 open, the maximum")
        queue = queue_name()
        open_[0].send(wire.send(queue, b"still"))  # the open ones work
        open_[1].send(wire.consume(queue, 1))
        assert open_[1].read().content == b"still"
        open_.pop().close()
        strict.wait_connections(3)
        with strict.connect() as again:  # a place is free again
            again.send(wire.consume(queue, 1))
            again.expect_nothing(0.2)
    finally:
        for client in open_:
            client.close()
    assert strict.metric("zoscii_phpmq_connections_total", result="refused") >= 1


def test_a_flood_of_garbage_does_not_stop_the_process(strict: GatewayProcess) -> None:
    for size in (1, 7, 8, 100, 5000):
        with strict.connect() as client:
            try:
                client.send(bytes(range(256)) * (size // 256 + 1))
            except OSError:
                pass
            client.wait_closed()
    assert strict.process is not None and strict.process.poll() is None
    still_serving(strict)
