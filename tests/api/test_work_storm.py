"""A storm of competing consumers over HTTP: 8 processes share one consumer group of a
real multi-worker gunicorn api, some of them are killed with SIGKILL while they work,
and still every message is acked exactly once and none is lost.

Each consumer process (``tests.support.work_consumer``) prints what it was given, what it
is about to ack and what the server said; the test kills victims right after they were
given a batch, so they die holding leases. Their messages come back to the others once
the lease runs out (the group counts those redeliveries), and an ack request that a
victim may have sent but never saw answered is the only thing left uncertain: the
server's own count of acks settles it.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support.api_server import REPO, ApiServer
from zosciimq.core import DataDir, QueueStore
from zosciimq.core.groups import ConsumerGroups
from zosciimq.core.names import MAX_COUNTER, MessageName, format_stamp

QUEUE = "storm"
GROUP = "workers"
CONSUMERS = 8
VICTIMS = 3  # consumers 0, 1 and 2 are killed, one after another
LEASE = 2  # seconds: the victims' messages come back this long after they die
IDLE_WAIT = LEASE + 3  # a consumer stops after a consume that waited this long for nothing
BODY = bytes(range(256)) * 4


def fill(data_dir: Path, count: int) -> list[str]:
    """``count`` 1 KB messages written straight into the queue's directory, with valid,
    increasing names (what the api indexes on its first request), as a volume written by
    another server would hold them: faster than publishing thousands with an fsync each."""
    directory = DataDir(data_dir).queue_dir(QUEUE)
    directory.mkdir(parents=True)
    start = datetime.now(UTC) - timedelta(hours=1)
    names = [
        str(
            MessageName(
                format_stamp(start + timedelta(seconds=n // (MAX_COUNTER + 1))),
                n % (MAX_COUNTER + 1),
                30,
                str(uuid.uuid4()),
            )
        )
        for n in range(count)
    ]
    for name in names:
        (directory / name).write_bytes(BODY)
    return names


@dataclass
class Consumer:
    """One consumer process and what its lines said so far."""

    process: subprocess.Popen[bytes]
    got: list[str] = field(default_factory=list)
    sent: list[str] = field(default_factory=list)
    acked: list[str] = field(default_factory=list)
    fenced: list[str] = field(default_factory=list)
    done: bool = False
    killed: bool = False


class Storm:
    """The consumers, a reader thread each, and the victims' executioner.

    Victims 0 and 2 run stepped: after each batch they are given they wait for the test's
    go-ahead, and the test kills one instead once its share of the storm has passed, so
    it dies holding leases it never tried to ack. Victim 1 runs freely and is killed as
    soon as it announces an ack request: that request may or may not have been applied.
    """

    def __init__(self, url: str, count: int, batch: int) -> None:
        self.lock = threading.Lock()
        command = [sys.executable, "-m", "tests.support.work_consumer", url, QUEUE, GROUP]
        self.consumers = [
            Consumer(
                subprocess.Popen(
                    [*command, f"c{i}", str(batch), str(LEASE), str(IDLE_WAIT)]
                    + (["step"] if self.stepped(i) else []),
                    cwd=REPO,
                    stdin=subprocess.PIPE if self.stepped(i) else subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                )
            )
            for i in range(CONSUMERS)
        ]
        # Victim v dies once (v + 1) / (VICTIMS + 2) of the messages are acked: while
        # the storm is at its height.
        self.kill_at = [count * (v + 1) // (VICTIMS + 2) for v in range(VICTIMS)]
        self.readers = [
            threading.Thread(target=self._read, args=(n,), daemon=True) for n in range(CONSUMERS)
        ]
        for reader in self.readers:
            reader.start()

    @staticmethod
    def stepped(number: int) -> bool:
        return number < VICTIMS and number != 1

    def acked_so_far(self) -> int:
        return sum(len(c.acked) for c in self.consumers)

    def _read(self, number: int) -> None:
        consumer = self.consumers[number]
        process = consumer.process
        assert process.stdout is not None
        for raw in process.stdout:
            word, *names = raw.decode().split()
            with self.lock:
                if word == "DONE":
                    consumer.done = True
                    continue
                getattr(consumer, word.lower()).extend(names)
                if number >= VICTIMS or consumer.killed:
                    continue
                due = self.acked_so_far() >= self.kill_at[number]
                if due and word == ("SENT" if number == 1 else "GOT"):
                    process.send_signal(signal.SIGKILL)
                    consumer.killed = True
                elif word == "GOT" and process.stdin is not None:
                    process.stdin.write(b"go\n")
                    process.stdin.flush()

    def wait(self, timeout: float) -> None:
        for consumer in self.consumers:
            consumer.process.wait(timeout=timeout)
        for reader in self.readers:
            reader.join(timeout=timeout)

    def stop(self) -> None:
        for consumer in self.consumers:
            if consumer.process.poll() is None:
                consumer.process.kill()
                consumer.process.wait()
            if consumer.process.stdin is not None:
                consumer.process.stdin.close()


@pytest.fixture
def api(tmp_path: Path) -> Iterator[ApiServer]:
    server = ApiServer(tmp_path / "data", workers=2, threads=8)
    server.data_dir.mkdir(parents=True)
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.slow  # 8 processes, victims' leases to run out, and the idle wait at the end
@pytest.mark.parametrize(
    ("count", "batch"),
    [pytest.param(2_000, 10, id="2k"), pytest.param(20_000, 50, id="20k")],
)
def test_competing_consumers_ack_every_message_once_while_some_are_killed(
    api: ApiServer, count: int, batch: int
) -> None:
    names = fill(api.data_dir, count)
    api.start()
    api.wait_for_workers(2)
    storm = Storm(api.url, count, batch)
    try:
        storm.wait(timeout=300)
    finally:
        storm.stop()
    victims, survivors = storm.consumers[:VICTIMS], storm.consumers[VICTIMS:]

    assert all(v.killed and v.process.returncode == -signal.SIGKILL for v in victims), [
        (v.killed, v.process.returncode) for v in victims
    ]
    assert all(s.done and s.process.returncode == 0 for s in survivors), [
        (s.done, s.process.returncode) for s in survivors
    ]

    # Exactly once: no message acked ok twice, by one consumer or two.
    confirmed = Counter(name for c in storm.consumers for name in c.acked)
    twice = {name: n for name, n in confirmed.items() if n > 1}
    assert not twice, f"acked more than once: {list(twice.items())[:5]}"
    # None lost: each one acked, or in an ack request a victim sent as it was killed.
    in_flight = {name for v in victims for name in v.sent if name not in v.acked}
    lost = sorted(set(names) - set(confirmed) - in_flight)
    assert not lost, f"{len(lost)} of {count} never acked, first {lost[:3]}"
    assert set(confirmed) <= set(names)
    # What each victim held and had not even sent to ack came back and was acked by
    # another consumer.
    held = {name for v in victims for name in v.got if name not in v.sent}
    assert len(held) >= 2 * batch, "the stepped victims did not die holding their batch"
    assert held <= {name for s in survivors for name in s.acked}

    layout = DataDir(api.data_dir)
    stats = ConsumerGroups(layout, QueueStore(layout)).stats(QUEUE, GROUP)
    assert stats.acked == count  # the server's count settles the victims' in-flight acks
    assert (stats.waiting, stats.leased, stats.dead_lettered) == (0, 0, 0)
    assert stats.oldest_unacked is None
    assert stats.redelivered >= len(held)
    # An ack whose lease had run out meanwhile is fenced, and then acked by someone else.
    fenced = {name for c in storm.consumers for name in c.fenced}
    assert fenced <= set(confirmed) | in_flight
