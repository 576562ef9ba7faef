"""Publishes gathered on a worker's event loop and committed together, on it.

Under the ``asgi`` worker a publish costs no thread while it waits: the loop reads its
request, hands its messages to ``Gathered`` and goes on reading others. While a queue's
commit is in flight, the publishes that arrive for that queue wait in line; when it
ends, all of them go into the next commit at once (``QueueStore.publish_steps``: each
caller's messages all or nothing, each its own outcome). So a commit covers every
request for its queue that came during the one before. One commit is in flight per
queue; different queues commit side by side.

The commit runs on the loop. In ``sync`` durability it pauses at the log's flush (its
locks held, nothing of it visible yet): the flush runs in a thread while the loop reads
the next requests, which then form the next group, and the loop finishes the commit
when the flush has returned. Two exceptions flush on the loop itself: a worker with no
other request in hand (one client: a hand-over would only add to its wait), and a queue
another process committed to lately (the lock would be held until the loop takes the
commit up again, while that process waits for it). A queue whose lock is held at that
moment, and callers with a nonce (their nonce locks may be held elsewhere), commit in a
thread: the loop never waits for a lock. Measured in docs/benchmarks.md.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from zosciimq.core import QueueStore
from zosciimq.core.group_commit import Steps, run_flushes
from zosciimq.core.outgoing import Outgoing, PublishResult

log = logging.getLogger(__name__)

CONTENTION_SECONDS = 1.0
MAX_CONTENDED = 1024  # queues remembered as contended before the old ones are dropped
Results = list[PublishResult]
Outcome = Results | BaseException
Waiting = tuple[Sequence[Outgoing], "asyncio.Future[Results]"]


class Gathered:
    """One per worker process (its event loop's): see the module's docstring."""

    def __init__(self, queues: QueueStore, threads: int = 8) -> None:
        self.queues = queues
        self._waiting: dict[str, list[Waiting]] = {}  # by queue: the next commit's callers
        self._committing: set[str] = set()
        self._contention: dict[str, float] = {}  # queue -> when another process held it
        self._threads = ThreadPoolExecutor(threads, thread_name_prefix="commit")
        # Flushes apart from commits: a commit waiting in a thread for a lock held
        # elsewhere never delays the flush of one paused on the loop.
        self._flushes = ThreadPoolExecutor(threads, thread_name_prefix="flush")
        # Requests the worker's loop has in hand (the server counts them): a commit with
        # no other request about flushes on the loop, as a thread would only add its
        # hand-over to the wait.
        self.requests = 0

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
        self._flushes.shutdown(wait=True)

    def _commit_next(self, queue: str) -> None:
        if queue in self._committing:
            return  # the commit in flight starts the next one when it ends
        callers = self._waiting.pop(queue, [])
        if not callers:
            return
        on_the_loop = self._on_the_loop(queue, callers)
        batches = [messages for messages, _ in callers]
        # Other requests of this worker in play: they are read while the flush runs.
        company = self.requests > len(callers) or bool(self._waiting or self._committing)
        self._committing.add(queue)
        if not on_the_loop:
            loop = asyncio.get_running_loop()
            committing = self._threads.submit(self.queues.publish_each, queue, batches)
            committing.add_done_callback(
                lambda done: loop.call_soon_threadsafe(self._committed, queue, callers, done)
            )
            return
        steps = self.queues.publish_steps(queue, batches)
        if company and not self._contended(queue):
            self._step(queue, callers, steps, None)
            return
        try:
            outcomes = run_flushes(steps)
        except Exception as exc:  # every caller gets it (the endpoint answers it)
            outcomes = [exc] * len(callers)
        self._finish(queue, callers, outcomes)

    def _on_the_loop(self, queue: str, callers: list[Waiting]) -> bool:
        """Whether the callers' commit runs on the loop: not if one has a nonce (its
        lock is not looked at: it may be held elsewhere), nor if the queue's lock is
        held (a thread waits for it, never the loop)."""
        if any(message.nonce for messages, _ in callers for message in messages):
            return False
        try:
            holder = self.queues.is_busy(queue)
        except OSError:
            return False  # the thread's commit meets it and answers it
        if holder == "elsewhere":
            if len(self._contention) >= MAX_CONTENDED:
                self._forget_contention()
            self._contention[queue] = time.monotonic()
        return not holder

    def _forget_contention(self) -> None:
        """Drop what is no longer recent: a queue contended once and never published
        to again would otherwise keep its entry for the worker's life."""
        now = time.monotonic()
        for queue, seen in list(self._contention.items()):
            if now - seen >= CONTENTION_SECONDS:
                del self._contention[queue]

    def _contended(self, queue: str) -> bool:
        """Whether another process held ``queue``'s lock lately: a lock held through a
        flush in a thread is held longer (until the loop takes the commit up again),
        and the other process waits for it."""
        seen = self._contention.get(queue)
        if seen is not None and time.monotonic() - seen >= CONTENTION_SECONDS:
            del self._contention[queue]
            seen = None
        return seen is not None

    def _step(
        self,
        queue: str,
        callers: list[Waiting],
        steps: Steps[list[Outcome]],
        flushed: BaseException | None,
    ) -> None:
        """Take the loop's commit on to its next flush, run in a thread, or to its end."""
        try:
            flush = steps.send(None) if flushed is None else steps.throw(flushed)
        except StopIteration as done:
            outcomes: list[Outcome] = done.value
        except Exception as exc:  # every caller gets it (the endpoint answers it)
            outcomes = [exc] * len(callers)
        else:
            loop = asyncio.get_running_loop()
            flushing = self._flushes.submit(flush)
            flushing.add_done_callback(
                lambda done: loop.call_soon_threadsafe(
                    self._step, queue, callers, steps, done.exception()
                )
            )
            return
        self._finish(queue, callers, outcomes)

    def _committed(self, queue: str, callers: list[Waiting], done: Future[list[Outcome]]) -> None:
        failed = done.exception()
        outcomes: list[Outcome] = [failed] * len(callers) if failed else done.result()
        self._finish(queue, callers, outcomes)

    def _finish(self, queue: str, callers: list[Waiting], outcomes: list[Outcome]) -> None:
        self._committing.discard(queue)
        self._answer(queue, callers, outcomes)

    def _answer(self, queue: str, callers: list[Waiting], outcomes: list[Outcome]) -> None:
        for (_, answer), outcome in zip(callers, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                answer.set_exception(outcome)
            else:
                answer.set_result(outcome)
        if self._waiting.get(queue):
            self._commit_next(queue)
