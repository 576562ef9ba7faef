"""A lock held by another process, as another api worker or container would hold it."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from zosciimq.core.locking import FileLock


@contextmanager
def held_by_another_process(path: Path | str) -> Iterator[Callable[[], None]]:
    """``path``'s lock, held by a forked child from the start of the block until the
    callable it gives is called or the block ends."""
    context = multiprocessing.get_context("fork")
    held, done = context.Event(), context.Event()
    child = context.Process(target=_hold, args=(str(path), held, done))
    child.start()
    try:
        assert held.wait(10), "the other process never took the lock"
        yield done.set
    finally:
        done.set()
        child.join(10)


def _hold(path: str, held: Any, done: Any) -> None:
    with FileLock(path):
        held.set()
        done.wait(10)
