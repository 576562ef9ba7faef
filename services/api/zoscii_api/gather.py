"""Publishes gathered on a worker's event loop and committed together, on it or in a thread.

Under the ``asgi`` worker a publish costs no thread while it waits: the loop reads its
request, hands its messages to ``Gathered`` and goes on reading others. While a queue's
commit runs (in a thread of ``Gathered``'s own, so the loop is free), the publishes that
arrive for that queue wait in line; when it ends, all of them go into the next commit
at once (``QueueStore.publish_each``: each caller's messages all or nothing, each its
own outcome). So a commit covers every request for its queue that came during the one
before, and no request waits for more than the commit before its own. One commit is in
flight per queue; different queues commit side by side.

A queue's callers are committed on the loop itself when nothing else of the worker is
waiting or committing (for any queue), none has a nonce and the queue's lock is free:
the hand-off to a thread and back, and the thread's wake-ups, cost more than the loop's
wait for the flush, during which the next group gathers in the socket buffers (as a
Redis with ``appendfsync always`` writes and flushes in its loop before it answers).
Measured with 8 clients on one queue: 0.35 ms of CPU a publish against 0.44-0.49 in a
thread, and in ``interval`` 1.3x the rate (docs/benchmarks.md). A worker with several
queues to commit at once uses threads, so their flushes overlap. The lock is looked at
first so that a long holder elsewhere (an admin purge, another container's recovery)
blocks a thread, never the loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from zosciimq.core import QueueStore
from zosciimq.core.outgoing import Outgoing, PublishResult

log = logging.getLogger(__name__)

Results = list[PublishResult]
Outcome = Results | BaseException
Waiting = tuple[Sequence[Outgoing], "asyncio.Future[Results]"]


class Gathered:
    """One per worker process (its event loop's): see the module's docstring."""

    def __init__(self, queues: QueueStore, threads: int = 8) -> None:
        self.queues = queues
        self._waiting: dict[str, list[Waiting]] = {}  # by queue: the next commit's callers
        self._committing: set[str] = set()
        self._threads = ThreadPoolExecutor(threads, thread_name_prefix="commit")

    async def publish(
        self, queue: str, messages: Sequence[Outgoing], *, release: Callable[[], None]
    ) -> Results:
        """The results of publishing ``messages`` (all or nothing) to the clean ``queue``,
        committed with the others gathered; raises what refused them. ``release`` (which
        frees the uploads) is called once the commit is over, also when the caller was
        cancelled meanwhile (a client that left): the messages are published anyway, as
        a request that was read in full is under any server."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Results] = loop.create_future()
        answer.add_done_callback(lambda _: release())
        waiting = self._waiting.setdefault(queue, [])
        waiting.append((messages, answer))
        if len(waiting) == 1 and queue not in self._committing:
            # After the loop has read what is ready: those requests join this commit.
            loop.call_soon(self._commit_next, queue)
        return await asyncio.shield(answer)

    def close(self) -> None:
        self._threads.shutdown(wait=True)

    def _commit_next(self, queue: str) -> None:
        if queue in self._committing:
            return  # the commit in flight starts the next one when it ends
        callers = self._waiting.pop(queue, [])
        if not callers:
            return
        batches = [messages for messages, _ in callers]
        if self._on_the_loop(queue, callers):
            outcomes: list[Outcome]
            try:
                outcomes = self.queues.publish_each(queue, batches)
            except Exception as exc:  # every caller gets it (the endpoint answers it)
                outcomes = [exc] * len(callers)
            self._answer(queue, callers, outcomes)
            return
        self._committing.add(queue)
        loop = asyncio.get_running_loop()
        committing = self._threads.submit(self.queues.publish_each, queue, batches)
        committing.add_done_callback(
            lambda done: loop.call_soon_threadsafe(self._committed, queue, callers, done)
        )

    def _on_the_loop(self, queue: str, callers: list[Waiting]) -> bool:
        # Nothing else in this worker: no other queue's commit in flight, nor one waiting
        # to start (it would wait for this flush, where in a thread its own runs beside).
        if self._committing or self._waiting:
            return False
        if any(message.nonce for messages, _ in callers for message in messages):
            return False  # a nonce's lock is not looked at: it may be held elsewhere
        try:
            return not self.queues.is_busy(queue)
        except OSError:
            return False  # the thread's commit meets it and answers it

    def _committed(self, queue: str, callers: list[Waiting], done: Future[list[Outcome]]) -> None:
        self._committing.discard(queue)
        failed = done.exception()
        outcomes: list[Outcome] = [failed] * len(callers) if failed else done.result()
        self._answer(queue, callers, outcomes)

    def _answer(self, queue: str, callers: list[Waiting], outcomes: list[Outcome]) -> None:
        for (_, answer), outcome in zip(callers, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                answer.set_exception(outcome)
            else:
                answer.set_result(outcome)
        if self._waiting.get(queue):
            self._commit_next(queue)
