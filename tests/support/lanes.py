"""Callers that arrive while a group commit's leader waits for its lock (core.group_commit).

``arrive_while_locked`` holds the commit's lock as another process would, starts the
leader, then the others one by one (each seen waiting in the lane before the next),
and releases the lock: what the test then counts (flushes) says whether they joined
the leader's group or waited for a commit of their own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from zosciimq.core.group_commit import Lane


def arrive_while_locked(
    lock: Callable[[], AbstractContextManager[Any]],
    lane: Callable[[], Lane[Any, Any]],
    leader: Callable[[], object],
    others: list[Callable[[], object]],
    *,
    sizes: list[int] | None = None,
) -> list[object]:
    """Run ``leader`` and then ``others`` while ``lock`` is held elsewhere; their results
    (or exceptions), in that order. ``sizes``: how many submissions each of ``others``
    puts in the lane (default one each)."""
    held, release = threading.Event(), threading.Event()
    results: list[object] = [None] * (1 + len(others))

    def other_process() -> None:
        with lock():
            held.set()
            assert release.wait(30)

    def call(index: int, function: Callable[[], object]) -> threading.Thread:
        def run() -> None:
            try:
                results[index] = function()
            except Exception as exc:  # reported to the test as a result
                results[index] = exc

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    holder = threading.Thread(target=other_process)
    holder.start()
    assert held.wait(10)
    callers = [call(0, leader)]
    _until(lambda: lane().committing, "the leader never started its commit")
    expected = 0
    sizes = sizes or [1] * len(others)
    for number, (function, size) in enumerate(zip(others, sizes, strict=True), start=1):
        callers.append(call(number, function))
        expected += size
        _until(lambda w=expected: len(lane().waiting) == w, "a caller never waited")
    release.set()
    for thread in [holder, *callers]:
        thread.join(30)
    return results


def _until(condition: Callable[[], bool], why: str) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, why
        time.sleep(0.002)
