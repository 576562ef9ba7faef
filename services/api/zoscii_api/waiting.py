"""Long-poll: a fetch that waits for the next message instead of answering "nothing".

One watcher per worker process. A waiting request parks on a condition variable and
costs no CPU. It is woken
  * at once by a publish through this same worker, and
  * within one poll interval by a publish anywhere else (another worker, another api
    container, the replicator): a single thread stats the index file of each queue
    that has waiters. Polling an index's size works on every file system, NFS included,
    where no change notification exists; it is one stat per watched queue per interval.
A woken request simply fetches again, so a spurious wake-up is harmless.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zoscii_api.context import RequestContext

log = logging.getLogger(__name__)


class QueueWatcher:
    def __init__(
        self, signature: Callable[[str], Hashable], interval: float, max_waiters: int
    ) -> None:
        self._signature = signature
        self._interval = interval
        self._max_waiters = max_waiters
        self._changed = threading.Condition()
        self._generation: Counter[str] = Counter()
        self._waiters: Counter[str] = Counter()
        self._seen: dict[str, Hashable] = {}
        self._thread: threading.Thread | None = None

    def generation(self, queue: str) -> int:
        """Read before fetching; ``wait`` returns once it moves on."""
        with self._changed:
            return self._generation[queue]

    def notify(self, queue: str) -> None:
        with self._changed:
            self._generation[queue] += 1
            self._changed.notify_all()

    def wait(self, queue: str, seen_generation: int, timeout: float) -> bool:
        """Wait until the queue may have changed; False when too many already wait here.

        The cap keeps threads free for publishers: a fetch over the cap answers at once
        ("no new messages") and the client simply asks again.
        """
        with self._changed:
            if sum(self._waiters.values()) >= self._max_waiters:
                return False
            self._ensure_thread()
            self._waiters[queue] += 1
            try:
                self._changed.wait_for(lambda: self._generation[queue] != seen_generation, timeout)
            finally:
                self._waiters[queue] -= 1
                if not self._waiters[queue]:
                    del self._waiters[queue]
        return True

    def wait_counted(
        self, context: RequestContext, queue: str, seen_generation: int, timeout: float
    ) -> bool:
        """``wait``, adding the time spent to the request's ``waited`` seconds: the
        endpoint keeps long-poll waiting out of its latency histogram."""
        started = time.monotonic()
        try:
            return self.wait(queue, seen_generation, timeout)
        finally:
            context.waited += time.monotonic() - started

    def waiting(self) -> int:
        with self._changed:
            return sum(self._waiters.values())

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._poll, name="queue-watcher", daemon=True)
            self._thread.start()

    def _poll(self) -> None:
        while True:
            time.sleep(self._interval)
            with self._changed:
                queues = list(self._waiters)
            for queue in queues:
                try:
                    current = self._signature(queue)
                except OSError:
                    log.debug("cannot stat the index of %s", queue, exc_info=True)
                    continue
                if self._seen.get(queue) != current:
                    self._seen[queue] = current
                    self.notify(queue)
