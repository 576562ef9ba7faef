"""Connections spread over the workers (zoscii_api.balance, gunicorn_worker.Acceptor).
The whole of it under gunicorn: test_gunicorn.py's burst of clients."""

import asyncio
import logging
import os
import socket

from zoscii_api.balance import Spread
from zoscii_api.gunicorn_worker import Acceptor


def test_slots_are_claimed_and_released() -> None:
    spread = Spread(slots=2)
    first, second = spread.claim(), spread.claim()
    assert (first, second) == (0, 1)
    assert spread.claim() == -1  # none left: that worker simply never defers
    spread.release(first)
    assert spread.claim() == first


def test_a_worker_defers_only_to_a_sibling_with_clearly_fewer() -> None:
    spread = Spread(slots=4)
    me, sibling = spread.claim(), spread.claim()
    assert not spread.sibling_has_fewer(me, 0)  # an idle worker never waits
    spread.set(sibling, 0)
    assert spread.sibling_has_fewer(me, 1)
    spread.set(sibling, 3)
    assert not spread.sibling_has_fewer(me, 4)  # one fewer among many: not worth a wait
    assert spread.sibling_has_fewer(me, 5)
    spread.release(sibling)  # a dead worker's count is not a sibling's
    assert not spread.sibling_has_fewer(me, 5)


def test_the_counts_are_shared_with_forked_workers() -> None:
    spread = Spread(slots=2)
    slot = spread.claim()
    pid = os.fork()
    if pid == 0:  # the worker
        spread.set(slot, 7)
        os._exit(0)
    os.waitpid(pid, 0)
    other = spread.claim()
    assert not spread.sibling_has_fewer(other, 9)  # 7 is not clearly fewer than 9...
    assert spread.sibling_has_fewer(other, 10)  # ...but than 10: the child's 7 is seen


class Counting(asyncio.Protocol):
    made: list[asyncio.BaseTransport] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        Counting.made.append(transport)


def test_the_acceptor_takes_one_connection_a_wake_up_and_defers_once() -> None:
    """A deferring worker still takes the connection when no sibling does; and every
    connection of a burst is served."""

    async def run() -> list[float]:
        loop = asyncio.get_running_loop()
        listener = socket.create_server(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        asked: list[float] = []

        def defers() -> bool:
            asked.append(loop.time())
            return True  # a sibling always "has fewer", but never takes anything

        acceptor = Acceptor(loop, listener, Counting, None, defers, logging.getLogger("test"))
        acceptor.start()
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(5)]
        for _ in range(500):
            if len(Counting.made) == 5:
                break
            await asyncio.sleep(0.002)
        acceptor.close()
        await acceptor.wait_closed()
        for transport in Counting.made:
            transport.close()
        for client in clients:
            client.close()
        listener.close()
        return asked

    Counting.made = []
    asked = asyncio.run(run())
    assert len(Counting.made) == 5
    assert len(asked) == 5  # asked once per connection: a deferral is not repeated
