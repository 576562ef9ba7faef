"""Connections spread over gunicorn's workers: the least busy worker takes the next one.

gunicorn's workers share one listening socket, and whichever is awake first accepts.
A burst of keep-alive clients (eight partners' replicators, wrk's eight connections,
nginx's upstream connections) then lands on one process: seen here 8 of 8, 7 of 1 and 6
of 2 with two workers, for both worker classes (asyncio accepts up to 100 connections
a wake-up). One process runs on one core at a time, so the other stayed idle and a
queue's publishers got half the machine (docs/benchmarks.md, "One worker took every
connection").

Each worker keeps its count of open connections in a slot of a small anonymous shared
map, which gunicorn's master makes before it forks them (``pre_fork`` gives a worker
its slot, ``child_exit`` frees it). A worker woken by a new connection while a sibling
holds clearly fewer defers once, for ``DEFER_SECONDS``, so the sibling, woken by the same
connection, takes it; if the sibling does not (it is busy), the worker accepts after
all. The
counts are hints read without a lock: a stale one costs a less even spread, never a
connection.
"""

from __future__ import annotations

import mmap
import struct

DEFER_SECONDS = 0.001
_SLOT = struct.Struct("=i")


class Spread:
    """The workers' connection counts: a slot each, ``count + 1`` (0: a free slot)."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._map = mmap.mmap(-1, slots * _SLOT.size)  # MAP_SHARED: forked workers see it
        self._counts = memoryview(self._map).cast("i")

    # --- the master -----------------------------------------------------------------------
    def claim(self) -> int:
        """A free slot for a worker about to be forked (its count 0), or -1 if none is."""
        for slot in range(self.slots):
            if self._counts[slot] == 0:
                self._counts[slot] = 1
                return slot
        return -1

    def release(self, slot: int) -> None:
        """A worker exited: its slot is free again."""
        if 0 <= slot < self.slots:
            self._counts[slot] = 0

    # --- a worker -------------------------------------------------------------------------
    def set(self, slot: int, connections: int) -> None:
        if 0 <= slot < self.slots:
            self._counts[slot] = connections + 1

    def sibling_has_fewer(self, slot: int, connections: int) -> bool:
        """Whether another live worker holds clearly fewer connections than
        ``connections``: one fewer for a few, a quarter fewer for many (under a flood of
        short connections the counts move all the time; deferring on every difference
        of one would only slow the accepts)."""
        if connections == 0 or not 0 <= slot < self.slots:
            return False
        below = connections + 1 - (1 + connections // 4)  # a count under it is clearly fewer
        counts = self._counts
        return any(0 < counts[other] <= below for other in range(self.slots) if other != slot)
