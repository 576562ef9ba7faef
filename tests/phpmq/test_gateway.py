"""The gateway against a real process on a temporary data directory, with the test
client (``wire``): what PHPMQ clients see, and what the core then holds."""

from __future__ import annotations

import threading
import time

import pytest

from tests.phpmq import wire
from tests.support.phpmq_gateway import GatewayProcess, publish
from tests.support.queues import queue_name
from zosciimq.core import DataDir, Outgoing, QueueStore, Upload

EVERY_BYTE = bytes(range(256)) * 3 + b"\r\n\x00end"


def ids(messages: list[wire.Message]) -> list[str]:
    return [m.id for m in messages]


def test_send_publishes_byte_exact_with_its_ttl(gateway: GatewayProcess) -> None:
    queue = queue_name("Mixed_")
    with gateway.connect() as client:
        client.send(wire.send(queue, EVERY_BYTE, 3600))
        client.send(wire.send(queue, b"", 0))  # empty content, no expiry (the real client's 0)
        gateway.wait_for_messages(queue.lower(), 2)
    (first, data), (second, empty) = gateway.messages(queue.lower())  # lowercased, as the api
    assert (data, empty) == (EVERY_BYTE, b"")
    assert first[19:23] == "0007"  # ZOSCII_DEFAULT_RETENTION_DAYS (no gateway retention set)
    store = gateway.store()
    try:
        expiries = store.expiries(queue.lower(), [first, second])
    finally:
        store.close()
    assert set(expiries) == {first}  # TTL 0: no expiry at all
    assert time.time() + 3590 < expiries[first] <= time.time() + 3600


def test_dispatch_carries_the_remaining_ttl_and_the_clients_spelling(
    gateway: GatewayProcess,
) -> None:
    queue = queue_name("Foo")
    publish(gateway, queue, b"with ttl", ttl=3600)
    publish(gateway, queue, b"without")
    with gateway.connect() as client:
        client.send(wire.consume(queue, 5))
        one, two = client.read(), client.read()
    assert (one.type, one.queue, one.content) == (wire.DISPATCH, queue, b"with ttl")
    assert 3590 <= one.ttl <= 3600
    assert len(one.id) == 32 and int(one.id, 16) >= 0  # the receipt's token
    assert (two.content, two.packets[wire.TTL]) == (b"without", b"0")  # no TTL: "0"


def test_a_window_of_two_over_five_messages(gateway: GatewayProcess) -> None:
    queue = queue_name()
    publish(gateway, queue, *[b"m%d" % i for i in range(5)])
    with gateway.connect() as client:
        client.send(wire.consume(queue, 2))
        got = [client.read(), client.read()]
        client.expect_nothing(0.4)  # exactly two until an ack
        client.send(wire.ack(queue, got[0].id))
        got.append(client.read())
        client.expect_nothing(0.3)
        client.send(wire.ack(queue, got[1].id))
        client.send(wire.ack(queue, got[2].id))
        got += [client.read(), client.read()]
        client.expect_nothing(0.3)
        for message in got[3:]:
            client.send(wire.ack(queue, message.id))
        gateway.wait_for_stats(queue, lambda s: s.acked == 5)
    assert [m.content for m in got] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    stats = gateway.groups().stats(queue, "phpmq")
    assert (stats.acked, stats.leased, stats.waiting) == (5, 0, 0)


def test_a_second_consume_request_changes_the_window(gateway: GatewayProcess) -> None:
    queue = queue_name()
    publish(gateway, queue, b"1", b"2", b"3")
    with gateway.connect() as client:
        client.send(wire.consume(queue, 1))
        first = client.read()
        client.expect_nothing(0.2)
        client.send(wire.consume(queue, 3))
        assert [first.content, client.read().content, client.read().content] == [b"1", b"2", b"3"]


def test_requeue_puts_the_message_behind_those_waiting(gateway: GatewayProcess) -> None:
    queue = queue_name()
    publish(gateway, queue, b"A", b"B", b"C")
    with gateway.connect() as client:
        client.send(wire.consume(queue, 1))
        a = client.read()
        assert a.content == b"A"
        client.send(wire.requeue(queue, a.id))
        order, again = [], None
        for _ in range(3):
            message = client.read()
            order.append(message.content)
            if message.content == b"A":
                again = message
            client.send(wire.ack(queue, message.id))
        client.expect_nothing(0.3)
    assert order == [b"B", b"C", b"A"]
    # Issue 27 item 8: the requeued message keeps its id, as php-mq's own server keeps it.
    assert again is not None and again.id == a.id
    assert gateway.groups().stats(queue, "phpmq").acked == 3


def test_requeue_with_a_new_ttl_then_expiry_dead_letters(gateway: GatewayProcess) -> None:
    queue = queue_name()
    publish(gateway, queue, b"short-lived", b"blocker")
    with gateway.connect() as client:
        client.send(wire.consume(queue, 1))
        message = client.read()
        assert (message.content, message.ttl) == (b"short-lived", 0)
        client.send(wire.requeue(queue, message.id, ttl=1))  # now 1 s to live
        blocker = client.read()
        assert blocker.content == b"blocker"
        time.sleep(1.2)  # the requeued one expires while the window is full
        client.send(wire.ack(queue, blocker.id))
        client.expect_nothing(0.5)
    assert gateway.dead_letters(queue) == [b"short-lived"]


def test_dead_letter_moves_the_message_to_the_dead_letter_queue(
    gateway: GatewayProcess,
) -> None:
    queue = queue_name()
    publish(gateway, queue, b"poison", b"fine")
    with gateway.connect() as client:
        client.send(wire.consume(queue, 1))
        poison = client.read()
        client.send(wire.dead_letter(queue, poison.id))
        fine = client.read()
        client.send(wire.ack(queue, fine.id))
        client.expect_nothing(0.3)
    assert (poison.content, fine.content) == (b"poison", b"fine")
    assert gateway.dead_letters(queue) == [b"poison"]
    assert gateway.groups().stats(queue, "phpmq").dead_lettered == 1


@pytest.mark.slow  # waits out a TTL; expiry at the gateway: test_requeue_with_a_new_ttl_*
def test_a_message_past_its_ttl_is_dead_lettered_not_dispatched(
    gateway: GatewayProcess,
) -> None:
    queue = queue_name()
    publish(gateway, queue, b"expires", ttl=1)
    publish(gateway, queue, b"stays")
    time.sleep(1.1)
    with gateway.connect() as client:
        client.send(wire.consume(queue, 5))
        assert client.read().content == b"stays"
        client.expect_nothing(0.3)
    assert gateway.dead_letters(queue) == [b"expires"]


def test_two_connections_are_competing_consumers(gateway: GatewayProcess) -> None:
    queue = queue_name()
    with gateway.connect() as one, gateway.connect() as two:
        one.send(wire.consume(queue, 3))
        two.send(wire.consume(queue, 3))
        time.sleep(0.2)
        publish(gateway, queue, *[b"w%d" % i for i in range(6)])
        got_one = [one.read() for _ in range(3)]
        got_two = [two.read() for _ in range(3)]
        one.expect_nothing(0.2)
        two.expect_nothing(0.1)
        contents = [m.content for m in got_one + got_two]
        assert sorted(contents) == [b"w%d" % i for i in range(6)]  # each to one of them
        for message in got_one:
            one.send(wire.ack(queue, message.id))
        for message in got_two:
            two.send(wire.ack(queue, message.id))
        gateway.wait_for_stats(queue, lambda s: s.acked == 6)
    assert gateway.groups().stats(queue, "phpmq").acked == 6


def test_a_closed_connections_messages_go_to_the_other_consumer(
    gateway: GatewayProcess,
) -> None:
    queue = queue_name()
    publish(gateway, queue, b"x1", b"x2", b"x3")
    with gateway.connect() as other:
        first = gateway.connect()
        first.send(wire.consume(queue, 2))
        held = [first.read(), first.read()]
        other.send(wire.consume(queue, 3))
        assert other.read().content == b"x3"
        other.expect_nothing(0.3)  # the first connection's two are leased to it
        first.close()  # without acknowledging: released at once, not after the lease
        again = [other.read(timeout=2), other.read(timeout=2)]
    assert [m.content for m in held] == [b"x1", b"x2"]
    assert [m.content for m in again] == [b"x1", b"x2"]  # in their order
    assert ids(again) == ids(held)  # the same messages: the same ids (php-mq's server too)


def test_an_ack_after_a_reconnect_works(gateway: GatewayProcess) -> None:
    queue = queue_name()
    publish(gateway, queue, b"done-elsewhere")
    with gateway.connect() as first:
        first.send(wire.consume(queue, 1))
        message = first.read()
    with gateway.connect() as second:  # a new connection, no consume request
        second.send(wire.ack(queue, message.id))
        gateway.wait_for_stats(queue, lambda s: s.acked == 1)
        second.send(wire.consume(queue, 1))
        second.expect_nothing(0.4)  # acked: not delivered again
    assert gateway.groups().stats(queue, "phpmq").acked == 1


def test_a_late_ack_by_id_settles_the_messages_latest_delivery(gateway: GatewayProcess) -> None:
    """The id names the message, not a delivery: an ack sent after a reconnect, once the
    message went to another consumer, finishes it (its work was done), and frees that
    consumer's window; the second consumer's own ack of it is then ignored."""
    queue = queue_name()
    publish(gateway, queue, b"once", b"next")
    with gateway.connect() as first:
        first.send(wire.consume(queue, 1))
        message = first.read()
    with gateway.connect() as second, gateway.connect() as late:
        second.send(wire.consume(queue, 1))
        redelivered = second.read()
        assert (redelivered.content, redelivered.id) == (b"once", message.id)
        late.send(wire.ack(queue, message.id))  # the first consumer, after a reconnect
        assert second.read().content == b"next"  # its window was freed by that ack
        second.send(wire.ack(queue, redelivered.id))
        gateway.wait_for_log(r"ack of unknown message id")
    assert gateway.wait_for_stats(queue, lambda s: s.acked == 1).acked == 1


def test_an_unknown_or_fenced_id_is_logged_and_answered_by_nothing(
    gateway: GatewayProcess,
) -> None:
    queue = queue_name()
    publish(gateway, queue, b"only")
    with gateway.connect() as client:
        client.send(wire.consume(queue, 1))
        message = client.read()
        client.send(wire.ack(queue, "0" * 32))  # never dispatched
        client.send(wire.ack(queue_name(), message.id))  # the id of another queue
        client.send(wire.ack(queue, message.id))
        client.send(wire.ack(queue, message.id))  # twice: finished already
        client.expect_nothing(0.4)  # nothing answered, the connection open
        client.send(wire.send(queue, b"still served"))
        client.read()
    gateway.wait_for_log(r"ack of unknown message id '0{32}'")
    assert gateway.groups().stats(queue, "phpmq").acked == 1


def test_messages_published_by_another_process_are_dispatched(
    gateway: GatewayProcess,
) -> None:
    """A publish through the core (as the api does, in another process) wakes the
    consumer: the gateway watches the queue's index, not only its own publishes."""
    queue = queue_name()
    with gateway.connect() as client:
        client.send(wire.consume(queue, 2))  # before the queue even exists
        client.expect_nothing(0.3)
        data_dir = DataDir(gateway.data_dir)
        store = QueueStore(data_dir)
        try:
            upload = Upload(data_dir)
            upload.write(b"from the api")
            store.publish_many(queue, [Outgoing(upload, 1, None, time.time() + 60)])
            upload.discard()
        finally:
            store.close()
        started = time.monotonic()
        message = client.read()
        assert time.monotonic() - started < 1.0
    assert message.content == b"from the api" and 50 <= message.ttl <= 60


def test_each_dispatched_message_arrives_in_one_send(gateway: GatewayProcess) -> None:
    queue = queue_name()
    contents = [b"small", EVERY_BYTE * 40, b"x" * 20_000]
    with gateway.connect() as client:
        client.send(wire.consume(queue, 3))
        time.sleep(0.2)
        for content in contents:
            publish(gateway, queue, content)
            message = client.read_at_once()
            assert message.content == content
            client.send(wire.ack(queue, message.id))


@pytest.mark.slow  # works past a 3 s lease
def test_leases_are_renewed_while_the_connection_is_open(gateway: GatewayProcess) -> None:
    """The gateway's lease is 3 s here: a client working longer keeps its message."""
    queue = queue_name()
    publish(gateway, queue, b"long work")
    with gateway.connect() as worker, gateway.connect() as other:
        worker.send(wire.consume(queue, 1))
        message = worker.read()
        other.send(wire.consume(queue, 1))
        other.expect_nothing(4.5)
        worker.send(wire.ack(queue, message.id))
        gateway.wait_for_stats(queue, lambda s: s.acked == 1)
    stats = gateway.groups().stats(queue, "phpmq")
    assert (stats.acked, stats.redelivered) == (1, 0)


@pytest.mark.parametrize("size", [0, 1, 100_000])
def test_content_sizes_round_trip(gateway: GatewayProcess, size: int) -> None:
    queue = queue_name()
    content = (EVERY_BYTE * (size // len(EVERY_BYTE) + 1))[:size]
    with gateway.connect() as client:
        client.send(wire.send(queue, content))
        client.send(wire.consume(queue, 1))
        message = client.read()
        client.send(wire.ack(queue, message.id))
    assert message.content == content


def test_many_concurrent_consumes_and_acks_on_one_group(gateway: GatewayProcess) -> None:
    """Two consumers acking as fast as they can: the core's group lock is taken by many
    threads of the gateway at once (a race in the core's FileLock lost connections here
    with EBADF, see LockPins), and every message is acked exactly once."""
    queue, count = queue_name(), 800
    with gateway.connect() as client:
        client.sock.sendall(b"".join(wire.send(queue, b"%d" % i) for i in range(count)))
        assert len(gateway.wait_for_messages(queue, count, timeout=60)) == count
    seen: list[bytes] = []

    def work(client: wire.Client) -> None:
        client.send(wire.consume(queue, 20))
        while True:
            try:
                message = client.read(timeout=1.5)
            except TimeoutError:
                return
            seen.append(message.content)
            client.send(wire.ack(queue, message.id))

    with gateway.connect() as one, gateway.connect() as two:
        threads = [threading.Thread(target=work, args=(c,)) for c in (one, two)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert sorted(seen, key=int) == [b"%d" % i for i in range(count)]
    assert "lost while dispatching" not in gateway.log()
    assert gateway.wait_for_stats(queue, lambda s: s.acked == count).acked == count


def test_the_queue_policy_applies_to_what_phpmq_clients_send(tmp_path) -> None:
    """The api's policy file (ZOSCII_POLICY_FILE): the queue's default retention is in
    the names the gateway gives, and a full queue with ``refuse`` keeps nothing more."""
    policy = tmp_path / "policy.toml"
    policy.write_text('[queues."audit"]\nretention_days = 90\nmax_messages = 2\n')
    gateway = GatewayProcess(
        tmp_path / "data", ZOSCII_POLICY_FILE=str(policy), ZOSCII_DEFAULT_RETENTION_DAYS="7"
    ).start()
    try:
        with gateway.connect() as client:  # PHPMQ has no error reply: a refusal closes
            for content in (b"one", b"two", b"three"):
                client.send(wire.send("audit", content))
            gateway.wait_for_log("Queue 'audit' is full", timeout=10)
        with gateway.connect() as client:
            client.send(wire.send("other", b"x"))
        assert gateway.wait_for_messages("other", 1, timeout=10) == [b"x"]
        audit = gateway.messages("audit")
        assert [data for _, data in audit] == [b"one", b"two"]
        assert all(name[19:23] == "0090" for name, _ in audit)
        assert gateway.messages("other")[0][0][19:23] == "0007"
    finally:
        gateway.kill()
