"""The fan-out bench's reader processes (``bench.fanout_readers.ReaderProcesses``): every
kind of reader, spread over processes, sees every message once and in order, and times
each by the kernel's receipt."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from bench.fanout_readers import KINDS, ReaderProcesses, Tally, payload
from tests.support.live_process import LiveProcess
from tests.support.queues import queue_name
from zosciimq.core import DataDir

READERS = 40
MESSAGES = 5


@pytest.mark.parametrize("kind", KINDS)
def test_reader_processes_see_every_message_once_in_order(tmp_path: Path, kind: str) -> None:
    DataDir(tmp_path).ensure()
    live = LiveProcess(tmp_path).start()
    try:
        queue = queue_name()
        (start,) = live.publish(queue, payload(0))

        async def run() -> tuple[Tally, float, int, int]:
            readers = ReaderProcesses()
            try:
                await readers.start(kind, READERS, "127.0.0.1", live.port, queue, start, 2)
                before = await readers.measure()
                began = time.time()
                for number in range(1, MESSAGES + 1):
                    await asyncio.to_thread(live.publish, queue, payload(number))
                deadline = time.monotonic() + 30
                while await readers.reached(MESSAGES) < READERS:
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.05)
                requests = await readers.requests()
                tally = await readers.stop(READERS)
                return tally, time.time() - began, before, requests
            finally:
                readers.kill()

        tally, took, before, requests = asyncio.run(run())
        assert tally.errors == [] and tally.order_errors == 0 and tally.gaps == 0
        assert tally.reached_all(list(range(1, MESSAGES + 1))) == MESSAGES
        assert len(tally.latencies) == READERS * MESSAGES
        # a receipt time is the kernel's: after the send, and within the measure
        assert all(0 <= latency <= took for latency in tally.latencies), max(tally.latencies)
        if kind == "longpoll":
            assert before == READERS and requests >= READERS + READERS  # each asked again
        else:
            assert before == requests == READERS  # one request per stream
    finally:
        live.kill()
