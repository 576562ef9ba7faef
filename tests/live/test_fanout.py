"""The fan-out in small: a couple of hundred readers of one queue, by long-poll, SSE and
WebSocket at once, see every message exactly once and in order, while publishers run;
and a kill -9 of the service loses no reader's place (the 10,000 are bench.fanout's)."""

from __future__ import annotations

import asyncio
import resource
import time
from pathlib import Path

import pytest

from bench.fanout_readers import READERS, Reader, Tally, connect_readers, payload
from tests.support.live_process import LiveProcess
from tests.support.queues import queue_name
from zosciimq.core import DataDir

pytestmark = pytest.mark.slow  # 1,600 connections and a kill -9: `make test`, not the fast tier

READERS_PER_KIND = 200
MESSAGES = 30


def _raise_open_files(wanted: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            pytest.skip(f"needs {wanted} open files, the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def publish_all(live: LiveProcess, queue: str, first: int, count: int) -> None:
    """Messages ``first`` .. ``first + count - 1``, one after the other (the readers
    check that the sequence in each payload follows the order of the names)."""
    for number in range(first, first + count):
        live.publish(queue, payload(number))


@pytest.mark.parametrize("watch", ["inotify", "poll"])
def test_hundreds_of_readers_of_each_kind_get_everything_once_in_order(
    tmp_path: Path, watch: str
) -> None:
    _raise_open_files(4 * READERS_PER_KIND + 256)
    DataDir(tmp_path).ensure()
    live = LiveProcess(tmp_path, ZOSCII_LIVE_WATCH=watch).start()
    try:
        queue = queue_name()
        (start,) = live.publish(queue, payload(0))

        async def run() -> dict[str, Tally]:
            tallies = {kind: Tally(READERS_PER_KIND) for kind in READERS}
            readers: list[Reader] = []
            for kind, tally in tallies.items():
                tally.measuring = True
                readers += await connect_readers(
                    kind, READERS_PER_KIND, "127.0.0.1", live.port, queue, start, tally
                )
            await asyncio.to_thread(publish_all, live, queue, 1, MESSAGES)
            deadline = time.monotonic() + 60
            while any(r.received < MESSAGES for r in readers) and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            for reader in readers:
                reader.close()
            return tallies

        tallies = asyncio.run(run())
        for kind, tally in tallies.items():
            assert tally.errors == [], (kind, tally.errors[:3])
            assert tally.order_errors == 0 and tally.gaps == 0, kind
            assert tally.reached_all(list(range(1, MESSAGES + 1))) == MESSAGES, kind
            assert sum(tally.per_sequence.values()) == MESSAGES * READERS_PER_KIND, kind
        # one read per round served every reader: far fewer rounds than deliveries
        rounds = live.metric("zoscii_live_round_seconds_count")
        assert 0 < rounds <= MESSAGES * 4, rounds
    finally:
        live.kill()


def test_kill_9_loses_no_readers_place(tmp_path: Path) -> None:
    """1,000 SSE readers follow a queue; the service is killed (SIGKILL) mid-stream and
    started again; each reader resumes after the last name it received and ends with
    every message exactly once, in order."""
    count = 1000
    _raise_open_files(count + 256)
    DataDir(tmp_path).ensure()
    live = LiveProcess(tmp_path).start()
    try:
        queue = queue_name()
        (start,) = live.publish(queue, payload(0))
        total = 40

        async def run() -> Tally:
            tally = Tally(count)
            tally.measuring = True
            readers = await connect_readers("sse", count, "127.0.0.1", live.port, queue, start,
                                            tally)  # fmt: skip
            await asyncio.to_thread(publish_all, live, queue, 1, total // 2)
            await asyncio.sleep(0.3)
            live.kill()  # SIGKILL: no goodbye to anyone
            await asyncio.gather(*(r.closed for r in readers))
            # published while nobody serves them: nothing lost
            await asyncio.to_thread(publish_all, live, queue, total // 2 + 1, total // 4)
            await asyncio.to_thread(live.start)
            resumed = await resume(readers, live.port, queue, tally)
            await asyncio.to_thread(publish_all, live, queue, total * 3 // 4 + 1, total // 4)
            deadline = time.monotonic() + 60
            while any(r.received < total for r in resumed) and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            for reader in resumed:
                reader.close()
            return tally

        tally = asyncio.run(run())
        assert tally.order_errors == 0 and tally.gaps == 0
        assert tally.reached_all(list(range(1, total + 1))) == total
        assert sum(tally.per_sequence.values()) == total * count
    finally:
        live.kill()


async def resume(old: list[Reader], port: int, queue: str, tally: Tally) -> list[Reader]:
    """A new connection per reader, after the last name it received (its state kept)."""
    loop = asyncio.get_running_loop()
    gate = asyncio.Semaphore(200)
    fresh: list[Reader] = []

    async def one(previous: Reader) -> None:
        async with gate:
            _, reader = await loop.create_connection(
                lambda: READERS["sse"](tally, f"127.0.0.1:{port}", queue, previous.pointer),
                "127.0.0.1",
                port,
            )
            reader.last, reader.sequence = previous.last, previous.sequence
            reader.received = previous.received
            await asyncio.wait_for(reader.ready, 60)
            fresh.append(reader)

    await asyncio.gather(*(one(r) for r in old))
    return fresh
